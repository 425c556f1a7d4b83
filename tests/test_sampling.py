"""`minigpt sample`: what a plain run, a LoRA run and an exported file write; the same seed, the same text."""

import hashlib

import pytest
import torch

from minigpt import sampling
from minigpt.cli import main
from minigpt.config import TrainConfig
from minigpt.model import GPT, get_config
from minigpt.train import train

COMMON = dict(preset="tiny", batch=2, ctx=16, sample_tokens=0, verbose=False, eval_batches=1)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, markov_data):
    """A plain run, a LoRA run started from it, and the LoRA run exported."""
    root = tmp_path_factory.mktemp("sample")
    train(TrainConfig(**COMMON, steps=2, out=str(root / "plain")), data=markov_data)
    lora = dict(lora_rank=2, base_dtype="nf4", init_from=str(root / "plain"))
    train(TrainConfig(**COMMON, **lora, steps=2, lr=3e-2, out=str(root / "lora")), data=markov_data)
    assert main(["export", str(root / "lora"), "--out", str(root / "merged.pt")]) == 0
    return root


def test_the_same_seed_writes_the_same_text():
    model = GPT(get_config("tiny"), seed=0)
    one = sampling.sample_text(model, "minigpt-8k", 12, torch.device("cpu"), "Once upon a time", seed=3)
    assert one == sampling.sample_text(model, "minigpt-8k", 12, torch.device("cpu"), "Once upon a time", seed=3)
    assert one.startswith("Once upon a time") and len(one) > len("Once upon a time")
    greedy = sampling.sample_text(model, "minigpt-8k", 12, torch.device("cpu"), "Once", temperature=0)
    assert greedy == sampling.sample_text(model, "minigpt-8k", 12, torch.device("cpu"), "Once", seed=9, temperature=0)


@pytest.mark.parametrize("what,label", [("plain", "run at step 2"), ("lora", "LoRA run"), ("merged.pt", "exported")])
def test_sample_prints_what_each_kind_of_run_writes(runs, what, label, capsys):
    assert main(["sample", str(runs / what), "--prompt", "Recipe:", "--tokens", "8", "--seed", "1"]) == 0
    header, text = capsys.readouterr().out.split("\n", 1)
    assert label in header and text.startswith("Recipe:")


def test_the_exported_file_writes_what_the_lora_run_writes(runs, capsys):
    """Greedy decoding is a function of the logits: the merged model picks the same tokens."""
    argv = ["--prompt", "Once", "--tokens", "10", "--temperature", "0"]
    main(["sample", str(runs / "lora"), *argv])
    adapted = capsys.readouterr().out.split("\n", 1)[1]
    main(["sample", str(runs / "merged.pt"), *argv])
    assert capsys.readouterr().out.split("\n", 1)[1] == adapted


@pytest.mark.parametrize(
    "args,message",
    [
        (["--prompt", ""], "--prompt is empty"),
        (["--prompt", "   "], "--prompt is empty"),
        (["--prompt", "word " * 80], "longer than the model's ctx of 64"),
        (["--tokens", "0"], "--tokens must be from 1 to 10,000"),
        (["--tokens", "100000"], "--tokens must be from 1 to 10,000"),
        (["--temperature", "-1"], "--temperature must be 0"),
        (["--temperature", "inf"], "a finite number"),
        (["--temperature", "nan"], "a finite number"),
        (["--top-k", "-3"], "--top-k must be 0 (every token) or a positive count"),
    ],
)
def test_bad_sample_arguments_are_one_line_and_leave_the_run_alone(runs, args, message, capsys):
    before = hashlib.sha256((runs / "lora" / "checkpoint.pt").read_bytes()).hexdigest()
    assert main(["sample", str(runs / "lora"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("minigpt sample: error:") and message in err and "\n" not in err
    assert hashlib.sha256((runs / "lora" / "checkpoint.pt").read_bytes()).hexdigest() == before


def test_sampling_a_run_that_is_not_there_is_one_line(tmp_path, capsys):
    assert main(["sample", str(tmp_path / "nothing")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_tiny_temperature_is_greedy_not_nan():
    """logits / 1e-40 overflows to inf, and softmax(inf - inf) is nan: the largest logit goes first, then it is 0."""
    model = GPT(get_config("tiny"), seed=0)
    cold = sampling.sample_text(model, "minigpt-8k", 12, torch.device("cpu"), "Once", seed=5, temperature=1e-40)
    assert cold == sampling.sample_text(model, "minigpt-8k", 12, torch.device("cpu"), "Once", temperature=0)


def test_the_streamed_text_is_the_sampled_text(capsys):
    """stream_text writes the same tokens as sample_text, in pieces (what `minigpt sample` prints as it goes)."""
    model = GPT(get_config("tiny"), seed=0)
    pieces = list(sampling.stream_text(model, "minigpt-8k", 37, torch.device("cpu"), "Once", seed=2, every=5))
    assert len(pieces) == 1 + 8 and pieces[0] == "Once"
    assert "".join(pieces) == sampling.sample_text(model, "minigpt-8k", 37, torch.device("cpu"), "Once", seed=2)
