"""Demo `plan`: the planner picks precision, micro-batch, accumulation and checkpointing for some hardware.

Its choices for each preset, and the reasons, are set against recommended settings from rules of thumb.
"""

from __future__ import annotations

from pathlib import Path

from minigpt.demos.common import conclude, pyplot, save_figure, show_table
from minigpt.hardware import GIB, detect_hardware
from minigpt.model import PRESETS
from minigpt.plan import compare_with_rules_of_thumb, plan, recommended_table


def demo_plan(out: Path, size: str = "lecture") -> list[Path]:
    """The planner's choices for each preset on common hardware, and why, against the rules of thumb."""
    quick = size == "quick"
    t4 = plan("125m", "t4", PRESETS["125m"].ctx, 128)
    print(t4.explain())
    hardware = ("cpu", "t4") if quick else ("cpu", "mps", "t4", "a100-80")
    rows = recommended_table(hardware=hardware)
    show_table("Recommended settings, computed (effective batch 128, each preset's full ctx)", rows)
    rules = compare_with_rules_of_thumb()
    show_table("The rules of thumb against the planner", [{k: v for k, v in r.items() if k != "why"} for r in rules])
    for r in rules:
        if not r["agrees"]:
            print(f"  {r['preset']} on {r['hardware']}: {r['why']}")
    here = detect_hardware()
    mine = plan("30m", here, PRESETS["30m"].ctx, 32)
    print(
        f"\nThis machine ({here.name}, {here.memory_bytes / GIB:.1f} GiB): 30m at ctx {mine.ctx}, effective "
        f"batch 32 -> {mine.precision_label}, micro-batch {mine.micro_batch} x accum {mine.accum}, "
        f"checkpointing {mine.checkpointing}" + ("" if mine.fits else f" - does not fit: {mine.lever}")
    )

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.6))
    labels = [f"{r['preset']}\n{r['hardware']}" for r in rows]
    colors = ["tab:green" if r["fits"] else "tab:red" for r in rows]
    ax.bar(labels, [100 * r["peak_GiB"] / r["usable_GiB"] for r in rows], color=colors)
    ax.axhline(100, color="black", linestyle="--", linewidth=1)
    ax.set_ylabel("predicted peak, % of usable memory")
    ax.set_title("The plan for each preset x hardware (green: fits)")
    figures = [save_figure(fig, out, "plan.png")]

    conclude(
        f"125m at ctx {t4.ctx} on a {t4.hardware.name}: {t4.precision_label}, micro-batch {t4.micro_batch} "
        f"x accum {t4.accum}, checkpointing {t4.checkpointing}; predicted peak "
        f"{t4.predicted_peak_bytes / GIB:.2f} of {t4.usable_bytes / GIB:.2f} GiB usable."
    )
    return figures
