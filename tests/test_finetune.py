"""--init-from, a LoRA run's checkpoint (adapters + its base's hash), resume, export, and their bad inputs."""

import hashlib

import pytest
import torch

from minigpt import finetune, lora
from minigpt.cli import main
from minigpt.config import TrainConfig
from minigpt.data import load_tokens
from minigpt.model import GPT, get_config
from minigpt.run_state import load_checkpoint
from minigpt.step import window_micro_batches
from minigpt.train import train

COMMON = dict(preset="tiny", batch=2, ctx=16, sample_tokens=0, verbose=False, eval_batches=1)
LORA = dict(lora_rank=4, lora_targets="all", base_dtype="nf4")


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def base_run(tmp_path_factory, markov_data):
    """A finished full-training run to start from."""
    out = tmp_path_factory.mktemp("runs") / "base"
    train(TrainConfig(**COMMON, steps=3, lr=1e-2, out=str(out)), data=markov_data)
    return out


def test_init_from_starts_from_the_source_weights_with_a_fresh_optimizer(base_run, markov_data, tmp_path):
    cfg = TrainConfig(**COMMON, steps=1, init_from=str(base_run), out=str(tmp_path / "ft"))
    result = train(cfg, data=markov_data)
    # step 1's loss is the source model's loss on step 1's batch: the run started from its weights
    source = GPT(get_config("tiny"))
    source.load_state_dict(load_checkpoint(base_run / "checkpoint.pt")["model"])
    ((x, y),) = list(window_micro_batches(markov_data, cfg, torch.Generator().manual_seed(cfg.seed)))
    with torch.no_grad():
        _, loss = source(x, y)
    assert result.losses[0] == pytest.approx(loss.item(), rel=1e-6)
    saved = load_checkpoint(tmp_path / "ft" / "checkpoint.pt")
    assert saved["scheduler"]["last_epoch"] == 1  # its own schedule, not the source's 3 steps
    assert all(s["step"] == 1 for s in saved["optimizer"]["state"].values())  # AdamW starts again


def test_a_lora_run_saves_its_adapters_and_its_bases_hash(base_run, markov_data, tmp_path):
    train(TrainConfig(**COMMON, **LORA, steps=2, init_from=str(base_run), out=str(tmp_path / "lora")), data=markov_data)
    saved = load_checkpoint(tmp_path / "lora" / "checkpoint.pt")
    assert all(k.endswith(("lora_A", "lora_B")) for k in saved["model"])  # the adapters, nothing of the base
    source = finetune.load_source(base_run)
    assert saved["base"] == {"init_from": str(base_run.resolve()), "sha256": source.sha256}
    assert (tmp_path / "lora" / "checkpoint.pt").stat().st_size < (base_run / "checkpoint.pt").stat().st_size / 10


def test_a_resumed_lora_run_equals_the_straight_one(base_run, markov_data, tmp_path):
    common = dict(**COMMON, **LORA, steps=4, lr=1e-2, init_from=str(base_run))
    straight = train(TrainConfig(**common, out=str(tmp_path / "a")), data=markov_data)
    part = train(TrainConfig(**common, out=str(tmp_path / "b")), data=markov_data, on_step=lambda r: r["step"] == 2)
    assert len(part.history) == 2
    resumed = train(TrainConfig(**common, out=str(tmp_path / "b"), resume=True), data=markov_data)
    assert resumed.losses == straight.losses  # exactly
    for (name, a), (_, b) in zip(straight.model.named_parameters(), resumed.model.named_parameters()):
        assert torch.equal(a, b), name


def test_resume_refuses_a_new_lora_alpha(base_run, markov_data, tmp_path):
    """alpha / rank scales what the adapters learned: a new alpha on resume would change the model, not continue it."""
    common = dict(**COMMON, **LORA, steps=3, init_from=str(base_run), out=str(tmp_path / "lora"))
    train(TrainConfig(**common), data=markov_data, on_step=lambda r: r["step"] == 1)
    before = digest(tmp_path / "lora" / "checkpoint.pt")
    with pytest.raises(ValueError, match="--lora-alpha: saved"):
        train(TrainConfig(**{**common, "lora_alpha": 2 * TrainConfig().lora_alpha, "resume": True}), data=markov_data)
    assert digest(tmp_path / "lora" / "checkpoint.pt") == before


