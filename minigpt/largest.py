"""The proof of a budget plan: run its printed `minigpt train` command in a fresh process and measure that process.

The peak resident memory is read by the operating system (getrusage of the child, in a wrapper process that
does nothing else), not by minigpt's own meter: the plan predicted the whole process, so the whole process
is what is measured. The run's JSON gives the losses and the speed.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass

from minigpt.plan_budget import BudgetPlan

# A wrapper that runs the command as its only child and prints the child's peak RSS (KiB on Linux, bytes on macOS).
WRAPPER = (
    "import resource, subprocess, sys\n"
    "done = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)\n"
    "print(json.dumps({'rc': done.returncode, 'out': done.stdout, 'err': done.stderr[-2000:],\n"
    "                  'max_rss': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))\n"
)


@dataclass
class ProofRun:
    """What the plan's command did: its peak RSS against the prediction, its losses and its speed."""

    predicted_bytes: int
    measured_bytes: int
    losses: list[float]
    seconds_per_step: float
    command: str

    @property
    def error(self) -> float:
        """(measured - predicted) / predicted: positive when the process held more than the plan said."""
        return self.measured_bytes / self.predicted_bytes - 1

    @property
    def loss_fell(self) -> bool:
        return len(self.losses) >= 2 and self.losses[-1] < self.losses[0]


def prove(plan: BudgetPlan, steps: int = 3, timeout_s: float = 3600, extra: str = "") -> ProofRun:
    """Train `plan`'s model for `steps` steps with its printed command, in a fresh process, and measure it.

    extra: flags added to the command (a fine-tune's --init-from RUN and --out DIR, as its plan advises)."""
    if not plan.fits:
        raise ValueError("this plan does not fit its budget: there is nothing to run")
    command = plan.command(steps=steps) + (f" {extra}" if extra else "")
    words = shlex.split(command)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    while "=" in words[0]:  # leading NAME=value words are the command's environment
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    argv = [sys.executable, "-m", "minigpt", *words[1:], "--json"]
    wrapper = [sys.executable, "-c", "import json\n" + WRAPPER, *argv]
    done = subprocess.run(wrapper, capture_output=True, text=True, env=env, timeout=timeout_s, check=True)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    if report["rc"] != 0:
        raise RuntimeError(f"the plan's command failed ({report['rc']}): {report['err'].strip()[-500:]}")
    summary = json.loads(report["out"].strip().splitlines()[-1])
    max_rss = report["max_rss"] * (1 if sys.platform == "darwin" else 1024)
    tokens_per_step = plan.batch * plan.ctx
    return ProofRun(
        predicted_bytes=plan.predicted_process_bytes,
        measured_bytes=max_rss,
        losses=[summary["first_train_loss"], summary["final_train_loss"]],
        seconds_per_step=tokens_per_step / summary["tokens_per_s"],
        command=command,
    )
