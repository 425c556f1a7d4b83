"""One colour per precision and per checkpointing mode, the same in every plot of the course.

The colours are the Okabe-Ito palette (Okabe and Ito 2008, "Color Universal Design"), chosen to stay
distinguishable with the common forms of colour blindness; its yellow is left out (too faint on white)
and its grey takes the baseline "none". All eight names get different colours, so a precision and a
checkpointing mode never look alike either.
"""

from __future__ import annotations

from types import MappingProxyType

from minigpt.precision import DTYPE_ALIASES, PRECISIONS
from minigpt.recompute import CHECKPOINTING_MODES

PRECISION_COLORS = MappingProxyType(
    {
        "fp32": "#0072B2",  # blue: the reference everything is compared with
        "bf16": "#E69F00",  # orange
        "fp16": "#D55E00",  # vermillion
        "bf16-pure": "#CC79A7",  # reddish purple
    }
)

MODE_COLORS = MappingProxyType(
    {
        "none": "#999999",  # grey: the baseline, nothing recomputed
        "full": "#009E73",  # bluish green
        "sqrt": "#56B4E9",  # sky blue
        "selective": "#000000",  # black
    }
)

assert set(PRECISION_COLORS) == set(PRECISIONS) and set(MODE_COLORS) == set(CHECKPOINTING_MODES)


def precision_color(name: str) -> str:
    """The colour of a precision mode ("fp32", "bf16", "fp16", "bf16-pure"; dtype names like "bfloat16" too).

    Raises ValueError naming the known precisions for anything else, so a typo never draws in a default colour.
    """
    key = DTYPE_ALIASES.get(name, name)
    if key not in PRECISION_COLORS:
        raise ValueError(f"no colour for precision {name!r}; known: {', '.join(PRECISION_COLORS)}")
    return PRECISION_COLORS[key]


def mode_color(name: str) -> str:
    """The colour of a checkpointing mode ("none", "full", "sqrt", "selective").

    Raises ValueError naming the known modes for anything else.
    """
    if name not in MODE_COLORS:
        raise ValueError(f"no colour for checkpointing mode {name!r}; known: {', '.join(MODE_COLORS)}")
    return MODE_COLORS[name]
