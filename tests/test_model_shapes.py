"""Models of any size in a preset's family: --n-layer, --n-embd, --n-head override the preset's shape."""

import json

import pytest

from minigpt.cli import main
from minigpt.config import TrainConfig
from minigpt.model import GPT, count_params, get_config, shaped_config


def test_shape_flags_override_only_what_they_name():
    c = shaped_config("10m", n_layer=3)
    assert (c.n_layer, c.n_embd, c.n_head, c.ctx) == (3, 256, 4, 256)  # the rest is the preset's
    assert shaped_config("10m") == get_config("10m")


def test_a_width_alone_gets_heads_of_the_family_size():
    c = shaped_config("125m", n_embd=1024)
    assert (c.n_embd, c.n_head, c.head_dim) == (1024, 16, 64)


@pytest.mark.parametrize(
    ("shape", "rule"),
    [
        ({"n_embd": 100, "n_head": 3}, "not divisible by --n-head"),
        ({"n_embd": 66, "n_head": 2}, "odd: RoPE"),
        ({"n_layer": 0}, "--n-layer must be at least 1"),
        ({"n_head": -2}, "--n-head must be at least 1"),
    ],
)
def test_a_shape_that_cannot_work_names_the_rule_it_breaks(shape, rule):
    with pytest.raises(ValueError, match=rule) as err:
        TrainConfig(preset="tiny", **shape)
    assert "\n" not in str(err.value)


def test_the_run_trains_the_shaped_model():
    cfg = TrainConfig(preset="tiny", n_layer=1, n_embd=32, n_head=2, ctx=16, batch=2, steps=1, verbose=False)
    model = GPT(cfg.model_config())
    assert len(model.blocks) == 1 and model.num_params() == count_params(cfg.model_config())


def test_minigpt_params_prints_any_configs_count(capsys):
    assert main(["params", "--preset", "125m", "--n-layer", "24", "--n-embd", "1536", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["parameters"] == count_params(shaped_config("125m", n_layer=24, n_embd=1536))
    assert (row["layers"], row["width"], row["heads"]) == (24, 1536, 24)
