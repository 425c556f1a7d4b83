"""Fault injection: kill -9 during saves, Ctrl-C at random steps, damaged checkpoint bytes, fuzzed CLI flags.

Each test prints its counts (runs, faults injected, data lost); `pytest -s tests/test_fault_injection.py` shows
them. Random choices come from seeded generators, so a failure repeats with the same seed.
"""

from __future__ import annotations

import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from minigpt.cli import main
from minigpt.run_state import CheckpointError, load_checkpoint

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}  # this checkout's minigpt, one thread
posix_only = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork and SIGKILL are POSIX")


@posix_only
def test_kill_9_during_saves_always_leaves_the_old_or_the_new_checkpoint(tmp_path):
    """150 SIGKILLs at random moments of a loop of saves (kill_during_saves.py): none may lose the checkpoint."""
    script = Path(__file__).with_name("kill_during_saves.py")
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path), "150", "14"], env=ENV, capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stderr[-3000:]
    counts = json.loads(done.stdout)
    print("kill -9 during saves:", counts)
    assert counts["kills"] == 150 and counts["data_lost"] == 0
    # The kills did land inside saves (the child does nothing else), and left the temp files only a kill
    # leaves; the next run that locks the folder removes them.
    assert counts["mid_save_kills"] >= 75 and counts["temp_files_left_by_kills"] > 0
    assert counts["temp_files_after_cleanup"] == 0 and counts["saves_completed"] > 0


def minigpt(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "minigpt", *args], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def signal_after_step(proc: subprocess.Popen, log: Path, step: int, sig: signal.Signals) -> tuple[int, str]:
    """Send `sig` once log.jsonl shows `step` steps done; return the exit code and stderr."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if log.exists() and len(log.read_text().splitlines()) >= step:
            proc.send_signal(sig)
            break
        time.sleep(0.005)
    _, err = proc.communicate(timeout=600)
    return proc.returncode, err


def log_records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]


@posix_only
def test_signals_at_random_steps_then_resume_reach_exactly_the_straight_runs_losses(tmp_path):
    """A real `minigpt train` subprocess, stopped twice (SIGINT, then SIGTERM) at seeded random steps and resumed
    each time with the command it printed, ends with the straight run's losses and weights, bit for bit."""
    rng = random.Random(14)
    steps = 24
    flags = ["train", "--preset", "tiny", "--batch", "8", "--ctx", "64", "--steps", str(steps), "--dropout", "0.1"]
    flags += ["--eval-every", "8"]
    straight = minigpt(*flags, "--out", str(tmp_path / "straight"))  # runs alongside the interrupted one
    run = tmp_path / "cut"
    command = [*flags, "--out", str(run)]
    faults = []
    for sig, at in ((signal.SIGINT, rng.randint(2, 8)), (signal.SIGTERM, rng.randint(10, steps - 6))):
        code, err = signal_after_step(minigpt(*command), run / "log.jsonl", at, sig)
        assert code == 128 + sig and "Traceback" not in err, err
        line = err.strip().splitlines()[-1]
        stopped = int(line.split()[3].rstrip(";"))
        assert line.startswith(f"interrupted at step {stopped}; resume with: python -m minigpt train")
        assert at <= stopped < steps and load_checkpoint(run / "checkpoint.pt")["step"] == stopped
        faults.append((sig.name, at, stopped))
        command = shlex.split(line.split("resume with: ", 1)[1])[3:]  # drop `python -m minigpt`
        assert command.count("--resume") == 1
    resumed = minigpt(*command)
    assert resumed.wait(timeout=1200) == 0 and straight.wait(timeout=1200) == 0
    want, got = log_records(tmp_path / "straight"), log_records(run)
    same_losses = [r["loss"] for r in got] == [r["loss"] for r in want]
    same_val = [r.get("val_loss") for r in got] == [r.get("val_loss") for r in want]
    final = load_checkpoint(run / "checkpoint.pt")["model"]
    reference = load_checkpoint(tmp_path / "straight" / "checkpoint.pt")["model"]
    same_weights = all(torch.equal(final[k], reference[k]) for k in reference)
    print(f"signals then resume: 3 runs, faults {faults}, data lost {0 if same_losses and same_weights else 1}")
    assert len(got) == steps and same_losses and same_val and same_weights


