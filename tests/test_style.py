import matplotlib.colors
import pytest

from minigpt.precision import PRECISIONS
from minigpt.recompute import CHECKPOINTING_MODES
from minigpt.style import mode_color, precision_color


def test_every_precision_and_mode_has_its_own_valid_colour():
    colours = [precision_color(p) for p in PRECISIONS] + [mode_color(m) for m in CHECKPOINTING_MODES]
    assert all(matplotlib.colors.is_color_like(c) for c in colours)
    assert len({matplotlib.colors.to_hex(c) for c in colours}) == len(colours)  # no two names look alike


def test_dtype_names_get_their_precisions_colour():
    assert precision_color("bfloat16") == precision_color("bf16")
    assert precision_color("float32") == precision_color("fp32")


@pytest.mark.parametrize(("helper", "name"), [(precision_color, "fp8"), (mode_color, "half"), (mode_color, "bf16")])
def test_an_unknown_name_is_a_clear_error(helper, name):
    with pytest.raises(ValueError, match=f"no colour for .*{name!r}; known: "):
        helper(name)
