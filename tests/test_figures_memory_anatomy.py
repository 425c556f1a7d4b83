"""Chapter 2's figures draw small fake inputs with the Agg backend, in the course colours."""

import numpy as np
import pytest
from figure_checks import (
    close_figures,  # noqa: F401 - an autouse fixture: figures closed after each test
    hex_of,
)

from minigpt.figures import memory_anatomy as figures
from minigpt.style import mode_color, precision_color

TERMS = {"weights": 1.0, "gradients": 1.0, "optimizer": 2.0, "activations": 4.0}


def test_memory_terms_never_take_a_precisions_or_a_modes_colour():
    course = {hex_of(precision_color(p)) for p in ("fp32", "bf16", "fp16", "bf16-pure")}
    course |= {hex_of(mode_color(m)) for m in ("none", "full", "sqrt", "selective")}
    assert not {hex_of(c) for c in figures.TIMELINE_COLORS.values()} & course


def test_step_breakdown_stacks_the_terms_and_draws_the_peak_apart_from_the_stack():
    fig = figures.plot_step_breakdown(["a\nfp32", "a\nbf16"], ["fp32", "bf16"], [TERMS, TERMS], [9.5, 7.0], "t")
    gib, shares = fig.axes
    assert len(gib.patches) == len(shares.patches) == 8  # four terms x two bars
    assert [list(line.get_ydata()) for line in gib.get_lines()] == [[9.5], [7.0]]  # the peaks, not the stack (8)
    assert sum(bar.get_height() for bar in shares.patches[:4]) == pytest.approx(100)  # the first bar's four terms
    ticks = [hex_of(t.get_color()) for t in gib.get_xticklabels()]
    assert ticks == [hex_of(precision_color("fp32")), hex_of(precision_color("bf16"))]


def test_step_moments_mark_the_tallest_phase_and_the_sum_of_the_terms():
    moments = {"measured": {"forward": 5.0, "backward": 7.0}, "predicted": {"forward": 5.5, "backward": 6.5}}
    fig = figures.plot_step_moments(moments, 8.0, "t")
    (ax,) = fig.axes
    diamonds = [line for line in ax.get_lines() if line.get_marker() == "D"]
    assert [line.get_ydata()[0] for line in diamonds] == pytest.approx([7.0 * 1.03, 6.5 * 1.03])
    assert any(list(line.get_ydata()) == [8.0, 8.0] for line in ax.get_lines())  # the dashed sum


def test_growth_figures_draw_measured_and_predicted_lines():
    fig = figures.plot_activations_vs_batch([1, 2, 4], [1.0, 2.0, 4.0], [1.0, 2.0, 4.0], 3.0, 64)
    assert len(fig.axes[0].get_lines()) == 3  # measured, predicted, static
    fig = figures.plot_activations_vs_context([64, 128], [1e6, 2e6], [2e6, 6e6], [64, 96, 128], [2e6, 4e6, 6e6], "t")
    assert [len(ax.get_lines()) for ax in fig.axes] == [3, 3]


def test_calculator_draws_the_four_terms_the_peak_and_every_card():
    fig = figures.plot_calculator(TERMS, 9.0, {"16 GB": 14.9, "80 GB": 74.5}, "t")
    (ax,) = fig.axes
    term_colours = [hex_of(c) for c in figures.MEMORY_TERM_COLORS.values()]
    assert [hex_of(bar.get_facecolor()) for bar in ax.patches] == term_colours
    assert len(ax.get_lines()) == 3  # the peak and two cards
    assert ax.get_xlim()[1] >= 74.5


def test_peak_vs_micro_batch_colours_lines_by_precision_and_markers_by_mode():
    peaks = {("fp32", "none"): [1.0, 2.0], ("bf16", "selective"): [0.5, 1.0]}
    fig = figures.plot_peak_vs_micro_batch([1, 2], peaks, {"16 GB": 14.9}, "t")
    fp32, bf16 = fig.axes[0].get_lines()[:2]
    assert hex_of(fp32.get_color()) == hex_of(precision_color("fp32"))
    assert hex_of(bf16.get_markerfacecolor()) == hex_of(mode_color("selective"))
    assert fig.axes[0].get_legend().get_texts()[1].get_text() == "bf16 autocast, checkpointing selective"


def test_timeline_phases_find_three_phases_per_step_and_the_figure_shades_them():
    #                    step 1: forward, backward, optimizer    step 2
    gradient = np.array([0, 0, 0, 2, 4, 4, 0, 0, 0, 2, 4, 4, 0], dtype=float)
    activation = np.array([0, 2, 5, 3, 1, 0, 0, 2, 5, 3, 1, 0, 0], dtype=float)
    spans = figures.timeline_phases(gradient, activation)
    assert spans[:3] == [(1, "forward", 0, 2), (1, "backward", 2, 4), (1, "optimizer", 4, 6)]
    assert [s[0] for s in spans] == [1, 1, 1, 2, 2, 2]
    sizes = np.zeros((len(gradient), len(figures.TIMELINE_COLORS)))
    sizes[:, 4], sizes[:, 5] = activation, gradient
    fig = figures.plot_memory_timeline(np.arange(len(gradient), dtype=float), sizes, spans, "t")
    assert len(fig.axes[0].texts) == len(spans)  # one label per shaded phase
