"""What the figure tests share: matplotlib's Agg backend (no window), every figure closed after its test,
and colours compared as hex strings ("#0072b2"), whatever form matplotlib returns them in."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.colors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    """Autouse in every module that imports it: no figure outlives its test."""
    yield
    plt.close("all")


def hex_of(color) -> str:
    return matplotlib.colors.to_hex(color)


def hexes(colors) -> set[str]:
    return {hex_of(c) for c in colors}


def line_colours(fig) -> set[str]:
    """The colours of every line on every axes of `fig`."""
    return hexes(line.get_color() for ax in fig.axes for line in ax.get_lines())
