"""Chapters 5 and 6's figures draw small fake inputs with the Agg backend, in the course colours."""

from figure_checks import (
    close_figures,  # noqa: F401 - an autouse fixture: figures closed after each test
    hexes,
    line_colours,
)

from minigpt.figures import memory_savers
from minigpt.style import mode_color, precision_color
from minigpt.timing import Ratio

MODES = ("full", "sqrt", "selective")


def patch_colours(ax) -> set[str]:
    return hexes(p.get_facecolor() for p in ax.patches if p.get_fill())


def ratios(*medians: float) -> list[Ratio]:
    return [Ratio(m, m - 0.1, m + 0.1) for m in medians]


def test_accumulation_cost_draws_time_in_the_precisions_colour_and_marks_the_worst_moment_as_peak():
    seconds = {"4 x 1": [0.10, 0.12, 0.11], "1 x 4": [0.30, 0.33, 0.31]}
    moments = {
        "4 x 1": {"forward": 50, "backward": 80, "optimizer": 10},
        "1 x 4": {"forward": 20, "backward": 25, "optimizer": 10},
    }
    fig = memory_savers.plot_accumulation_cost(seconds, moments, {"4 x 1": 8, "1 x 4": 8}, "fp32", "t")
    ax_t, ax_m = fig.axes
    time_bars = [p for p in ax_t.patches if p.get_fill()]
    assert [b.get_height() for b in time_bars] == [0.11, 0.31]  # the medians of the rounds
    assert patch_colours(ax_t) == hexes([precision_color("fp32")])
    peaks = [y for line in ax_m.get_lines() if line.get_marker() == "D" for y in line.get_ydata()]
    # one diamond per setting, at its worst moment (in MiB), never at the sum of the moments
    assert peaks == [80 / 2**20, 25 / 2**20]
    assert not patch_colours(ax_m) & hexes([precision_color("fp32"), precision_color("bf16"), mode_color("full")])


def test_checkpointing_modes_fills_kept_boxes_in_each_modes_colour():
    keeps = {"none": "all", "full": "inputs", "sqrt": "segment inputs", "selective": "matmul outputs"}
    fig = memory_savers.plot_checkpointing_modes(9, keeps)
    (ax,) = fig.axes
    assert hexes(mode_color(m) for m in keeps) <= patch_colours(ax)
    assert [t.get_text() for t in ax.get_yticklabels()] == list(reversed(keeps))


def test_held_in_blocks_draws_one_line_per_mode_and_the_crossover():
    held = {m: [1.0, 2.0, 4.0] for m in ("none", *MODES)}
    fig = memory_savers.plot_held_in_blocks([1, 2, 4], held, crossover=3)
    assert len(fig.axes[0].get_lines()) == 5
    assert hexes(mode_color(m) for m in held) <= line_colours(fig)


def test_depth_sweep_draws_measured_points_on_predicted_lines_in_each_modes_colour():
    modes = ("none", *MODES)
    measured = {f: {m: [1.0, 2.0] for m in modes} for f in ("activations", "peak")}
    predicted = {f: {m: [1.0, 1.5, 2.0] for m in modes} for f in ("activations", "peak")}
    fig = memory_savers.plot_depth_sweep([1, 3], measured, [1, 2, 3], predicted, 0.5, "t")
    assert len(fig.axes) == 2
    assert hexes(mode_color(m) for m in modes) <= line_colours(fig)
    assert len(fig.axes[1].get_lines()) == 2 * len(modes)  # measured and predicted per mode, no extra line


def test_time_ratios_show_the_spread_of_the_rounds():
    fig = memory_savers.plot_time_ratios(
        [2, 4], {m: ratios(1.2, 1.3) for m in MODES}, {m: [1.25, 1.3] for m in MODES}, "L", "t"
    )
    (ax,) = fig.axes
    assert hexes(mode_color(m) for m in MODES) <= line_colours(fig)
    assert len(ax.containers) == len(MODES)  # one errorbar (median and range of the rounds) per mode


def test_ctx_sweep_has_memory_and_time_panels():
    modes = ("none", *MODES)
    fig = memory_savers.plot_ctx_sweep(
        [32, 64],
        {m: [1.0, 2.0] for m in modes},
        {m: [1.0, 2.0] for m in modes},
        {m: ratios(1.3, 1.2) for m in MODES},
        {m: [1.3, 1.3] for m in MODES},
        "t",
    )
    assert len(fig.axes) == 2
    assert hexes(mode_color(m) for m in modes) <= hexes(line.get_color() for line in fig.axes[0].get_lines())
    assert len(fig.axes[1].containers) == len(MODES)
