"""Chapters 3 and 4's figures draw small fake inputs with the Agg backend, in the course colours."""

from figure_checks import (
    close_figures,  # noqa: F401 - an autouse fixture: figures closed after each test
    hexes,
)

from minigpt.figures import mixed_precision
from minigpt.style import precision_color


def history(scales, skipped):
    return [
        {"step": i + 1, "scale": s, "skipped": k, "loss": 3.0 - 0.1 * i, "grad_norm": 1.0 + i}
        for i, (s, k) in enumerate(zip(scales, skipped))
    ]


def test_line_styles_tell_apart_runs_of_one_precision():
    styles = mixed_precision.line_styles({"a": "fp32", "b": "bf16", "c": "fp32"})
    assert styles["a"] != styles["c"] and styles["a"] == styles["b"]


def test_loss_and_difference_draws_each_precision_in_its_colour_and_the_reference_on_top():
    losses = {"fp32": [3.0, 2.5, 2.0], "bf16": [3.0, 2.5, 2.0], "fp32, seed 1": [3.1, 2.6, 2.2]}
    precisions = {"fp32": "fp32", "bf16": "bf16", "fp32, seed 1": "fp32"}
    fig = mixed_precision.plot_loss_and_difference([1, 2, 3], losses, precisions, "fp32", "t")
    ax, ax_diff = fig.axes
    assert hexes(line.get_color() for line in ax.get_lines()) == hexes(
        [precision_color("fp32"), precision_color("bf16")]
    )
    reference = [line for line in ax.get_lines() if line.get_label() == "fp32 (reference)"]
    # the reference lies exactly under the bf16 run here: it must be dashed and drawn above it to stay visible
    assert len(reference) == 1 and reference[0].get_linestyle() == "--"
    assert reference[0].get_zorder() > max(line.get_zorder() for line in ax.get_lines() if line not in reference)
    assert len(ax_diff.get_lines()) == 3  # two runs minus the reference, and the reference's zero line


def test_speed_rounds_show_every_round_and_the_median():
    fig = mixed_precision.plot_speed_rounds({"matmul": [2.0, 2.2, 1.9], "step": [1.1, 0.9, 1.0]}, "bf16", "t")
    (ax,) = fig.axes
    bars = [p for p in ax.patches]
    assert [b.get_height() for b in bars] == [2.0, 1.0]  # the medians of the rounds
    assert hexes(b.get_facecolor()[:3] for b in bars) == hexes([precision_color("bf16")])
    dots = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert [len(d.get_ydata()) for d in dots] == [3, 3]  # one dot per round


def test_gradient_histogram_shifts_by_the_scale_in_fp16_colour():
    fig = mixed_precision.plot_gradient_histogram([-30.0, -20.0, -12.0], 16, "t")
    (ax,) = fig.axes
    colours = hexes(bar.get_facecolor()[:3] for container in ax.containers for bar in container)
    assert colours == hexes([precision_color("fp32"), precision_color("fp16")])
    assert [line.get_xdata()[0] for line in ax.get_lines()][:2] == [-24, -14]  # fp16's limits


def test_loss_scales_draw_the_reference_dashed_above_the_run_that_follows_it():
    ref = history([2.0**16] * 4, [False] * 4)
    forgot = history([2.0**16, 2.0**16, 2.0**15, 2.0**15], [False, True, False, False])
    fig = mixed_precision.plot_loss_scales(
        {"uninterrupted": ref, "forgot": forgot}, "t", reference="uninterrupted", resume_at=2.5
    )
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert lines["uninterrupted"].get_linestyle() == "--"
    assert lines["uninterrupted"].get_zorder() > lines["forgot"].get_zorder()
    assert hexes([lines["forgot"].get_color()]) == hexes([precision_color("fp16")])
    assert len(ax.collections) == 1  # the crosses of the one skipped step


def test_clip_order_has_loss_and_norm_panels_with_the_reference_on_top():
    runs = {"wrong": history([1.0] * 3, [False] * 3), "right": history([1.0] * 3, [False] * 3)}
    fig = mixed_precision.plot_clip_order(runs, reference="right")
    assert len(fig.axes) == 2
    for ax in fig.axes:
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert lines["right"].get_zorder() > lines["wrong"].get_zorder()
        assert hexes([lines["wrong"].get_color()]) == hexes([precision_color("fp16")])
