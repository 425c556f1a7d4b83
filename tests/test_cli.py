"""The `minigpt` subcommands print what the functions behind them compute."""

import json

import pytest
import torch

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


TINY = ["train", "--preset", "tiny", "--batch", "2", "--ctx", "16", "--steps", "3"]


def one_error_line(capsys) -> str:
    """stderr of the last call: exactly one line besides warnings, and no traceback."""
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if "warning: " not in line]  # e.g. bf16 emulated on CI
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


def stop_after_step(step: int, sig, monkeypatch) -> None:
    """Make train_step send this process `sig` once it has done `step` steps (a Ctrl-C mid-run)."""
    import os

    import minigpt.train as train_module

    real_step, calls = train_module.train_step, []

    def train_step_then_signal(*args, **kwargs):
        result = real_step(*args, **kwargs)
        calls.append(1)
        if len(calls) == step:
            os.kill(os.getpid(), sig)
        return result

    monkeypatch.setattr(train_module, "train_step", train_step_then_signal)


@pytest.mark.parametrize("sig, code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_interrupted_train_prints_one_resume_line_and_exits_128_plus_signal(tmp_path, capsys, monkeypatch, sig, code):
    import signal

    out = str(tmp_path / "run")
    stop_after_step(2, signal.Signals[sig], monkeypatch)
    assert main([*TINY, "--out", out]) == code
    line = one_error_line(capsys)
    assert line == f"interrupted at step 2; resume with: minigpt {' '.join(TINY)} --out {out} --resume"
    monkeypatch.undo()
    assert main([*TINY, "--out", out, "--resume"]) == 0  # the printed command continues the run
    stop_after_step(1, signal.SIGINT, monkeypatch)
    assert main([*TINY, "--steps", "5", "--resume", "--out", out]) == 130
    assert one_error_line(capsys).endswith(f"--steps 5 --out {out} --resume")  # --resume once, at the end


def test_interrupt_outside_the_training_loop_is_one_line(monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # Ctrl-C while the corpus loads, before train()'s handlers are in place

    monkeypatch.setattr("minigpt.train.load_tokens", interrupted)
    assert main(TINY) == 130
    assert one_error_line(capsys) == "minigpt train: interrupted"


def test_usage_errors_from_argparse_are_one_line(capsys):
    with pytest.raises(SystemExit) as info:
        main(["train", "--steps", "many"])
    assert info.value.code == 2
    assert one_error_line(capsys).startswith("minigpt train: error: argument --steps: invalid int value")


def test_unexpected_errors_are_one_line_with_exit_1_and_debug_shows_the_traceback(monkeypatch, capsys):
    def bug(*args, **kwargs):
        raise KeyError("something nobody expected\nwith a second line")

    monkeypatch.setattr("minigpt.train.load_tokens", bug)
    assert main(TINY) == 1
    line = one_error_line(capsys)
    assert line.startswith("minigpt train: error: KeyError: 'something nobody expected") and "MINIGPT_DEBUG=1" in line
    monkeypatch.setenv("MINIGPT_DEBUG", "1")
    with pytest.raises(KeyError):
        main(TINY)


def make_run(folder, *flags: str) -> None:
    assert main([*TINY, "--out", str(folder), *flags]) == 0


def broken_checkpoint(kind: str):
    """Ways a checkpoint file goes wrong, each a function of the run folder's checkpoint path."""
    from minigpt.run_state import FORMAT

    def truncate(path):
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

    def newer(path):
        torch.save({"format": FORMAT, "version": 99}, path)

    return {"truncated": truncate, "newer": newer}[kind]


@pytest.mark.parametrize(
    "case, code, message",
    [
        ("fresh run over a saved one", 2, "already holds a run (checkpoint.pt, log.jsonl); pass --resume"),
        ("resume with another preset", 2, "--preset: saved tiny, given tiny-deep"),
        ("resume with another precision", 2, "--precision: saved fp32, given bf16"),
        ("resume with another ctx", 2, "--ctx: saved 16, given 8"),
        ("resume with another tokenizer", 2, "--tokenizer: saved minigpt-8k, given gpt2"),
        ("resume a truncated checkpoint", 1, "is truncated, corrupt or not a minigpt checkpoint"),
        ("resume a newer checkpoint", 1, "version 99, newer than this minigpt reads"),
        ("resume without a checkpoint", 1, "no checkpoint at"),
        ("out names a file", 2, "is not a folder"),
        ("corpus names a folder", 2, "is a folder; pass a UTF-8 text file"),
        ("corpus missing", 2, "corpus file not found"),
        ("unreadable run folder", 1, "cannot read and write the run folder"),
        ("full disk", 1, "is full: checkpoint.pt needs about"),
        ("diverged", 1, "training diverged: the loss is nan at step 4"),
        ("offline gpt2", 1, "could not download the gpt2 vocabulary (could not reach"),
        ("second run on a busy folder", 1, "is in use by another run (pid"),
    ],
)
def test_every_failure_is_one_line_with_the_right_exit_code(case, code, message, tmp_path, capsys, monkeypatch):
    """The issue's list, case by case: one line, exit 2 (bad usage) or 1 (runtime), the checkpoint unchanged."""
    import contextlib
    import errno
    import functools
    import math

    import minigpt.train as train_module
    from minigpt import tokenizer
    from minigpt.run_state import RunFolder

    run = tmp_path / "run"
    make_run(run)
    capsys.readouterr()
    ckpt = run / "checkpoint.pt"
    argv = [*TINY, "--out", str(run), "--resume"]
    if case == "fresh run over a saved one":
        argv.remove("--resume")
    elif case.startswith("resume with another"):
        flag, value = {"preset": ("--preset", "tiny-deep"), "precision": ("--precision", "bf16")}.get(
            case.split()[-1], {"ctx": ("--ctx", "8"), "tokenizer": ("--tokenizer", "gpt2")}.get(case.split()[-1])
        )
        argv += [flag, value]
    elif case == "resume a truncated checkpoint":
        broken_checkpoint("truncated")(ckpt)
    elif case == "resume a newer checkpoint":
        broken_checkpoint("newer")(ckpt)
    elif case == "resume without a checkpoint":
        argv[argv.index(str(run))] = str(tmp_path / "elsewhere")
    elif case == "out names a file":
        argv = [*TINY, "--out", str(ckpt)]
    elif case == "corpus names a folder":
        argv = [*TINY, "--corpus", str(tmp_path)]
    elif case == "corpus missing":
        argv = [*TINY, "--corpus", str(tmp_path / "missing.txt")]
    elif case == "unreadable run folder":
        monkeypatch.setattr("minigpt.run_state.os.access", lambda path, mode: False)  # root reads everything
    elif case == "full disk":
        argv += ["--steps", "5"]

        def disk_full(obj, f):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(torch, "save", disk_full)
    elif case == "diverged":
        argv += ["--steps", "6"]
        real_step = train_module.train_step
        monkeypatch.setattr(train_module, "train_step", lambda *a, **k: {**real_step(*a, **k), "loss": math.nan})
    elif case == "offline gpt2":
        argv = [*TINY, "--tokenizer", "gpt2", "--corpus", str(tmp_path / "text.txt")]
        (tmp_path / "text.txt").write_text("some text to tokenize " * 50)
        monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-cache"))
        monkeypatch.setattr("tiktoken.registry.ENCODINGS", {})
        monkeypatch.setattr("minigpt.tokenizer.can_connect", lambda host, port, timeout=3.0: False)
        # a fresh loader cache: a gpt2 loaded earlier in this process (on a machine with network) is not reused
        monkeypatch.setattr(tokenizer, "_load_tokenizer", functools.lru_cache(tokenizer._load_tokenizer.__wrapped__))
    other_run = RunFolder(run).locked() if case == "second run on a busy folder" else contextlib.nullcontext()
    before = ckpt.read_bytes()
    with other_run:  # flock conflicts between two open files even within one process: as if another run held it
        assert main(argv) == code
    line = one_error_line(capsys)
    assert line.startswith("minigpt train: error: ") and message in line, line
    monkeypatch.undo()
    assert ckpt.read_bytes() == before  # an error never changes the checkpoint
    assert not list(run.glob("*.tmp")) and not (run / ".lock").exists()  # nor leaves files behind


def test_surprising_settings_are_warned_about_once_on_stderr(monkeypatch, capsys, tmp_path):
    """Warnings, not errors: the run goes on. Each names what was measured or estimated, and what to do."""
    import minigpt.device

    slowdowns = {torch.float16: 250.0, torch.bfloat16: 1.3}  # fp16 emulated (as on a Zen 5), bf16 native
    monkeypatch.setattr(minigpt.device, "cpu_matmul_slowdown", lambda dtype: slowdowns[dtype])
    assert main([*TINY, "--steps", "1", "--precision", "fp16", "--device", "cpu"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == [
        "minigpt train: warning: fp16 is emulated on this CPU: a float16 matmul measured 250x slower than fp32 "
        "here; --precision fp32 will train faster"
    ]
    assert main([*TINY, "--steps", "1", "--precision", "bf16", "--device", "cpu"]) == 0
    assert "warning" not in capsys.readouterr().err  # bf16 measured fast: nothing to say

    small = tmp_path / "small.txt"
    small.write_text("a short story about a cat and a dog. " * 60)  # a few hundred tokens
    assert main([*TINY, "--steps", "1", "--corpus", str(small), "--batch", "8", "--accum", "8", "--device", "cpu"]) == 0
    assert "more than the corpus's" in capsys.readouterr().err  # 1,024 tokens a step: the whole corpus each step


def test_a_checkpointing_mode_that_saves_nothing_is_warned_about(monkeypatch):
    from minigpt import memory
    from minigpt.cli import train_warnings
    from minigpt.train import TrainConfig

    cfg = TrainConfig(preset="tiny", batch=2, ctx=16, checkpointing="full", device="cpu")
    assert train_warnings(cfg) == []  # full checkpointing saves most activations here
    real = memory.estimate
    same_either_way = lambda *args, **kw: real(*args, **{**kw, "checkpointing": "none"})  # noqa: E731
    monkeypatch.setattr(memory, "estimate", same_either_way)  # as for a model whose blocks keep nothing
    (note,) = train_warnings(cfg)
    assert note.startswith("--checkpointing full saves nothing at this size") and "none is faster" in note


def test_an_effective_batch_multiplied_by_torchrun_is_warned_about(monkeypatch):
    from minigpt.cli import train_warnings
    from minigpt.train import TrainConfig

    cfg = TrainConfig(preset="tiny", batch=2, accum=4, ctx=16, device="cpu")
    assert train_warnings(cfg) == []  # one process: the effective batch is batch x accum, as asked
    monkeypatch.setenv("WORLD_SIZE", "4")  # what torchrun --nproc-per-node 4 sets
    (note,) = train_warnings(cfg)
    assert "= 32 sequences, 4x a single-process run" in note and "divide --accum by 4" in note


def test_plan_for_this_cpu_uses_what_doctor_measures(capsys):
    """`plan --hardware cpu` describes this machine's CPU: bf16 exactly when doctor says bf16 is native."""
    from minigpt.device import device_info

    assert main(["plan", "--preset", "tiny", "--hardware", "cpu", "--json"]) == 0
    chosen = json.loads(capsys.readouterr().out)
    native_bf16 = device_info("cpu").bf16_is_fast
    assert (chosen["precision"] == "bf16") == native_bf16, chosen


def test_memory_shard_and_world_predict_what_each_process_holds(capsys):
    from minigpt.memory import sharded_state_bytes

    assert main(["memory", "--preset", "tiny", "--shard", "fsdp", "--world", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["per_process"]
    assert out["predicted"] == sharded_state_bytes(get_config("tiny"), "fp32", "fsdp", 4)
    assert main(["memory", "--preset", "125m", "--precision", "bf16", "--shard", "zero1", "--world", "8"]) == 0
    assert "per process, --shard zero1 over 8 processes" in capsys.readouterr().out
    assert main(["memory", "--preset", "tiny", "--shard", "fsdp", "--world", "0"]) == 2
    assert "--world" in one_error_line(capsys)


def test_train_shard_with_one_process_trains_as_none(capsys):
    """--shard needs torchrun's processes; alone, there is nothing to split, and the run says so."""
    assert main([*TINY, "--shard", "zero1", "--device", "cpu"]) == 0
    assert "--shard zero1 with one process: nothing to split" in capsys.readouterr().out


def test_plan_gpus_and_shard(capsys):
    assert main(["plan", "--preset", "7b", "--hardware", "a100-80", "--gpus", "8", "--shard", "fsdp", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gpus"] == 8 and out["shard"] == "fsdp"
    assert out["micro_batch"] * out["accum"] * 8 == 128
    assert main(["plan", "--preset", "125m", "--gpus", "3"]) == 2
    assert "multiple of --gpus" in one_error_line(capsys)