def same(a, b) -> bool:
    """Deep equality for loaded checkpoints: tensors bit for bit, dicts and lists element by element."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b or (a != a and b != b)  # nan == nan here


def test_damaged_checkpoint_bytes_are_caught_or_harmless(tmp_path):
    """300 seeded damages (truncations, flipped bits, overwritten ranges) of a real checkpoint: each either fails
    with a one-line CheckpointError or loads exactly the saved state. Never a silently different state."""
    from minigpt.model import ModelConfig
    from minigpt.run_state import RunFolder
    from minigpt.train import TrainConfig, TrainResult, build_step_state, checkpoint_snapshot

    cfg = TrainConfig(preset="tiny", ctx=16, steps=2, out=str(tmp_path / "run"))
    state = build_step_state(
        ModelConfig(n_layer=1, n_head=2, n_embd=32, ctx=16, vocab_size=64), cfg, torch.device("cpu")
    )
    result = TrainResult(cfg, state.model, history=[{"step": 1, "loss": 4.2}])
    path = RunFolder(cfg.out).save(checkpoint_snapshot(cfg, state, result, torch.Generator().manual_seed(0)))
    good, original = path.read_bytes(), load_checkpoint(path)
    rng = random.Random(14)
    counts = {"damages": 0, "caught": 0, "harmless": 0, "data_lost": 0}
    for i in range(300):
        raw = bytearray(good)
        kind = i % 3
        if kind == 0:
            raw = raw[: rng.randrange(len(raw))]  # truncated: a copy cut short, a save cut off by a crash
        elif kind == 1:
            raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)  # one flipped bit: bad RAM, bad disk
        else:
            start = rng.randrange(len(raw))
            raw[start : start + rng.randint(1, 512)] = bytes(rng.randrange(256) for _ in range(512))[: len(raw) - start]
        path.write_bytes(bytes(raw))
        counts["damages"] += 1
        try:
            loaded = load_checkpoint(path)
        except CheckpointError as err:
            assert "\n" not in str(err) and "pass --restart to move the run aside" in str(err)
            counts["caught"] += 1
            continue
        if same(loaded, original):
            counts["harmless"] += 1  # e.g. a bit of zip metadata nobody reads
        else:
            counts["data_lost"] += 1
    print("damaged checkpoints:", counts)
    assert counts["data_lost"] == 0 and counts["caught"] >= 250  # harmless damages are rare: ~3% of bit flips


def fuzz_flags(rng: random.Random, places: dict[str, str]) -> list[str]:
    """1 to 4 flags with values inside and outside their valid ranges, on top of a tiny, fast run."""
    values = {
        "--batch": ["-1", "0", "1", "2", "x"],
        "--accum": ["-3", "0", "1", "2", "1e9"],
        "--ctx": ["-1", "0", "4", "16", "65", "99999999"],
        "--steps": ["-1", "0", "1", "2", "3"],
        "--lr": ["-1", "0", "nan", "inf", "1e-3", "0.05", "1e30"],
        "--warmup-steps": ["-1", "0", "1", "50"],
        "--grad-clip": ["-1", "0", "nan", "1"],
        "--dropout": ["-0.1", "0", "0.5", "1", "2"],
        "--eval-every": ["-1", "0", "1"],
        "--save-every": ["-1", "0", "1", "2"],
        "--seed": ["-5", "0", "7", str(2**64)],
        "--precision": ["fp32", "bf16", "fp16", "bf16-pure", "fp8"],
        "--checkpointing": ["none", "full", "sqrt", "selective", "half"],
        "--preset": ["tiny", "tiny-deep", "7b"],
        "--tokenizer": ["minigpt-8k", "bogus"],
        "--device": ["cpu", "auto", "cuda", "tpu", "cuda:7"],
        "--corpus": [places["missing"], places["folder"], places["empty"], places["text"]],
        "--out": [places["run"], places["run"], places["file"], places["fresh"], places["damaged"], places["damaged"]],
        "--master-weights": [None],
        "--resume": [None, None],
    }
    argv = ["train", "--preset", "tiny", "--batch", "2", "--ctx", "16", "--steps", "2"]
    for flag in rng.sample(sorted(values), rng.randint(1, 4)):
        value = rng.choice(values[flag])
        argv += [flag] if value is None else [flag, value]
    if places["damaged"] in argv and "--resume" not in argv:
        argv.append("--resume")  # a damaged checkpoint matters to a resumed run: the runtime errors (exit 1)
    return argv


RUNS = 80


def test_fuzzed_cli_flags_exit_0_1_or_2_with_one_line_and_never_touch_a_checkpoint(tmp_path, capsys):
    """80 in-process `minigpt train` runs with seeded random flags. Each exits 0, 1 or 2; an error is one line
    with no traceback; a run that fails leaves an existing checkpoint byte for byte as it was."""
    rng = random.Random(14)
    template = tmp_path / "template"
    assert (
        main(["train", "--preset", "tiny", "--batch", "2", "--ctx", "16", "--steps", "2", "--out", str(template)]) == 0
    )
    (tmp_path / "a_file").write_text("not a folder")
    (tmp_path / "folder").mkdir()
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "text.txt").write_text(" ".join(f"word{i % 97} and more words" for i in range(2000)))
    codes = {0: 0, 1: 0, 2: 0}
    for i in range(RUNS):
        run, damaged = tmp_path / f"run{i}", tmp_path / f"damaged{i}"
        shutil.copytree(template, run)
        shutil.copytree(template, damaged)
        (damaged / "checkpoint.pt").write_bytes((template / "checkpoint.pt").read_bytes()[:5000])  # truncated
        before = {folder: (folder / "checkpoint.pt").read_bytes() for folder in (run, damaged)}
        places = {
            "run": str(run),
            "damaged": str(damaged),
            "file": str(tmp_path / "a_file"),
            "fresh": str(tmp_path / f"fresh{i}"),
            "missing": str(tmp_path / "missing.txt"),
            "folder": str(tmp_path / "folder"),
            "empty": str(tmp_path / "empty.txt"),
            "text": str(tmp_path / "text.txt"),
        }
        argv = fuzz_flags(rng, places)
        capsys.readouterr()
        try:
            code = main(argv)
        except SystemExit as stop:  # argparse's usage errors
            code = stop.code
        err = capsys.readouterr().err
        assert code in (0, 1, 2), (argv, code, err)
        assert "Traceback" not in err, (argv, err)
        if code != 0:  # one error line, besides warnings (bf16 on a CPU that emulates it, ...)
            errors = [line for line in err.strip().splitlines() if "warning: " not in line]
            assert len(errors) == 1 and "error: " in errors[0], (argv, err)
        for folder in (run, damaged):
            if not (code == 0 and "--resume" in argv and str(folder) in argv):  # only a resumed run saves there
                assert (folder / "checkpoint.pt").read_bytes() == before[folder], (argv, code, err)  # untouched
            assert not list(folder.glob("*.tmp")) and not (folder / ".lock").exists()
        codes[code] += 1
    print(f"CLI fuzz: {RUNS} runs, exit codes {codes}, checkpoints changed by a failing run: 0")
    assert codes[0] >= 10 and codes[1] >= 2 and codes[2] >= 10  # valid runs, runtime failures and bad usage


@pytest.mark.parametrize(
    "flags, code, message",
    [
        (["--preset", "7b"], 2, "invalid choice: '7b'"),
        (["--corpus", "."], 2, "is a folder"),
        (["--out", "pyproject.toml"], 2, "is not a folder"),
    ],
)
def test_real_processes_exit_with_the_code_and_one_line(flags, code, message):
    """The same promises outside pytest's capture: a real process, its real exit code and stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "minigpt", "train", "--preset", "tiny", "--steps", "1", *flags],
        env=ENV,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == code and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr


@posix_only
def test_kill_9_during_a_save_of_a_real_run_then_resume_reaches_the_straight_runs_losses(tmp_path):
    """A real tiny `minigpt train --save-every 1`, killed with SIGKILL while a checkpoint is being written (a
    checkpoint.pt.*.tmp is on disk), resumes with --resume from the last whole checkpoint and ends with exactly
    the losses and weights of the uninterrupted run."""
    steps = 40
    flags = ["train", "--preset", "tiny", "--batch", "2", "--ctx", "32", "--steps", str(steps), "--dropout", "0.1"]
    flags += ["--save-every", "1", "--device", "cpu"]
    straight = minigpt(*flags, "--out", str(tmp_path / "straight"))
    run = tmp_path / "cut"
    proc = minigpt(*flags, "--out", str(run))
    mid_save, deadline = False, time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if (run / "checkpoint.pt").exists() and list(run.glob("checkpoint.pt.*.tmp")):
            proc.kill()  # SIGKILL: no handler, no cleanup, a half-written temp file left behind
            mid_save = True
            break
    proc.communicate(timeout=600)
    assert mid_save and proc.returncode == -signal.SIGKILL, "the run ended before a save could be caught"
    saved = load_checkpoint(run / "checkpoint.pt")["step"]  # the last whole save: it loads
    assert 1 <= saved < steps
    resumed = minigpt(*flags, "--out", str(run), "--resume")
    _, err = resumed.communicate(timeout=1800)
    assert resumed.returncode == 0 and straight.wait(timeout=1800) == 0, err[-2000:]
    want, got = log_records(tmp_path / "straight"), log_records(run)
    final = load_checkpoint(run / "checkpoint.pt")["model"]
    reference = load_checkpoint(tmp_path / "straight" / "checkpoint.pt")["model"]
    print(f"kill -9 during a save: killed after step {saved}'s checkpoint, resumed to step {steps}")
    assert [r["loss"] for r in got] == [r["loss"] for r in want] and len(got) == steps
    assert all(torch.equal(final[k], reference[k]) for k in reference)
    assert not list(run.glob("*.tmp"))  # the resumed run removed the killed save's temp file