def test_resume_refuses_adapters_whose_base_has_changed(base_run, markov_data, tmp_path):
    base = tmp_path / "base"
    train(TrainConfig(**COMMON, steps=2, out=str(base)), data=markov_data)
    common = dict(**COMMON, **LORA, steps=3, init_from=str(base), out=str(tmp_path / "lora"))
    train(TrainConfig(**common), data=markov_data, on_step=lambda r: r["step"] == 1)
    train(TrainConfig(**COMMON, steps=3, out=str(base), resume=True), data=markov_data)  # the base trains on
    before = digest(tmp_path / "lora" / "checkpoint.pt")
    with pytest.raises(ValueError, match="has changed since the adapters were trained"):
        train(TrainConfig(**{**common, "resume": True}), data=markov_data)
    assert digest(tmp_path / "lora" / "checkpoint.pt") == before  # nothing in the run folder is lost
    with pytest.raises(ValueError, match="has changed"):  # and so do export and sample
        finetune.export(tmp_path / "lora", tmp_path / "x.pt")


@pytest.mark.parametrize("how", ["missing", "corrupt", "empty folder"])
def test_init_from_a_run_that_is_not_there_or_broken_is_one_line(how, tmp_path, markov_data):
    source = tmp_path / "src"
    if how == "corrupt":
        source.mkdir()
        (source / "checkpoint.pt").write_bytes(b"not a checkpoint at all")
    elif how == "empty folder":
        source.mkdir()
    cfg = TrainConfig(**COMMON, steps=1, init_from=str(source), out=str(tmp_path / "ft"))
    with pytest.raises((ValueError, FileNotFoundError), match="--init-from") as err:
        train(cfg, data=markov_data)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "ft" / "checkpoint.pt").exists()


def test_init_from_with_another_preset_or_tokenizer_names_both(base_run, markov_data):
    with pytest.raises(ValueError, match="--preset 10m contradicts --init-from .* trained with --preset tiny"):
        train(TrainConfig(**{**COMMON, "preset": "10m", "ctx": 16}, steps=1, init_from=str(base_run)), data=markov_data)
    with pytest.raises(ValueError, match="--tokenizer gpt2 contradicts .* --tokenizer minigpt-8k"):
        train(TrainConfig(**COMMON, tokenizer="gpt2", steps=1, init_from=str(base_run)), data=markov_data)


