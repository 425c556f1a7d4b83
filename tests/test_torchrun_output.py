"""One voice under torchrun (issue 32 item 3): two real gloo processes on the CPU, tiny preset.

Process 0 alone prints the JSON, the summaries and the resume hint, which names the torchrun launch; a process
that fails ends the run with minigpt's one line, once. (torchrun itself then prints its own failure summary,
from its own process: nothing a worker can change.)
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = Path(sys.executable).with_name("torchrun")
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
TINY = ["train", "--preset", "tiny", "--batch", "2", "--ctx", "16", "--device", "cpu"]

pytestmark = pytest.mark.skipif(
    not TORCHRUN.exists() or not hasattr(os, "fork"), reason="needs torchrun and POSIX processes"
)


def torchrun(*args: str, cwd: Path = ROOT, dump_stacks: Path | None = None) -> subprocess.Popen:
    """torchrun with 2 processes; dump_stacks: a folder for a sitecustomize.py that makes each process print every
    thread's stack on SIGUSR1 (what a test that finds them stuck reports)."""
    command = [str(TORCHRUN), "--nproc_per_node", "2", *args]
    env = ENV
    if dump_stacks:
        site = dump_stacks / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(
            "import faulthandler, signal\nfaulthandler.register(signal.SIGUSR1, all_threads=True)\n"
        )
        env = {**ENV, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}"}
    return subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_json_under_torchrun_is_exactly_one_object_from_process_0():
    proc = torchrun("-m", "minigpt", *TINY, "--steps", "2", "--json")
    out, err = proc.communicate(timeout=1800)
    assert proc.returncode == 0, err[-2000:]
    summary = json.loads(out)  # the whole of stdout: one object, nothing interleaved
    assert summary["steps"] == 2 and summary["final_val_loss"] is not None and summary["effective_batch"] == 4
    assert "Traceback" not in err and "warning" not in err


def test_an_interrupted_torchrun_says_once_how_to_resume_with_torchrun(tmp_path):
    run = tmp_path / "run"
    proc = torchrun("-m", "minigpt", *TINY, "--steps", "5000", "--out", str(run), cwd=tmp_path, dump_stacks=tmp_path)
    started, lines = time.monotonic(), 0
    while time.monotonic() < started + 240 and proc.poll() is None and lines < 3:
        lines = len((run / "log.jsonl").read_text().splitlines()) if (run / "log.jsonl").exists() else 0
        time.sleep(0.05)
    waited = time.monotonic() - started
    proc.send_signal(signal.SIGTERM)  # torchrun passes it on to both processes: they stop after the step, save
    try:  # torchrun gives its processes 30 s before it kills them: a stack dump at 20 s says where they were
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        for worker in children(proc.pid):
            os.kill(worker, signal.SIGUSR1)
        _, err = proc.communicate(timeout=1200)
    hints = [line for line in err.splitlines() if line.startswith("interrupted at step")]
    seen = f"SIGTERM after {waited:.1f} s at {lines} log lines; stderr:\n{err[:6000]}\n...\n{err[-3000:]}"
    assert len(hints) == 1, seen
    command = hints[0].split("resume with: ", 1)[1]
    assert command.startswith("torchrun --nproc_per_node 2 -m minigpt train --preset tiny")
    assert shlex.split(command).count("--resume") == 1 and (run / "checkpoint.pt").exists()


def children(pid: int) -> list[int]:
    """The processes `pid` started (Linux's /proc; elsewhere none)."""
    found = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in found.read_text().split()] if found.exists() else []


def test_a_failing_process_ends_the_run_with_one_minigpt_line():
    """Process 1 raises at step 2; process 0, waiting in the all-reduce, sees its peer go and says nothing."""
    script = ROOT / "tests" / "torchrun_failing_rank.py"
    proc = torchrun(str(script), *TINY, "--steps", "5", "--json")
    out, err = proc.communicate(timeout=1800)  # both processes end: no hang in a collective
    assert proc.returncode != 0 and out == ""
    ours = [line for line in err.splitlines() if line.startswith("minigpt train:")]
    assert ours == [
        "minigpt train: error: RuntimeError: process 1 failed on purpose at step 2 "
        "(MINIGPT_DEBUG=1 shows the traceback)"
    ], err[-3000:]
