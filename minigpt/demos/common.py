"""What every demo shares: its sizes (`Scale`), its data, a short training run, and printing and saving helpers.

A demo shows numbers that the package computes; these helpers only print them as tables and save figures.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import numpy as np
import torch
from tabulate import tabulate

from minigpt.data import TokenData, load_tokens
from minigpt.model import PRESETS
from minigpt.train import TrainConfig, TrainResult, train

CPU = torch.device("cpu")
MIB = 2**20


@dataclasses.dataclass(frozen=True)
class Scale:
    """How big a demo's runs are: a preset, a micro-batch, a context length and training steps."""

    preset: str
    batch: int
    ctx: int
    steps: int  # of the runs whose loss curves are shown
    speed_steps: int  # of the runs that only measure tokens/s (the median leaves the first step out)


def default_scale(quick: bool, preset: str = "10m") -> Scale:
    """The usual size of a demo's runs: `preset` at batch 4 x ctx 64, or the tiny preset when `quick`."""
    return Scale("tiny", 2, 32, 3, 2) if quick else Scale(preset, 4, 64, 20, 4)


# ----------------------------------------------------------------------------------------------------------
# Data and training


@functools.lru_cache(maxsize=2)
def token_data(quick: bool) -> TokenData:
    """The built-in stories (tokenized once, then cached); random tokens in quick mode."""
    if not quick:
        return load_tokens()
    tokens = np.random.default_rng(0).integers(0, PRESETS["tiny"].vocab_size, 20_000).astype(np.uint16)
    return TokenData(tokens[:18_000], tokens[18_000:], "minigpt-8k", "random tokens (quick)")


def short_training_run(scale: Scale, quick: bool, **overrides) -> TrainResult:
    """A short, quiet training run on the CPU (same seed, so the same batches, whatever the overrides)."""
    settings = dict(
        preset=scale.preset,
        batch=scale.batch,
        ctx=scale.ctx,
        steps=scale.steps,
        lr=2e-3,
        eval_batches=2,
        sample_tokens=0,
        device="cpu",
        verbose=False,
        progress=False,
    )
    return train(TrainConfig(**{**settings, **overrides}), data=token_data(quick))


# ----------------------------------------------------------------------------------------------------------
# Showing things


def show_table(title: str, rows: list, headers: list[str] | str = "keys") -> None:
    """Print a title and, below it, `rows` as a markdown table."""
    print(f"\n{title}\n")
    print(tabulate(rows, headers=headers, tablefmt="github", floatfmt="g", intfmt=","))


def conclude(text: str) -> None:
    """Print the demo's one-line conclusion (the tests look for exactly one)."""
    print(f"\nConclusion: {text}")


def mib(n_bytes: float) -> str:
    """A byte count as MiB with one decimal, for a table."""
    return f"{n_bytes / MIB:,.1f}"


def pyplot():
    """matplotlib.pyplot, drawing to files only: works in a terminal, over ssh and in CI."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, out: Path, name: str) -> Path:
    """Save `fig` as the PNG `out/name`, close it, and say where it went."""
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    print(f"saved {out / name}")
    return out / name
