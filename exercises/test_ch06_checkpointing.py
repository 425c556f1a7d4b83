"""Grades chapter 6: a checkpointed forward over a list of blocks, sqrt(L) segments, and the memory/time
trade-off.

Memory is measured, not timed: the bytes autograd saves for backward are the same on every machine.
"""

import math

import pytest
import torch

from minigpt.grading.watch import CLOCKS, count_saved_bytes, optimizer_steps
from minigpt.model import GPT, ModelConfig, get_config

CHAPTER = "ch06_checkpointing"
HINTS = {  # the hints of solutions/ch06_checkpointing.py, shown under a wrong answer
    "6.1": "x = checkpoint(block, x, cos, sin, use_reentrant=False) for each block",
    "6.2": "n_seg = max(1, round(sqrt(L))); boundaries round(i * L / n_seg) for i = 0..n_seg",
    "6.3": "one checkpoint(...) per segment, around a function that runs that segment's blocks",
    "6.4": "per mode: count saved storages with saved_tensors_hooks in one forward; time steps",
}
NINE_BLOCKS = ModelConfig(n_layer=9, n_head=2, n_embd=32, ctx=16, vocab_size=64)  # 3 sqrt segments of 3
# Differs from NINE_BLOCKS in every dimension; 3 sqrt segments of 3, 3 and 4 blocks (10 does not split evenly).
TEN_BLOCKS = ModelConfig(n_layer=10, n_head=4, n_embd=48, ctx=12, vocab_size=50)


def _run(forward, cfg, seed=0, count_saved=False, detach=False):
    """Embed a fixed batch, run `forward(blocks, x, cos, sin)`, backward; return output, grads, saved bytes.

    detach=True feeds the blocks an input that does not require grad (as from a frozen embedding); grads
    is None when the output then lost its graph.
    """
    model = GPT(cfg).train()
    idx = torch.randint(0, cfg.vocab_size, (2, cfg.ctx), generator=torch.Generator().manual_seed(seed))
    x = model.tok_emb(idx)
    if detach:
        x = x.detach()
    torch.manual_seed(seed)  # dropout masks, if any
    run = lambda: forward(model.blocks, x, model.rope_cos, model.rope_sin)  # noqa: E731
    saved, out = count_saved_bytes(model, run) if count_saved else (None, run())
    if not isinstance(out, torch.Tensor):
        raise AssertionError(f"the forward returned {out!r}, not the blocks' output tensor")
    if not out.requires_grad:
        return out.detach(), None, saved, x.nbytes
    out.pow(2).mean().backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return out.detach(), grads, saved, x.nbytes


def _run_answer(answers, name, cfg, seed=0, count_saved=False, detach=False):
    """In the worker: _run with the learner's forward (its graph and its backward stay in the worker)."""
    return _run(getattr(answers, name), cfg, seed, count_saved, detach)


def plain_forward(blocks, x, cos, sin):
    for block in blocks:
        x = block(x, cos, sin)
    return x


def _check_same_as_plain(answers, name, cfg, detach=False):
    want_out, want_grads, _, _ = _run(plain_forward, cfg, detach=detach)
    out, grads, _, _ = answers.run(_run_answer, name, cfg, detach=detach)
    where = f"{cfg.n_layer} blocks of width {cfg.n_embd}" + (", input not requiring grad" if detach else "")
    # Recomputation repeats the same ops on the same inputs: equal up to fp32 rounding (1e-6 covers any
    # kernel that reduces in another order on another device).
    difference = (out - want_out).abs().max().item()
    assert difference <= 1e-6, (
        f"{where}: the output differs from running the blocks one after another by up to {difference:.2e} "
        f"(expected at most 1e-6): does every block run exactly once, in order?"
    )
    assert grads is not None, (
        f"{where}: the output does not require grad, so backward cannot reach the weights: reentrant "
        f"checkpointing (use_reentrant=True) cuts the graph when its input does not require grad; pass "
        f"use_reentrant=False"
    )
    assert grads.shape == want_grads.shape, (
        f"{where}: {grads.numel():,} gradient values, expected {want_grads.numel():,}: some weights got no "
        f"gradient - is the output still attached to the graph?"
    )
    error = ((grads - want_grads).norm() / want_grads.norm()).item()
    # Same ops on the same inputs: the gradients agree to fp32 rounding summed over the blocks (1e-5).
    assert error < 1e-5, (
        f"{where}: the gradients differ from the plain forward's (relative error {error:.1e}, expected < 1e-5): "
        f"does the recomputation run the same blocks as the forward did?"
    )


