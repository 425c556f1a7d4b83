"""Training hardening (issue 32): flat memory under accumulation, resume that does what it says, run folders
that never get stuck, a planner that does not hang, one meaning for --ctx, and the smaller cases."""

from __future__ import annotations

import gc
import json

import pytest
import torch
import torch.nn as nn

from minigpt.model import GPT, ModelConfig
from minigpt.step import WindowBatches, forward_backward, window_micro_batches
from minigpt.train import TrainConfig

CPU = torch.device("cpu")
SMALL = ModelConfig(n_layer=1, n_head=2, n_embd=32, ctx=16, vocab_size=256)  # markov_data's 256 token ids


# ----------------------------------------------------------------------------------------------------------
# 1. Memory does not grow with --accum


def live_tensors() -> int:
    """How many torch.Tensor objects are alive now (type() rather than isinstance: no deprecation warnings)."""
    return sum(issubclass(type(o), torch.Tensor) for o in gc.get_objects())


class CountingModel(nn.Module):
    """The GPT, counting the live tensors at the start of the last micro-batch's forward (counting is slow)."""

    def __init__(self, model: GPT, accum: int) -> None:
        super().__init__()
        self.model, self.accum, self.calls, self.at_last = model, accum, 0, None

    def forward(self, x, y, reduction="mean"):
        self.calls += 1
        if self.calls == self.accum:
            self.at_last = live_tensors()
        return self.model(x, y, reduction=reduction)


def tensors_held_during_window(data, accum: int, materialize: bool = False) -> int:
    """Live tensors at the last micro-batch of a window of `accum` micro-batches, beyond those before the window."""
    cfg = TrainConfig(preset="tiny", batch=2, ctx=16, accum=accum, steps=1)
    model = CountingModel(GPT(SMALL, seed=0), accum)
    gc.collect()
    before = live_tensors()
    window = window_micro_batches(data, cfg, torch.Generator().manual_seed(0))
    if materialize:  # the old way: the whole window's tensors drawn before the first forward
        window = list(window)
    forward_backward(model, window, CPU, "fp32")
    return model.at_last - before


def test_a_window_holds_the_same_number_of_tensors_whatever_accum(markov_data):
    """Accumulation keeps memory constant: at its last micro-batch the step holds as many tensors with accum 24 as
    with accum 4 (a list of per-micro-batch losses, or a window drawn whole, would add tensors per micro-batch)."""
    held = {accum: tensors_held_during_window(markov_data, accum) for accum in (4, 24)}
    assert held[24] == held[4], held
    # The check can fail: the whole window drawn up front holds 2 tensors (x, y) per micro-batch.
    drawn_whole = tensors_held_during_window(markov_data, 24, materialize=True)
    assert drawn_whole >= held[24] + 2 * 20, (drawn_whole, held)


def test_lazy_windows_draw_the_same_sequences_in_the_same_order(markov_data):
    """The micro-batches built one at a time are the very sequences one draw of the whole window gives, per
    process too, and leave the generator where that draw leaves it (a resumed run draws the same batches)."""
    cfg = TrainConfig(preset="tiny", batch=3, ctx=16, accum=5, steps=1)
    gen_whole = torch.Generator().manual_seed(7)
    x, y = markov_data.get_batch("train", 3 * 5 * 2, 16, gen_whole)
    for rank in (0, 1):
        gen = torch.Generator().manual_seed(7)
        window = window_micro_batches(markov_data, cfg, gen, rank, 2)
        assert isinstance(window, WindowBatches) and len(window) == 5
        got_x = torch.cat([xm for xm, _ in window])
        got_y = torch.cat([ym for _, ym in window])
        assert torch.equal(got_x, x[rank * 15 : (rank + 1) * 15]) and torch.equal(got_y, y[rank * 15 : (rank + 1) * 15])
        assert torch.equal(gen.get_state(), gen_whole.get_state())
    with pytest.raises(IndexError):
        window[5]


def test_the_window_loss_is_the_mean_over_every_target(markov_data):
    """The running sum gives the window's mean loss per token, as the mean over the whole batch at once."""
    cfg = TrainConfig(preset="tiny", batch=2, ctx=16, accum=6, steps=1)
    model = GPT(SMALL, seed=0)
    window = window_micro_batches(markov_data, cfg, torch.Generator().manual_seed(3))
    loss = forward_backward(model, window, CPU, "fp32")
    x = torch.cat([xm for xm, _ in window])
    y = torch.cat([ym for _, ym in window])
    with torch.no_grad():
        _, whole = model(x, y)
    torch.testing.assert_close(loss, whole, rtol=1e-6, atol=0)


def json_out(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])
