"""Grades chapter 2: parameter count, static bytes by regime, activation bytes for a config.

All three are arithmetic on the config: the answers are the same on every machine.
"""

import pytest
import torch

from minigpt import memory
from minigpt.model import GPT, PRESETS, ModelConfig, count_params
from minigpt.precision import static_bytes_per_param

CHAPTER = "ch02_memory_anatomy"
HINTS = {  # the hints of solutions/ch02_memory_anatomy.py, shown under a wrong answer
    "2.1": "blocks (4C^2 + 3CH + 2C each) + embedding V*C (lm_head is tied to it) + final norm C",
    "2.2": "bytes per parameter = weights + master copy + grads + Adam m and v; autocast keeps fp32",
    "2.3": "sum the saved tensors per token (per block: 52C + 16H + 8 + 4*heads) times batch*ctx",
}
SMALL = [
    ModelConfig(n_layer=2, n_head=2, n_embd=32, ctx=16, vocab_size=64),
    ModelConfig(n_layer=3, n_head=4, n_embd=96, ctx=32, vocab_size=1000),
]


@pytest.mark.exercise("2.1", points=2)
def test_count_parameters_matches_the_model(answers):
    for cfg in SMALL:  # small enough to build
        want = GPT(cfg).num_params()
        got = answers.count_parameters(cfg)
        hint = (
            " (lm_head is tied to the embedding: count that matrix once)"
            if got == want + cfg.vocab_size * cfg.n_embd
            else ""
        )
        assert got == want, f"count_parameters({cfg}) returned {got:,}, the model has {want:,}{hint}"
    for name, cfg in PRESETS.items():  # checked against the package's formula (tested against GPT())
        assert answers.count_parameters(cfg) == count_params(cfg), f"wrong count for the {name} preset"


@pytest.mark.exercise("2.2", points=2)
def test_static_bytes_by_regime(answers):
    regimes = {
        "fp32": ("fp32", False),
        "bf16": ("bf16", False),
        "fp16": ("fp16", False),
        "bf16-pure": ("bf16-pure", False),
        "bf16-pure+master": ("bf16-pure", True),
    }
    for regime, (precision, master) in regimes.items():
        per_param = static_bytes_per_param(precision, master_weights=master)["total"]
        for n in (1, 10_000_000):
            got = answers.static_bytes(n, regime)
            assert got == per_param * n, (
                f"static_bytes({n:,}, {regime!r}) returned {got:,}, expected {per_param} bytes per parameter "
                f"= {per_param * n:,}"
                + (
                    " (autocast keeps the fp32 weights: it saves activations, not these)"
                    if regime in ("bf16", "fp16")
                    else ""
                )
            )


@pytest.mark.exercise("2.2", points=1)
def test_static_bytes_rejects_an_unknown_regime(answers):
    with pytest.raises(ValueError):
        answers.static_bytes(1000, "fp8")
        pytest.fail('static_bytes(1000, "fp8") returned instead of raising ValueError: fp8 is no regime here')


@pytest.mark.exercise("2.3", points=3)
def test_activation_bytes_match_the_activation_table(answers):
    cases = [
        (SMALL[0], 2, 16),
        (SMALL[1], 4, 32),
        (PRESETS["tiny"], 8, 64),
        (PRESETS["10m"], 8, 256),
        (PRESETS["30m"], 4, 512),
    ]
    for cfg, batch, ctx in cases:
        want = memory.estimate(cfg, batch, ctx, "fp32", "none", device="cpu").activations
        got = answers.activation_bytes(cfg, batch, ctx)
        # The small terms may be left out: per token, each block's two 1/rms and its logsumexp (one per
        # head), 4 * (2 + heads) bytes, and outside the blocks the int64 ids and targets and the final
        # 1/rms (20 bytes), plus the 4-byte normalizer. One missing C-wide tensor costs 4C bytes per token
        # and block, more than all of them together (C > 2 + heads + 20 in every case here), so it fails.
        # (A relative tolerance cannot do this: 5% let a missing C-wide tensor per block pass.)
        small = batch * ctx * (cfg.n_layer * 4 * (2 + cfg.n_head) + 20) + 4
        per_c_tensor = batch * ctx * 4 * cfg.n_embd * cfg.n_layer
        assert abs(got - want) <= small, (
            f"activation_bytes(n_layer={cfg.n_layer}, n_embd={cfg.n_embd}, vocab={cfg.vocab_size}, "
            f"batch={batch}, ctx={ctx}) returned {got:,} bytes, the activation table says {want:,} bytes "
            f"({got - want:+,} bytes, {(got - want) / per_c_tensor:+.2f} C-wide fp32 tensors per block): did you "
            f"count the fp32 log-softmax (V per token), the four H-wide tensors of the SwiGLU MLP and every "
            f"C-wide tensor of the table?"
        )


@pytest.mark.exercise("2.3", points=1)
def test_activation_bytes_against_a_measured_step(answers, saved_bytes):
    cfg, batch, ctx = SMALL[1], 2, 32
    model = GPT(cfg).train()
    tokens = torch.randint(0, cfg.vocab_size, (batch, ctx + 1), generator=torch.Generator().manual_seed(0))
    measured, _ = saved_bytes(model, lambda: model(tokens[:, :-1], tokens[:, 1:]))
    got = answers.activation_bytes(cfg, batch, ctx)
    # 10%: the table agrees with a measurement to within 5% (chapter 2), plus 5% for the small terms an
    # answer may leave out (they are under 5% of the total here).
    assert got == pytest.approx(measured, rel=0.10), (
        f"a real forward pass kept {measured:,} bytes for backward; activation_bytes says {got:,} bytes "
        f"({got / measured:.2f}x)"
    )
