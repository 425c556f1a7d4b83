"""The `minigpt` subcommands print what the functions behind them compute."""

import json

from minigpt.cli import main
from minigpt.memory import estimate
from minigpt.model import get_config
from minigpt.plan import plan


def test_memory_json_matches_estimate_and_measure(capsys):
    assert main(["memory", "--preset", "tiny", "--batch", "2", "--ctx", "32", "--measure", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    expected = estimate(get_config("tiny"), 2, 32, device="cpu")
    assert out["predicted"]["peak"] == expected.peak
    assert out["measured"]["weights"] == expected.weights  # static bytes are exact


def test_memory_table_prints_predicted_and_measured(capsys):
    assert main(["memory", "--preset", "tiny", "--batch", "1", "--ctx", "16", "--measure"]) == 0
    out = capsys.readouterr().out
    assert "predicted" in out and "measured" in out and "activations" in out


def test_plan_command_explains_the_t4_choice(capsys):
    args = ["plan", "--hardware", "t4", "--preset", "125m", "--ctx", "1024", "--effective-batch", "128"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.strip() == plan("125m", "t4", 1024, 128).explain().strip()
    assert "fp16 + GradScaler" in out


def test_plan_table_and_missing_preset(capsys):
    assert main(["plan", "--table", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 12  # 3 presets x 4 kinds of hardware
    assert main(["plan"]) == 2
    assert "--preset" in capsys.readouterr().err


def test_formats_json(capsys):
    assert main(["formats", "--json"]) == 0
    names = [r["name"] for r in json.loads(capsys.readouterr().out)]
    assert "bf16" in names and "fp16" in names