@pytest.mark.exercise("6.1", points=2)
def test_checkpointed_forward_gives_the_same_gradients(answers):
    for cfg in (NINE_BLOCKS, TEN_BLOCKS):
        _check_same_as_plain(answers, "checkpointed_forward", cfg)
    _check_same_as_plain(answers, "checkpointed_forward", NINE_BLOCKS, detach=True)


@pytest.mark.exercise("6.1", points=2)
def test_checkpointed_forward_keeps_only_block_inputs(answers):
    *_, plain, x_bytes = _run(plain_forward, NINE_BLOCKS, count_saved=True)
    *_, saved, _ = answers.run(_run_answer, "checkpointed_forward", NINE_BLOCKS, count_saved=True)
    # Exactly: each checkpointed block keeps its input, one (batch, ctx, n_embd) fp32 tensor, and nothing
    # else (cos and sin are buffers, not counted). Fewer bytes means fewer checkpoints than blocks.
    inputs = NINE_BLOCKS.n_layer * x_bytes
    assert saved == inputs, (
        f"the forward kept {saved:,} bytes ({saved / x_bytes:g} block inputs) for backward; checkpointing each "
        f"block keeps exactly its input: {NINE_BLOCKS.n_layer} x {x_bytes:,} = {inputs:,} bytes (without "
        f"checkpointing: {plain:,})"
        + (" - fewer than one input per block: checkpoint each block on its own" if saved < inputs else "")
    )


@pytest.mark.exercise("6.1", points=1)
def test_dropout_masks_are_the_same_when_recomputed(answers):
    with_dropout = ModelConfig(n_layer=3, n_head=2, n_embd=32, ctx=16, vocab_size=64, dropout=0.2)
    want_out, want_grads, _, _ = _run(plain_forward, with_dropout, seed=3)
    out, grads, _, _ = answers.run(_run_answer, "checkpointed_forward", with_dropout, seed=3)
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
    for cfg in (NINE_BLOCKS, TEN_BLOCKS):
        _check_same_as_plain(answers, "sqrt_checkpointed_forward", cfg)
    _check_same_as_plain(answers, "sqrt_checkpointed_forward", NINE_BLOCKS, detach=True)


@pytest.mark.exercise("6.3", points=2)
def test_sqrt_checkpointing_keeps_only_segment_inputs(answers):
    for cfg in (NINE_BLOCKS, TEN_BLOCKS):
        *_, saved, x_bytes = answers.run(_run_answer, "sqrt_checkpointed_forward", cfg, count_saved=True)
        n_seg = round(math.sqrt(cfg.n_layer))
        # Exactly: each checkpointed segment keeps its input, one (batch, ctx, n_embd) fp32 tensor.
        assert saved == n_seg * x_bytes, (
            f"{cfg.n_layer} blocks: the forward kept {saved:,} bytes ({saved / x_bytes:g} block inputs); "
            f"{n_seg} checkpointed segments keep exactly their {n_seg} inputs = {n_seg * x_bytes:,} bytes"
            + (" - that is one input per block: checkpoint whole segments" if saved == cfg.n_layer * x_bytes else "")
            + (" - fewer than one per segment: one checkpoint per segment" if saved < n_seg * x_bytes else "")
        )


def _tradeoff_watched(answers, **kwargs):
    """In the worker: checkpointing_tradeoff(**kwargs), watching the optimizer's steps."""
    with optimizer_steps() as steps:
        rows = answers.checkpointing_tradeoff(**kwargs)
    return {"rows": rows, "steps": steps}


