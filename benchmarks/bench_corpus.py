"""0. The built-in corpus: learnable, but neither trivially repetitive nor noise.

Reports the corpus's unigram token entropy (the loss of a model that only knows token frequencies) and the
10m preset's val loss after a few hundred CPU steps. Targets: that loss is at least 1 nat below the unigram
entropy (there is structure to learn) and above 0.5 nats (the text is not near-deterministic).

    python -m benchmarks.bench_corpus [--quick] [--device cpu]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.benchlib import Check, Section, main_for, pyplot, save_figure, table
from minigpt.data import TokenData, load_tokens
from minigpt.train import TrainConfig, train

SIZES = {
    False: dict(preset="10m", batch=8, ctx=128, steps=300, lr=2e-3, eval_every=50),
    True: dict(preset="tiny", batch=4, ctx=32, steps=10, lr=2e-3, eval_every=5),
}


def unigram_entropy(tokens: np.ndarray) -> float:
    """Entropy in nats of the token frequency distribution: sum of -p log p."""
    counts = np.bincount(tokens.astype(np.int64))
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def run(quick: bool, out: Path, device: torch.device, data: TokenData | None = None) -> Section:
    start = time.perf_counter()
    data = data or load_tokens()
    entropy = unigram_entropy(np.asarray(data.train))
    size = SIZES[quick]
    result = train(TrainConfig(**size, device=str(device), sample_tokens=40, verbose=False, progress=False), data=data)
    val = result.val_history[-1][1]
    rows = [
        ["tokens (train / val)", f"{len(data.train):,} / {len(data.val):,}"],
        ["unigram entropy (nats)", f"{entropy:.3f}"],
        [f"{size['preset']} val loss after {size['steps']} steps (nats)", f"{val:.3f}"],
        ["gap (nats)", f"{entropy - val:.3f}"],
    ]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r["step"] for r in result.history], result.losses, label="train loss")
    ax.plot(*zip(*result.val_history), "o-", label="val loss")
    ax.axhline(entropy, color="gray", ls="--", label="unigram entropy")
    ax.set(xlabel="optimizer step", ylabel="loss (nats per token)", title=f"{size['preset']} on the built-in corpus")
    ax.legend()
    figure = save_figure(fig, out, "corpus_loss.png")
    body = table(rows, ["what", "value"]) + f"\n\nSample after training:\n\n```\n{result.sample.strip()}\n```"
    checks = [
        Check(
            "val loss at least 1 nat below the unigram entropy", f"{entropy - val:.2f} nats below", entropy - val >= 1
        ),
        Check("val loss above 0.5 nats (not near-deterministic text)", f"{val:.2f}", val > 0.5),
    ]
    return Section("0. The built-in corpus", body, checks, [figure], time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    return main_for(run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