def test_the_cli_takes_the_model_settings_from_the_source(base_run, tmp_path, capsys):
    run = str(tmp_path / "cli")
    argv = ["train", "--init-from", str(base_run), "--lora-rank", "2", "--base-dtype", "int8", "--ctx", "16"]
    argv += ["--batch", "2", "--steps", "1", "--out", run, "--json"]
    assert main(argv) == 0  # no --preset: tiny comes from the source run
    saved = load_checkpoint(tmp_path / "cli" / "checkpoint.pt")
    assert saved["train_config"]["preset"] == "tiny" and saved["train_config"]["lora_rank"] == 2
    capsys.readouterr()
    assert main(["train", "--init-from", str(base_run), "--preset", "10m", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("minigpt train: error: --preset 10m contradicts") and "\n" not in err


def test_export_merges_the_adapters_into_a_plain_checkpoint(base_run, markov_data, tmp_path, capsys):
    run = tmp_path / "lora"
    train(TrainConfig(**COMMON, **LORA, steps=3, lr=3e-2, init_from=str(base_run), out=str(run)), data=markov_data)
    before = digest(run / "checkpoint.pt")
    assert main(["export", str(run), "--out", str(tmp_path / "merged.pt")]) == 0
    assert "merged" in capsys.readouterr().out
    exported = load_checkpoint(tmp_path / "merged.pt")
    adapted = finetune.model_from(load_checkpoint(run / "checkpoint.pt"), run)
    assert set(exported["model"]) == set(GPT(get_config("tiny")).state_dict())  # a plain GPT's names
    plain = GPT(get_config("tiny"))
    plain.load_state_dict(exported["model"])
    for name, value in lora.merged_state_dict(adapted).items():  # the merge test_lora.py bounds, layer by layer
        assert torch.equal(plain.state_dict()[name], value), name
    assert exported["train_config"]["lora_rank"] is None and digest(run / "checkpoint.pt") == before
    # the export is a plain run: it starts a new one, and samples
    assert finetune.load_source(tmp_path / "merged.pt").weights.keys() == plain.state_dict().keys()


def test_exporting_a_run_without_adapters_says_so_and_writes_it_plain(base_run, tmp_path, capsys):
    assert main(["export", str(base_run), "--out", str(tmp_path / "plain.pt")]) == 0
    assert "has no adapters" in capsys.readouterr().out
    exported, source = load_checkpoint(tmp_path / "plain.pt"), load_checkpoint(base_run / "checkpoint.pt")
    assert all(torch.equal(exported["model"][k], v) for k, v in source["model"].items())
    assert main(["export", str(base_run), "--out", str(base_run / "checkpoint.pt")]) == 2  # never over the run


def test_the_recipes_corpus_has_its_own_token_cache():
    stories, recipes = load_tokens(), load_tokens(builtin="recipes")
    assert "builtin-recipes" in recipes.source and "recipes" not in stories.source
    assert recipes.n_tokens != stories.n_tokens
    with pytest.raises(ValueError, match="give one of them"):
        TrainConfig(corpus="x.txt", builtin_corpus="recipes")


def test_a_custom_shape_carries_over_to_its_fine_tuning(markov_data, tmp_path, monkeypatch, capsys):
    """A base trained with --n-embd 40 (as plan --largest prints shapes): --init-from builds that shape, LoRA's
    rank is checked against it, and sample and export work; a shape flag that contradicts it is one line."""
    from minigpt.cli import main

    monkeypatch.chdir(tmp_path)
    shape = ["--preset", "tiny", "--n-embd", "40", "--n-head", "2", "--batch", "2", "--ctx", "16", "--steps", "2"]
    assert main(["train", *shape, "--out", "base"]) == 0
    tune = ["--init-from", "base", "--lora-rank", "4", "--batch", "2", "--ctx", "16", "--steps", "2"]
    assert main(["train", *tune, "--out", "lora"]) == 0
    assert main(["sample", "lora", "--tokens", "4"]) == 0
    assert main(["export", "lora", "--out", "merged.pt"]) == 0
    assert (
        main(["train", "--init-from", "merged.pt", "--batch", "2", "--ctx", "16", "--steps", "1", "--out", "again"])
        == 0
    )
    capsys.readouterr()
    assert main(["train", *tune, "--n-embd", "64", "--out", "wrong"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--n-embd 64 contradicts --init-from" in err and "\n" not in err


def test_a_lora_run_without_init_from_samples_and_exports_from_anywhere(markov_data, tmp_path, monkeypatch, capsys):
    """Without --init-from the frozen base is the seed's random initialization: sample and export make it again
    (checked by its sha256), even from inside another run's folder, which they must not take for the base."""
    from minigpt.cli import main

    monkeypatch.chdir(tmp_path)
    common = ["--preset", "tiny", "--batch", "2", "--ctx", "16", "--steps", "2"]
    assert main(["train", *common, "--out", "plain"]) == 0
    assert main(["train", *common, "--lora-rank", "4", "--out", "lora"]) == 0
    base = load_checkpoint(tmp_path / "lora" / "checkpoint.pt")["base"]
    assert base["init_from"] is None and len(base["sha256"]) == 64
    capsys.readouterr()
    monkeypatch.chdir(tmp_path / "plain")  # a run folder: not the LoRA run's base
    assert main(["sample", "../lora", "--tokens", "6", "--temperature", "0"]) == 0
    sampled = capsys.readouterr().out.split("\n", 1)[1]
    assert main(["export", "../lora", "--out", "../merged.pt"]) == 0
    capsys.readouterr()
    assert main(["sample", "../merged.pt", "--tokens", "6", "--temperature", "0"]) == 0
    assert capsys.readouterr().out.split("\n", 1)[1] == sampled  # the merged model writes what the adapters did


# VmHWM, not getrusage: ru_maxrss survives exec, so a child forked from a large pytest process reports its size
LOAD_PEAK = """
import sys, torch
from minigpt import finetune
def status(key): return int(dict(l.split(":", 1) for l in open("/proc/self/status"))[key].split()[0]) * 1024
before = status("VmRSS")
source = finetune.load_source(sys.argv[1])
peak = status("VmHWM")
distinct = {t.data_ptr(): t for t in source.weights.values()}.values()  # the tied embedding once
print(before, peak, sum(t.untyped_storage().nbytes() for t in distinct))
"""


@pytest.mark.skipif(not __import__("pathlib").Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
def test_loading_a_base_holds_its_weights_once_and_never_its_optimizer_state(tmp_path):
    """A 125m base is 478 MB; its checkpoint with AdamW's state is 1.4 GB. Read whole, then copied into a model,
    it held 2.1 GB at once, over a 1 GiB fine-tuning budget. --init-from now maps the file and copies out the
    weights only, dropping each tensor's file pages as it goes."""
    import dataclasses
    import subprocess
    import sys

    model = GPT(
        dataclasses.replace(get_config("tiny"), n_embd=512, n_head=8, n_layer=4)
    )  # ~13M parameters: 50 MB in fp32
    state = model.state_dict()
    weight_bytes = sum(p.numel() * 4 for p in model.parameters())
    optimizer = {
        "state": {
            i: {"exp_avg": torch.randn_like(p), "exp_avg_sq": torch.rand_like(p)}
            for i, p in enumerate(model.parameters())
        }
    }
    cfg = TrainConfig(preset="tiny", n_embd=512, n_head=8, n_layer=4)
    finetune.save_checkpoint(
        {
            "model": state,
            "optimizer": optimizer,
            "model_config": model.cfg.to_dict(),
            "train_config": dataclasses.asdict(cfg),
            "step": 1,
        },
        tmp_path / "checkpoint.pt",
    )
    done = subprocess.run([sys.executable, "-c", LOAD_PEAK, str(tmp_path)], capture_output=True, text=True, check=True)
    before, peak, held = (int(v) for v in done.stdout.split())
    assert held == weight_bytes  # the weights, the tied embedding once
    # One copy of the weights, plus the pages of the tensor being copied and the allocator's slack: 1.3x is
    # far below what either fault gives (2x: the file's pages kept mapped; 3x: the optimizer's state read too).
    assert peak - before < 1.3 * weight_bytes, f"loading took {(peak - before) / weight_bytes:.2f}x the weights"


def test_a_base_becomes_the_models_own_tensors_and_the_random_base_is_hashed_once(base_run, monkeypatch):
    """No second model beside the first: the source's tensors are the model's, and saving a LoRA run without
    --init-from hashes the init the run built instead of building another whole fp32 model."""
    from minigpt.step import build_step_state

    source = finetune.load_source(base_run)
    weights = source.take_weights()
    pointers = {name: t.data_ptr() for name, t in weights.items()}
    cfg = TrainConfig(**COMMON)
    model = build_step_state(cfg.model_config(), cfg, torch.device("cpu"), weights).model
    assert {n: p.data_ptr() for n, p in model.state_dict().items()} == pointers and source.weights == {}
    assert model.lm_head.weight is model.tok_emb.weight  # still one matrix, as GPT ties it

    lora_cfg = TrainConfig(**COMMON, **LORA, seed=123, out="a-run")  # a run that saves: its base is hashed
    expected = finetune.weights_sha256(GPT(lora_cfg.model_config(), seed=123).state_dict())
    build_step_state(lora_cfg.model_config(), lora_cfg, torch.device("cpu"))
    monkeypatch.setattr(lora, "GPT", lambda *a, **k: pytest.fail("saving built a second model to hash it"))
    assert finetune.base_entry(lora_cfg, None)["base"]["sha256"] == expected