@posix_only
def test_a_reader_that_leaves_the_pipe_never_stops_training_or_loses_its_checkpoint(tmp_path):
    """`minigpt train ... | head -2`: the reader closes stdout after two lines; the run still trains every step,
    saves its checkpoint and exits 0 (what it printed after is lost, nothing else)."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "minigpt", "train", "--preset", "tiny", "--batch", "2", "--ctx", "32"]
    cmd += ["--steps", "30", "--out", str(out)]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    lines = [proc.stdout.readline() for _ in range(2)]  # what `head -2` reads, then it leaves
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    code = proc.wait(timeout=600)  # a guard against a hang only: the run takes seconds
    assert all(lines), lines
    assert code == 0, stderr[-2000:]
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert max(r.get("step", 0) for r in records) == 30, "every step ran after the reader left"
    assert load_checkpoint(out / "checkpoint.pt")["step"] == 30
    assert "BrokenPipeError" not in stderr and "Traceback" not in stderr


@posix_only
def test_kill_9_during_offloaded_training_leaves_no_temp_files(tmp_path):
    """The offloaded activations live in a file without a name: a run killed with SIGKILL mid-step leaves nothing
    in --offload-dir (a file or folder with a name, even one removed right after it is made, is left behind by a
    kill between the two: CI caught exactly that once)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    cmd = [sys.executable, "-m", "minigpt", "train", "--preset", "tiny", "--batch", "4", "--ctx", "64"]
    cmd += ["--steps", "100000", "--offload-activations", "--offload-dir", str(scratch), "--out", str(tmp_path / "r")]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=tmp_path)
    assert proc.stdout.readline() and proc.stdout.readline()  # training: the batch line, then a step's line
    proc.kill()
    proc.wait(timeout=600)
    assert os.listdir(scratch) == []


@posix_only
@pytest.mark.parametrize("delay", [0.3, 0.8, 1.5])
def test_ctrl_c_while_torch_imports_is_one_line(delay):
    """Ctrl-C in the first seconds of any command, while torch is still importing: one line, status 130 (or the
    signal itself, before Python is up), never a traceback from inside an import."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "minigpt", "params"], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=600)
    text = err.decode()
    assert "Traceback" not in text, text
    assert proc.returncode in (0, 130, -signal.SIGINT), (proc.returncode, text)
    assert len(text.strip().splitlines()) <= 1, text