@pytest.mark.exercise("6.4", points=2)
def test_checkpointing_tradeoff_table(answers, saved_bytes):
    modes, steps = ("none", "sqrt", "full"), 3
    seen = answers.run(_tradeoff_watched, preset="tiny-deep", batch=2, ctx=16, modes=modes, steps=steps, device="cpu")
    rows, optimizer_steps = seen["rows"], seen["steps"]
    assert [r["mode"] for r in rows] == list(modes), "one row per mode, in the order given"
    cfg = get_config("tiny-deep")
    for r in rows:
        assert {"activation_bytes", "seconds_per_step", "activations_ratio", "time_ratio"} <= set(r), f"keys: {r}"
        model = GPT(cfg).train()
        model.checkpointing = r["mode"]
        tokens = torch.randint(0, cfg.vocab_size, (2, 17))
        want, _ = saved_bytes(model, lambda model=model, tokens=tokens: model(tokens[:, :-1], tokens[:, 1:]))
        # A batch made another way may differ only by its token ids: one (2, 17) int64 storage here, or two
        # (2, 16) ones, at most 2 * 2 * 17 * 8 bytes apart.
        ids = 2 * 2 * 17 * 8
        assert abs(r["activation_bytes"] - want) <= ids, (
            f"{r['mode']}: one forward saves {want:,} bytes for backward, you report {r['activation_bytes']:,} "
            f"({r['activation_bytes'] - want:+,}; weights and each storage are counted once, not per tensor)"
        )
        assert r["seconds_per_step"] > 0 and math.isfinite(r["time_ratio"]), f"bad time in {r}"
        # The ratios are divisions of the row's own numbers by the first row's (1e-9: float rounding).
        for ratio, key in (("activations_ratio", "activation_bytes"), ("time_ratio", "seconds_per_step")):
            want_ratio = r[key] / rows[0][key]
            assert r[ratio] == pytest.approx(want_ratio, rel=1e-9), (
                f"{r['mode']}: {ratio} is {r[ratio]:.4g}, expected {key} / the first mode's = {want_ratio:.4g}"
            )
    assert rows[1]["activations_ratio"] < 1 and rows[2]["activations_ratio"] < 1, "checkpointing saves activations"
    # The timing: one warm-up step, then `steps` timed ones, per mode (one optimizer each).
    by_optimizer: dict[int, list] = {}
    for s in optimizer_steps:
        by_optimizer.setdefault(s["optimizer"], []).append(s)
    counts = [len(v) for v in by_optimizer.values()]
    assert counts == [steps + 1] * len(modes), (
        f"optimizer steps per mode: {counts}, expected {[steps + 1] * len(modes)}: one warm-up step (the first "
        f"step is slower, and must not be timed), then the {steps} timed steps"
    )
    for r, taken in zip(rows, by_optimizer.values()):
        timed = r["seconds_per_step"] * steps
        # A clock around the timed steps reads at least from the first timed step's optimizer.step to the
        # last one's (exact), and at most the time from the warm-up's step to the last step's end plus the
        # zero_grad calls around them: 1.5x and 20 ms leave room for a busy machine, while a total that was
        # not divided by the steps reads 3x. By the wall clock or the process's CPU time: either may be used.
        bounds = {
            clock: (
                taken[-1]["started"][clock] - taken[1]["started"][clock],
                taken[-1]["finished"][clock] - taken[0]["finished"][clock],
            )
            for clock in CLOCKS
        }
        assert any(low <= timed <= 1.5 * high + 0.02 for low, high in bounds.values()), (
            f"{r['mode']}: seconds_per_step {r['seconds_per_step']:.4f} s x {steps} steps = {timed:.4f} s, but the "
            f"{steps} timed steps took between {bounds['wall'][0]:.4f} and {bounds['wall'][1]:.4f} s: report the "
            f"mean of the {steps} steps after the warm-up"
        )
    leftover = [
        r["mode"] for r, taken in zip(rows, by_optimizer.values()) if any(s["on_leftover_gradients"] for s in taken)
    ]
    assert not leftover, (
        f"{leftover}: a step's backward added to the gradients of the step before: zero the gradients after "
        f"each step (optimizer.zero_grad()), or every step after the first trains on a sum of old gradients"
    )
