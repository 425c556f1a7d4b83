"""Demo `train`: the 10m GPT learns from the built-in stories, with nothing to save memory yet.

The loss falls from guessing (ln of the vocabulary) as it trains; a sample shows what it writes after.
"""

from __future__ import annotations

import math
from pathlib import Path

from minigpt.demos.common import Scale, conclude, pyplot, save_figure, short_training_run, show_table


def demo_train(out: Path, size: str = "lecture") -> list[Path]:
    """The 10m GPT trains on the built-in stories: the loss falls, tokens/s, and what it writes after."""
    quick = size == "quick"
    s = Scale("tiny", 2, 32, 6, 2) if quick else Scale("10m", 8, 64, 80 if size == "full" else 40, 4)
    run = short_training_run(s, quick, lr=4e-3, sample_tokens=40, eval_every=s.steps // 2)
    losses, summary, vocab = run.losses, run.summary(), run.model.cfg.vocab_size
    guessing = math.log(vocab)  # the loss of a uniform guess over the vocabulary
    every = max(1, s.steps // 8)
    rows = [[r["step"], f"{r['loss']:.3f}", f"{r['tokens_per_s']:,.0f}"] for r in run.history[::every]]
    title = f"{s.preset} ({run.model.num_params():,} parameters), batch {s.batch} x ctx {s.ctx}, fp32"
    show_table(title, rows, ["step", "train loss", "tokens/s"])
    print(f"\nSample after {s.steps} steps:\n\n{run.sample}\n")

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.plot(range(1, len(losses) + 1), losses, label="train")
    ax.plot(*zip(*run.val_history), "o-", label="val")
    ax.axhline(guessing, color="gray", linestyle="--", label="ln(vocab): guessing")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss, nats per token")
    ax.set_title(f"{s.preset} on the built-in stories")
    ax.legend()
    figures = [save_figure(fig, out, "train_loss.png")]
    conclude(
        f"in {s.steps} steps the loss fell from {losses[0]:.2f} (ln {vocab} = {guessing:.2f} is guessing) "
        f"to {losses[-1]:.2f}, val {summary['final_val_loss']:.2f}, "
        f"at {summary['tokens_per_s']:,.0f} tokens/s on this CPU."
    )
    return figures
