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


def torchrun(*args: str, cwd: Path = ROOT) -> subprocess.Popen:
    command = [str(TORCHRUN), "--nproc_per_node", "2", *args]
    return subprocess.Popen(command, env=ENV, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_json_under_torchrun_is_exactly_one_object_from_process_0():
    proc = torchrun("-m", "minigpt", *TINY, "--steps", "2", "--json")
    out, err = proc.communicate(timeout=1800)
    assert proc.returncode == 0, err[-2000:]
    summary = json.loads(out)  # the whole of stdout: one object, nothing interleaved
    assert summary["steps"] == 2 and summary["final_val_loss"] is not None and summary["effective_batch"] == 4
    assert "Traceback" not in err and "warning" not in err


def test_an_interrupted_torchrun_says_once_how_to_resume_with_torchrun(tmp_path):
    run = tmp_path / "run"
    proc = torchrun("-m", "minigpt", *TINY, "--steps", "5000", "--out", str(run), cwd=tmp_path)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if (run / "log.jsonl").exists() and len((run / "log.jsonl").read_text().splitlines()) >= 3:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)  # torchrun passes it on to both processes: they stop after the step, save
    _, err = proc.communicate(timeout=1200)
    hints = [line for line in err.splitlines() if line.startswith("interrupted at step")]
    assert len(hints) == 1, err[-3000:]
    command = hints[0].split("resume with: ", 1)[1]
    assert command.startswith("torchrun --nproc_per_node 2 -m minigpt train --preset tiny")
    assert shlex.split(command).count("--resume") == 1 and (run / "checkpoint.pt").exists()


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
