"""Grades chapter 6: a checkpointed forward over a list of blocks, sqrt(L) segments, and the memory/time
trade-off (seed exercise 3).

Memory is measured, not timed: the bytes autograd saves for backward are the same on every machine.
"""

import math

import pytest
import torch

from minigpt.model import GPT, ModelConfig, get_config

CHAPTER = "ch06_checkpointing"
NINE_BLOCKS = ModelConfig(n_layer=9, n_head=2, n_embd=32, ctx=16, vocab_size=64)  # 3 sqrt segments


def _run(forward, cfg, seed=0, saved_bytes=None):
    """Embed a fixed batch, run `forward(blocks, x, cos, sin)`, backward; return output, grads, saved bytes."""
    model = GPT(cfg).train()
    idx = torch.randint(0, cfg.vocab_size, (2, cfg.ctx), generator=torch.Generator().manual_seed(seed))
    x = model.tok_emb(idx)
    torch.manual_seed(seed)  # dropout masks, if any
    run = lambda: forward(model.blocks, x, model.rope_cos, model.rope_sin)  # noqa: E731
    saved, out = saved_bytes(model, run) if saved_bytes else (None, run())
    out.pow(2).mean().backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return out.detach(), grads, saved, x.nbytes


def plain_forward(blocks, x, cos, sin):
    for block in blocks:
        x = block(x, cos, sin)
    return x


def _check_same_as_plain(forward, cfg):
    want_out, want_grads, _, _ = _run(plain_forward, cfg)
    out, grads, _, _ = _run(forward, cfg)
    # Recomputation repeats the same ops on the same inputs: equal up to fp32 rounding (1e-6 covers any
    # kernel that reduces in another order on another device).
    assert torch.allclose(out, want_out, atol=1e-6), "the output differs from running the blocks one after another"
    assert grads.shape == want_grads.shape, "some weights got no gradient: is the output still attached to the graph?"
    error = ((grads - want_grads).norm() / want_grads.norm()).item()
    assert error < 1e-5, f"the gradients differ from the plain forward's (relative error {error:.1e})"


@pytest.mark.exercise("6.1", points=2)
def test_checkpointed_forward_gives_the_same_gradients(answers):
    _check_same_as_plain(answers.checkpointed_forward, NINE_BLOCKS)


@pytest.mark.exercise("6.1", points=2)
def test_checkpointed_forward_keeps_only_block_inputs(answers, saved_bytes):
    *_, plain, x_bytes = _run(plain_forward, NINE_BLOCKS, saved_bytes=saved_bytes)
    *_, saved, _ = _run(answers.checkpointed_forward, NINE_BLOCKS, saved_bytes=saved_bytes)
    inputs = NINE_BLOCKS.n_layer * x_bytes  # one (batch, ctx, n_embd) input per block
    assert saved <= inputs, (
        f"the forward kept {saved:,} bytes for backward; checkpointing each block keeps only its input, "
        f"{NINE_BLOCKS.n_layer} x {x_bytes:,} = {inputs:,} bytes (without checkpointing: {plain:,})"
    )


@pytest.mark.exercise("6.1", points=1)
def test_dropout_masks_are_the_same_when_recomputed(answers):
    with_dropout = ModelConfig(n_layer=3, n_head=2, n_embd=32, ctx=16, vocab_size=64, dropout=0.2)
    want_out, want_grads, _, _ = _run(plain_forward, with_dropout, seed=3)
    out, grads, _, _ = _run(answers.checkpointed_forward, with_dropout, seed=3)
    error = ((grads - want_grads).norm() / want_grads.norm()).item()
    assert torch.allclose(out, want_out, atol=1e-6) and error < 1e-5, (
        f"with dropout the gradients differ from the plain forward's (relative error {error:.1e}): the "
        f"recomputation drew other dropout masks - keep checkpoint's preserve_rng_state=True"
    )


@pytest.mark.exercise("6.2", points=2)
def test_sqrt_segments(answers):
    for n in range(1, 101):
        segments = [range(s.start, s.stop) for s in answers.sqrt_segments(n)]
        sizes = [len(s) for s in segments]
        assert [i for s in segments for i in s] == list(range(n)), (
            f"sqrt_segments({n}) = {segments} does not cover 0..{n - 1} in order, each layer once"
        )
        assert len(segments) == max(1, round(math.sqrt(n))), (
            f"sqrt_segments({n}): {len(segments)} segments, expected round(sqrt({n})) = {round(math.sqrt(n))}"
        )
        assert max(sizes) - min(sizes) <= 1, f"sqrt_segments({n}) sizes {sizes} differ by more than one"
    with pytest.raises(ValueError):
        answers.sqrt_segments(0)


@pytest.mark.exercise("6.3", points=2)
def test_sqrt_checkpointing_gives_the_same_gradients(answers):
    _check_same_as_plain(answers.sqrt_checkpointed_forward, NINE_BLOCKS)


@pytest.mark.exercise("6.3", points=2)
def test_sqrt_checkpointing_keeps_only_segment_inputs(answers, saved_bytes):
    *_, saved, x_bytes = _run(answers.sqrt_checkpointed_forward, NINE_BLOCKS, saved_bytes=saved_bytes)
    n_seg = round(math.sqrt(NINE_BLOCKS.n_layer))
    assert saved <= n_seg * x_bytes, (
        f"the forward kept {saved:,} bytes; {n_seg} checkpointed segments keep only their {n_seg} inputs "
        f"= {n_seg * x_bytes:,} bytes"
        + (
            " - that is one input per block: checkpoint whole segments"
            if saved == NINE_BLOCKS.n_layer * x_bytes
            else ""
        )
    )


@pytest.mark.exercise("6.4", points=2)
def test_checkpointing_tradeoff_table(answers, saved_bytes):
    modes = ("none", "sqrt", "full")
    rows = answers.checkpointing_tradeoff(preset="tiny-deep", batch=2, ctx=16, modes=modes, steps=1, device="cpu")
    assert [r["mode"] for r in rows] == list(modes), "one row per mode, in the order given"
    cfg = get_config("tiny-deep")
    for r in rows:
        assert {"activation_bytes", "seconds_per_step", "activations_ratio", "time_ratio"} <= set(r), f"keys: {r}"
        model = GPT(cfg).train()
        model.checkpointing = r["mode"]
        tokens = torch.randint(0, cfg.vocab_size, (2, 17))
        want, _ = saved_bytes(model, lambda model=model, tokens=tokens: model(tokens[:, :-1], tokens[:, 1:]))
        # 1%: a batch made another way may differ by its token ids' few bytes, nothing more.
        assert r["activation_bytes"] == pytest.approx(want, rel=0.01), (
            f"{r['mode']}: one forward saves {want:,} bytes for backward, you report {r['activation_bytes']:,}"
        )
        assert r["seconds_per_step"] > 0 and math.isfinite(r["time_ratio"]), f"bad time in {r}"
    assert rows[0]["activations_ratio"] == 1 and rows[0]["time_ratio"] == 1, "ratios are relative to the first mode"
    assert rows[1]["activations_ratio"] < 1 and rows[2]["activations_ratio"] < 1, "checkpointing saves activations"
