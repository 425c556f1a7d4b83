"""Chapter 1's figures draw small fake inputs with the Agg backend, in the course colours."""

import numpy as np
import pytest
from figure_checks import (
    close_figures,  # noqa: F401 - an autouse fixture: figures closed after each test
    hex_of,
)

from minigpt.figures import formats
from minigpt.formats import format_rows
from minigpt.style import precision_color


def test_format_ranges_draw_one_normal_bar_per_format_in_its_colour():
    rows = [r for r in format_rows() if r["name"] in ("fp32", "bf16", "fp16", "fp8 e4m3fn")]
    fig = formats.plot_format_ranges(rows)
    (ax,) = fig.axes
    normal = [bar for bar in ax.patches if bar.get_alpha() is None]  # subnormal bars are the pale ones
    assert len(normal) == len(rows)
    assert [hex_of(bar.get_facecolor()) for bar in normal] == [hex_of(formats.format_color(r["name"])) for r in rows]
    assert hex_of(normal[0].get_facecolor()) == hex_of(precision_color("fp32"))


def test_master_weights_draw_each_way_in_its_precisions_colour():
    history = {"pure bf16": [1.0, 1.0, 1.0], "fp32 master": [1.0, 1.001, 1.002], "bf16 copy of master": [1, 1, 1]}
    fig = formats.plot_master_weights(history, 1e-3)
    colours = [hex_of(line.get_color()) for line in fig.axes[0].get_lines()]
    assert colours == [hex_of(precision_color(p)) for p in ("bf16-pure", "fp32", "bf16")]
    assert "2 updates" in fig.axes[0].get_title()


def test_gradient_histogram_marks_fp16_and_bf16_limits_in_their_colours():
    log2_grads = np.random.default_rng(0).normal(-14, 3, size=1000)
    fig = formats.plot_gradient_histogram(log2_grads, 2.0**16)
    top, bottom = fig.axes
    top_colours = {hex_of(line.get_color()) for line in top.get_lines()}
    assert {hex_of(precision_color("fp16")), hex_of(precision_color("bf16"))} <= top_colours
    assert len(top.get_lines()) == 4 and len(bottom.get_lines()) == 3  # bf16's smallest normal is off the zoom


def test_matmul_seconds_draw_every_round_and_the_median_in_the_formats_colour():
    seconds = {"fp32": [0.003, 0.004, 0.005], "bf16": [0.001, 0.001, 0.002]}
    fig = formats.plot_matmul_seconds(seconds, "t")
    dots, median = fig.axes[0].get_lines()[:2]
    assert list(dots.get_xdata()) == pytest.approx([3.0, 4.0, 5.0]) and list(median.get_xdata()) == [4.0]
    assert hex_of(dots.get_color()) == hex_of(precision_color("fp32"))
