"""Chapter 7's figures draw small fake inputs with the Agg backend, in the course colours."""

import pytest
from figure_checks import (
    close_figures,  # noqa: F401 - an autouse fixture: figures closed after each test
    hex_of,
    line_colours,
)

from minigpt.figures import planning
from minigpt.style import mode_color, precision_color


def test_micro_batch_search_draws_each_mode_in_its_colour_and_the_limit():
    peaks = {"none": [1.0, 2.0, 4.0], "selective": [0.8, 1.2, 2.0], "full": [0.5, 0.7, 1.0]}
    fig = planning.plot_micro_batch_search(
        [1, 2, 4], peaks, {"none": 1.0, "selective": 1.06, "full": 1.33}, 3.0, "usable", "t"
    )
    (ax,) = fig.axes
    assert len(ax.get_lines()) == 4  # three modes and the card's usable memory
    assert {hex_of(mode_color(m)) for m in peaks} <= line_colours(fig)
    assert [t.get_text() for t in ax.get_legend().get_texts()][0] == "checkpointing none (1.00x time)"


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_training_run_is_drawn_in_its_precisions_colour(precision):
    fig = planning.plot_training_run([1, 2, 3], [9.0, 7.0, 6.0], [(3, 6.2)], 9.01, precision, "4 x 2", "t")
    train, val = fig.axes[0].get_lines()[:2]
    assert hex_of(train.get_color()) == hex_of(precision_color(precision))
    assert list(val.get_xdata()) == [3] and list(val.get_ydata()) == [6.2]


def test_sharded_static_memory_has_one_panel_per_model_and_the_card_on_the_last():
    per_gpu = {m: {"DDP": [16.0, 16.0], "ZeRO-3": [16.0, 8.0]} for m in ("small", "7B")}
    fig = planning.plot_sharded_static_memory([1, 2], per_gpu, 80.0, "one 80 GB GPU")
    assert len(fig.axes) == 2
    assert [len(ax.get_lines()) for ax in fig.axes] == [2, 3]  # two strategies each, plus the card on the last
    assert list(fig.axes[1].get_lines()[-1].get_ydata()) == [80.0, 80.0]
