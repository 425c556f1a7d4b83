"""Fault injection: kill -9 a process while it saves checkpoints, many times, and check what survives.

Run by tests/test_fault_injection.py: `python tests/kill_during_saves.py FOLDER KILLS SEED`. This process
imports torch once; then, for each kill, it forks a child that saves checkpoints in a loop (steps k+1, k+2,
...) through minigpt's own save_checkpoint, waits a random moment, kills the child with SIGKILL and checks
the checkpoint on disk: it must load, and be the last save the child finished or the one it had started.
Prints one JSON line of counts. POSIX only (fork, SIGKILL).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from pathlib import Path

import torch

from minigpt.files import stale_temp_files
from minigpt.run_state import CheckpointError, RunFolder, load_checkpoint, save_checkpoint

NUMBERS = 64 * 1024  # 256 KiB per tensor: a save takes a few milliseconds, so kills land inside saves


def fake_state(step: int) -> dict:
    """A small stand-in for a training state whose every number says which step wrote it."""
    return {
        "step": step,
        "model": {"w": torch.full((NUMBERS,), float(step))},
        "optimizer": {"exp_avg": torch.full((NUMBERS,), -float(step))},
        "history": [{"step": s, "loss": 1.0 / (s + 1)} for s in range(max(0, step - 20), step)],
    }


def whole(state: dict) -> bool:
    """Every part of a loaded state comes from the same save."""
    step = state["step"]
    return bool((state["model"]["w"] == step).all() and (state["optimizer"]["exp_avg"] == -step).all())


def save_forever(path: Path, step: int, report: int) -> None:
    """The child: save step, step + 1, ... and write 's<step>' before and 'd<step>' after each save."""
    while True:
        os.write(report, f"s{step}\n".encode())
        save_checkpoint(fake_state(step), path)
        os.write(report, f"d{step}\n".encode())
        step += 1


def main(folder: str, kills: int, seed: int) -> dict:
    torch.set_num_threads(1)  # no thread pools: fork() stays safe
    rng = random.Random(seed)
    path = Path(folder) / "checkpoint.pt"
    save_checkpoint(fake_state(0), path)
    on_disk, temp_files = 0, 0
    counts = {"kills": 0, "mid_save_kills": 0, "temp_files_left_by_kills": 0, "data_lost": 0}
    for _ in range(kills):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            os.close(read_end)
            try:
                save_forever(path, on_disk + 1, write_end)
            finally:
                os._exit(0)
        os.close(write_end)
        time.sleep(rng.uniform(0.0, 0.02))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        with os.fdopen(read_end) as report:
            events = report.read().split()
        done = [int(e[1:]) for e in events if e.startswith("d")]
        started = [int(e[1:]) for e in events if e.startswith("s")]
        last_done = done[-1] if done else on_disk
        in_progress = started[-1] if started and started[-1] > last_done else None
        counts["kills"] += 1
        counts["mid_save_kills"] += in_progress is not None
        counts["temp_files_left_by_kills"] += len(stale_temp_files(path)) - temp_files
        temp_files = len(stale_temp_files(path))
        try:
            state = load_checkpoint(path)
            ok = state["step"] in (last_done, in_progress) and whole(state)
        except CheckpointError:
            ok = False
        if not ok:
            counts["data_lost"] += 1
            break
        on_disk = state["step"]
    with RunFolder(folder).locked():  # a run that takes the folder cleans a killed save's temp files
        pass
    counts["temp_files_after_cleanup"] = len(stale_temp_files(path))
    counts["saves_completed"] = on_disk
    return counts


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))
