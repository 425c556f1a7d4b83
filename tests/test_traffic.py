"""FSDP's traffic and per-process peak: the bytes each process sends, predicted and counted on 2 real processes."""

import pytest
import torch

from minigpt.distributed import measure_rank_step
from minigpt.memory.static_state import sharded_state_bytes
from minigpt.memory.traffic import bytes_sent_per_rank, element_bytes, fsdp_bytes_sent, ring_sent
from minigpt.model import get_config
from minigpt.parallel import fsdp_dtypes


def test_bf16_gathers_in_bf16_and_reduces_in_fp32():
    assert fsdp_dtypes("bf16") == (torch.bfloat16, torch.float32)
    assert fsdp_dtypes("fp32") == fsdp_dtypes("fp16") == fsdp_dtypes("bf16-pure") == (None, None)
    assert element_bytes("bf16", "fsdp") == {"all-gather": 2, "broadcast": 4, "all-reduce": 4, "reduce-scatter": 4}
    assert element_bytes("bf16", "none")["all-reduce"] == 4  # DDP reduces autocast's fp32 gradients


def test_the_formula_is_the_ring_arithmetic():
    """DDP: 2 (N-1)/N x P; FSDP in fp32: 3 (N-1)/N x P, so 1.5 times DDP; bf16 gathers bring it to 2/2 = 1.0."""
    p, n = 1000, 4
    assert ring_sent("all-reduce", 4 * p, n) == 2 * 3 / 4 * 4 * p
    ddp = sum(bytes_sent_per_rank(p, "none", n, "fp32").values())
    assert sum(bytes_sent_per_rank(p, "fsdp", n, "fp32").values()) == 1.5 * ddp
    assert sum(bytes_sent_per_rank(p, "fsdp", n, "bf16").values()) == ddp


@pytest.mark.parametrize("precision, accum", [("fp32", 1), ("bf16", 2)])
def test_fsdp_sends_what_is_predicted_and_peaks_above_what_it_holds(precision, accum):
    """Every all-gather and reduce-scatter of a real step, counted on 2 gloo processes: the prediction, exactly.

    Exact because both count the same buffers (FSDP2 pads each parameter's rows to N equal shards, and so
    does the prediction). The peak is read from the heap, so it is only checked to lie above what the process
    holds between steps (it adds gathered weights, activations and gradients) and below the whole model's
    static state plus that.
    """
    cfg = get_config("tiny")
    ranks = measure_rank_step("tiny", precision, "fsdp", world=2, accum=accum)
    want = fsdp_bytes_sent(cfg, precision, 2, accum)
    for rank, r in enumerate(ranks):
        assert r["sent"] == want
        assert r["collectives"] == {"all-gather": (1 + 2 * cfg.n_layer) * accum, "reduce-scatter": 1 + cfg.n_layer}
        assert r["state"] == sharded_state_bytes(cfg, precision, "fsdp", 2, rank=rank)
        whole = sum(sharded_state_bytes(cfg, precision, "none", 1).values())
        if r["peak"] is not None:
            assert r["held"] < r["peak"] < r["held"] + 2 * whole
