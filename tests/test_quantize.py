"""int8 absmax and NF4: the code, the round trip's error bound, the bytes, and bad block sizes."""

import pytest
import torch

from minigpt.quantize import NF4_CODE, dequantize, max_error, quantize, quantized_bytes

# The 16 NF4 values as Dettmers et al. 2023 ("QLoRA: Efficient Finetuning of Quantized LLMs", appendix E) list them.
QLORA_NF4 = [
    -1.0,
    -0.6961928009986877,
    -0.5250730514526367,
    -0.39491748809814453,
    -0.28444138169288635,
    -0.18477343022823334,
    -0.09105003625154495,
    0.0,
    0.07958029955625534,
    0.16093020141124725,
    0.24611230194568634,
    0.33791524171829224,
    0.44070982933044434,
    0.5626170039176941,
    0.7229568362236023,
    1.0,
]


def test_nf4_code_is_the_normal_quantiles_qlora_defines():
    """8 positive and 7 negative quantiles of N(0, 1) from delta to 1/2, an exact zero, normalized to [-1, 1]."""
    delta = 1 - (1 / 30 + 1 / 32) / 2
    normal = torch.distributions.Normal(0.0, 1.0)
    positive = normal.icdf(torch.linspace(delta, 0.5, 9, dtype=torch.float64)[:-1])
    negative = -normal.icdf(torch.linspace(delta, 0.5, 8, dtype=torch.float64)[:-1])
    expected = torch.cat([negative, torch.zeros(1, dtype=torch.float64), positive]).sort().values
    expected = (expected / expected.max()).float()
    assert torch.equal(NF4_CODE, expected)
    # and the paper's table agrees to float32's rounding of its own computation (1e-6 of a value <= 1)
    assert torch.allclose(NF4_CODE, torch.tensor(QLORA_NF4), atol=1e-6, rtol=0)
    assert len(NF4_CODE.unique()) == 16 and NF4_CODE[7] == 0


@pytest.mark.parametrize("kind", ["int8", "nf4"])
@pytest.mark.parametrize("block", [64, 0])
def test_round_trip_error_is_at_most_half_a_step_of_the_blocks_code(kind, block):
    """Each value goes to its nearest code value: the error is at most half the widest gap, times its block's scale."""
    w = torch.randn(96, 128, generator=torch.Generator().manual_seed(0)) * 0.02
    q = quantize(w, kind, block)
    back = dequantize(q.codes, q.scales, q.shape, torch.float32)
    size = 128 if block == 0 else block
    scales = w.reshape(-1, size).abs().amax(dim=1, keepdim=True)
    bound = torch.tensor([max_error(kind, float(s)) for s in scales]).reshape(-1, 1)
    err = (back - w).reshape(-1, size).abs()
    # float32 arithmetic on values <= scale adds a few ulps of the scale on top of the bound
    assert (err <= bound * (1 + 1e-5) + scales * 4 * torch.finfo(torch.float32).eps).all()
    # every block's largest value comes back exactly (it is the scale, code +-1)
    idx = w.reshape(-1, size).abs().argmax(dim=1)
    assert torch.allclose(back.reshape(-1, size).gather(1, idx[:, None]), w.reshape(-1, size).gather(1, idx[:, None]))


@pytest.mark.parametrize("kind,per_value", [("int8", 1), ("nf4", 0.5)])
def test_bytes_are_the_codes_plus_one_fp32_scale_per_block(kind, per_value):
    w = torch.randn(128, 64)
    q = quantize(w, kind, 64)
    assert q.nbytes == quantized_bytes((128, 64), kind, 64) == int(128 * 64 * per_value) + 4 * 128
    assert quantized_bytes((128, 64), kind, 0) == int(128 * 64 * per_value) + 4 * 128  # per channel: one per row
    assert quantized_bytes((128, 64), "bf16") == 2 * 128 * 64


def test_dequantize_gives_the_asked_dtype_and_zeros_stay_exact():
    w = torch.zeros(8, 64)
    w[0, :5] = torch.tensor([0.1, -0.2, 0.0, 0.3, 0.0])
    for kind in ("int8", "nf4"):
        q = quantize(w, kind)
        back = dequantize(q.codes, q.scales, q.shape, torch.bfloat16)
        assert back.dtype == torch.bfloat16 and (back[w == 0] == 0).all()


def test_a_block_that_does_not_divide_the_weight_is_refused():
    with pytest.raises(ValueError, match="--quant-block 48 does not divide"):
        quantize(torch.randn(4, 40), "nf4", 48)
    with pytest.raises(ValueError, match="unknown quantized dtype"):
        quantize(torch.randn(4, 64), "int4")
