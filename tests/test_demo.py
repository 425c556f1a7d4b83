"""Every lecture demo runs (at quick sizes), prints its one-line conclusion and saves its figures."""

import inspect
import math
import re

import pytest
import torch

from minigpt.demos import DEMO_CHOICES, DEMOS, run_demo
from minigpt.formats import smallest_update_that_survives
from minigpt.model import PRESETS

FIGURES = {
    "train": ["train_loss.png"],
    "formats": ["formats_range.png", "formats_lost_update.png"],
    "memory": ["memory_breakdown.png", "memory_vs_batch.png"],
    "autocast": ["autocast_loss.png", "autocast_memory.png"],
    "scaler": ["scaler_histogram.png", "scaler_loss.png"],
    "accumulation": ["accumulation.png"],
    "checkpointing": ["checkpointing.png"],
    "plan": ["plan.png"],
    "sharding": ["sharding.png"],
    "toolbox": ["toolbox_levers.png", "toolbox_codes.png"],
    "largest": ["largest.png"],
    "lora": ["lora.png"],
}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def one_torch_thread():
    """These tests check what the demos print and save, not their speed. On a busy 2-core machine two
    threads per process make every small op wait for the other thread (several times slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_every_demo_the_issue_names_exists():
    assert set(DEMOS) == set(FIGURES)
    assert DEMO_CHOICES[-1] == "all"


@pytest.mark.parametrize("name", list(FIGURES))
def test_each_demo_function_is_named_after_its_command(name):
    demo = DEMOS[name]
    assert demo.__name__ == f"demo_{name}"
    assert list(inspect.signature(demo).parameters) == ["out", "size"]
    assert demo.__doc__  # its first line is printed under the demo's banner


@pytest.mark.parametrize("name", list(FIGURES))
def test_demo_prints_one_conclusion_and_saves_its_figures(name, tmp_path, capsys):
    assert run_demo(name, tmp_path, size="quick") == 0
    printed = capsys.readouterr().out
    conclusions = [line for line in printed.splitlines() if line.startswith("Conclusion: ")]
    assert len(conclusions) == 1, printed[-2000:]
    assert any(ch.isdigit() for ch in conclusions[0])  # a measured or computed number, not a slogan
    assert "|" in printed  # at least one table
    for figure in FIGURES[name]:
        assert (tmp_path / figure).read_bytes()[:8] == PNG_MAGIC, figure
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(FIGURES[name])


def test_formats_conclusion_states_the_package_threshold(tmp_path, capsys):
    run_demo("formats", tmp_path, size="quick")
    conclusion = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Conclusion: ")][0]
    assert f"{smallest_update_that_survives(1.0, 'bf16'):.3g}" in conclusion


def test_unknown_demo_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="choose one of: train, formats"):
        run_demo("fp4", tmp_path)


def test_train_demo_shows_the_loss_and_a_sample(tmp_path, capsys):
    run_demo("train", tmp_path, size="quick")
    printed = capsys.readouterr().out
    assert "Sample after 6 steps:" in printed
    conclusion = [line for line in printed.splitlines() if line.startswith("Conclusion: ")][0]
    first = float(re.search(r"fell from ([\d.]+) ", conclusion).group(1))
    # an untrained model guesses: its first loss is near ln(vocab) (the seeded init is close to uniform)
    assert first == pytest.approx(math.log(PRESETS["tiny"].vocab_size), abs=0.5)


@pytest.mark.parametrize("flags, size", [([], "lecture"), (["--full"], "full"), (["--quick"], "quick")])
def test_the_command_line_picks_the_demo_size(flags, size, monkeypatch, tmp_path):
    """Lecture sizes unless asked: --full for the longer versions, --quick for the tests' tiny ones."""
    from minigpt import demos
    from minigpt.cli import main

    calls = []
    monkeypatch.setattr(demos, "run_demo", lambda name, out, size: calls.append((name, size)) or 0)
    assert main(["demo", "train", "--out", str(tmp_path), *flags]) == 0
    assert calls == [("train", size)]


def test_an_unknown_demo_size_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="choose one of: quick, lecture, full"):
        run_demo("train", tmp_path, size="huge")
