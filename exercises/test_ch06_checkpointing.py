"""Grades chapter 6: a checkpointed forward over a list of blocks, sqrt(L) segments, and the memory/time
trade-off.

Memory is measured, not timed: the bytes autograd saves for backward are the same on every machine.
"""

import math

import pytest
import torch

from minigpt.grading import transfer
from minigpt.grading.contract import Case
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
    _check_values(where, out, grads, want_out, want_grads)


def _check_values(where, out, grads, want_out, want_grads):
    """The output and the gradients of a checkpointed forward against the plain forward's."""
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
    want_out, want_grads, plain, x_bytes = _run(plain_forward, NINE_BLOCKS, count_saved=True)
    out, grads, saved, _ = answers.run(_run_answer, "checkpointed_forward", NINE_BLOCKS, count_saved=True)
    _check_values(f"{NINE_BLOCKS.n_layer} blocks", out, grads, want_out, want_grads)  # not just fewer bytes
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
        want_out, want_grads, _, _ = _run(plain_forward, cfg)
        out, grads, saved, x_bytes = answers.run(_run_answer, "sqrt_checkpointed_forward", cfg, count_saved=True)
        _check_values(f"{cfg.n_layer} blocks", out, grads, want_out, want_grads)  # not just fewer bytes
        n_seg = round(math.sqrt(cfg.n_layer))
        # Exactly: each checkpointed segment keeps its input, one (batch, ctx, n_embd) fp32 tensor.
        assert saved == n_seg * x_bytes, (
            f"{cfg.n_layer} blocks: the forward kept {saved:,} bytes ({saved / x_bytes:g} block inputs); "
            f"{n_seg} checkpointed segments keep exactly their {n_seg} inputs = {n_seg * x_bytes:,} bytes"
            + (" - that is one input per block: checkpoint whole segments" if saved == cfg.n_layer * x_bytes else "")
            + (" - fewer than one per segment: one checkpoint per segment" if saved < n_seg * x_bytes else "")
        )


@pytest.mark.exercise("6.4", points=2)
def test_checkpointing_tradeoff_table(answers, contract, saved_bytes):
    case = _tradeoff_case()
    modes, steps, batch, ctx = (case.kwargs[k] for k in ("modes", "steps", "batch", "ctx"))
    seen = contract.run(answers, case)
    rows, optimizer_steps = seen["rows"], seen["steps"]
    assert [r["mode"] for r in rows] == list(modes), "one row per mode, in the order given"
    cfg = get_config(case.kwargs["preset"])
    for r in rows:
        model = GPT(cfg).train()
        model.checkpointing = r["mode"]
        tokens = torch.randint(0, cfg.vocab_size, (batch, ctx + 1))
        want, _ = saved_bytes(model, lambda model=model, tokens=tokens: model(tokens[:, :-1], tokens[:, 1:]))
        # A batch made another way may differ only by its token ids: one (batch, ctx + 1) int64 storage here, or
        # two (batch, ctx) ones, at most 2 * batch * (ctx + 1) * 8 bytes apart.
        ids = 2 * batch * (ctx + 1) * 8
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
    saved = {r["mode"]: r["activation_bytes"] for r in rows}
    assert saved["none"] > max(saved["sqrt"], saved["full"]), f"checkpointing saves activations: {saved}"
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


# ----------------------------------------------------------------------------------------------------------
# The contracts: each exercise's whole promise, checked against the reference on inputs the learner did not choose

# Activations that outweigh the weights: each block's input is 4 x 32 x 8 fp32 = 4 KiB, the activations a block
# keeps without checkpointing about 45 inputs' worth, its weights 7 KiB. 8 blocks make 3 sqrt segments (3, 3 and 2
# blocks), where floor(sqrt(8)) would make 2; 5 blocks for 6.1.
EIGHT = ModelConfig(n_layer=8, n_head=2, n_embd=8, ctx=32, vocab_size=16)
FIVE = ModelConfig(n_layer=5, n_head=2, n_embd=8, ctx=32, vocab_size=16)
# Peaks of a forward and backward: the reference keeps one input per checkpoint and recomputes one block (or one
# segment) at a time. Running the blocks plainly, or one checkpoint around the whole stack, has everything alive at
# once: 3.5x the reference's peak in 6.1, 2.3x in 6.3. In 6.3 a checkpoint per block is 0.47x, and 2 segments
# (floor) 1.27x. An honest answer may keep an extra block input or the loss a little longer: 0.8x .. 1.25x.
BLOCK_PEAK = (0.8, 1.25)
# The values: checkpointing recomputes the same ops on the same inputs, so the reference's output and gradients
# are the plain forward's. Another CPU's kernels reduce in another order: rtol 1e-4 with atol 1e-6 on outputs of
# about 1 and gradients up to about 10 (a wrong recomputation is off by far more).
VALUES = dict(rtol=1e-4, atol=1e-6)


class Stack(tuple):
    """(blocks, x, cos, sin), shown by its sizes in a grader's message."""

    def __repr__(self) -> str:
        blocks, x = self[0], self[1]
        return f"<{len(blocks)} blocks, x {tuple(x.shape)}{'' if x.requires_grad else ' not requiring grad'}>"


def _stack(cfg: ModelConfig, batch: int, seed: int = 0, input_grad: bool = True) -> Stack:
    """(blocks, x, cos, sin): a model's blocks and rotary tables, and a random input of (batch, ctx, n_embd)."""
    model = GPT(cfg, seed=seed).train()
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch, cfg.ctx, cfg.n_embd, generator=gen).requires_grad_(input_grad)
    return Stack((model.blocks, x, model.rope_cos, model.rope_sin))


def _forward_backward(function, blocks, x, cos, sin):
    """In the worker: the forward under test, then a backward from a fixed weighting of its output. Returns the
    output, the bytes the forward kept for backward (weights and rotary tables not counted; each storage once),
    and whether the output was attached to the graph. The gradients are compared as the arguments after the call.
    """
    skip = {t.untyped_storage().data_ptr() for t in [*blocks.parameters(), cos, sin]}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in skip:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = function(blocks, x, cos, sin)
    kept = sum(saved.values())
    if not isinstance(out, torch.Tensor):
        return {"output": out, "kept_bytes": kept, "attached": False}
    attached = out.requires_grad
    if attached:
        weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(7))
        (out * weights).sum().backward()
    return {"output": out.detach().clone(), "kept_bytes": kept, "attached": attached}


def _forward_backward_each(function, *stacks):
    """In the worker: _forward_backward on each (blocks, x, cos, sin) of stacks: small cases in one."""
    return [_forward_backward(function, *stack) for stack in stacks]


def _forward(function, blocks, x, cos, sin):
    """In the worker: the forward alone; its output detached (whether it is attached to the graph is for the cases
    with a backward to show)."""
    out = function(blocks, x, cos, sin)
    return out.detach() if isinstance(out, torch.Tensor) else out


class Calls(list):
    """A list of (args, kwargs), shown as how many there are in a grader's message (each outcome names its call)."""

    def __repr__(self) -> str:
        return f"<{len(self)} calls>"


def _each_call(function, calls):
    """In the worker: function(*args, **kwargs) for each (args, kwargs) in calls, as {the call: "returns <value>"
    or "raises <its builtin kind>"}: many small calls in one case."""
    outcomes = {}
    for args, kwargs in calls:
        try:
            value = function(*args, **kwargs)
        except NotImplementedError:
            raise  # not done yet
        except Exception as error:  # noqa: BLE001 - an error is an outcome like a value
            outcome = "raises " + next(c.__name__ for c in type(error).__mro__ if c.__module__ == "builtins")
        else:
            outcome = f"returns {transfer.plain(value)!r}"
        outcomes[Case(function.__name__, args, kwargs).call_text(200)] = outcome
    return outcomes


FORWARD_RETURNS = (
    "Returns: a tensor, the last block's output: the same values as running the blocks one after another, attached "
    "to the graph so that backward reaches every block's weights (also when x does not require grad) and x (when it "
    "does)."
)
FORWARD_IN_PLACE = (
    "In place: nothing (the backward run later fills the blocks' gradients, as it would without checkpointing)."
)


def _cases_6_1() -> list[Case]:
    three = ModelConfig(n_layer=3, n_head=2, n_embd=8, ctx=6, vocab_size=16)
    odd = ModelConfig(n_layer=3, n_head=3, n_embd=12, ctx=5, vocab_size=16)
    dropout = ModelConfig(n_layer=2, n_head=2, n_embd=8, ctx=8, vocab_size=16, dropout=0.25)
    one = ModelConfig(n_layer=1, n_head=4, n_embd=8, ctx=5, vocab_size=16)
    return [
        # The forward alone: its value, and that it changes nothing.
        Case(
            "checkpointed_forward",
            _stack(three, 2),
            **VALUES,
            drive=_forward,
            promise=(FORWARD_RETURNS, FORWARD_IN_PLACE, "Raises: nothing of its own."),
        ),
        # Forward and backward: the gradients (weights and input), what was kept, one block recomputed at a time.
        Case("checkpointed_forward", _stack(FIVE, 4, seed=1), **VALUES, peak=BLOCK_PEAK, drive=_forward_backward),
        # An input that does not require grad (a frozen embedding's output): the weights must still get gradients.
        # Dropout: the recomputation must draw the forward's masks. And a single block.
        Case(
            "checkpointed_forward",
            (_stack(odd, 3, seed=2, input_grad=False), _stack(dropout, 2, seed=3), _stack(one, 2, seed=4)),
            **VALUES,
            drive=_forward_backward_each,
        ),
    ]


def _segments_summary(function, sizes):
    """In the worker: sqrt_segments(n) for each n, as what the exercise fixes: whether each segment is a range
    with step 1, the layers in order, and the segments' sizes (sorted: any order of sizes is right); or the
    builtin kind of the error it raised."""
    summary = []
    for n in sizes:
        try:
            segments = list(function(n))
        except NotImplementedError:
            raise  # not done yet
        except Exception as error:  # noqa: BLE001 - an error is an outcome like a value
            kind = next(c.__name__ for c in type(error).__mro__ if c.__module__ == "builtins")
            summary.append({"n_layer": n, "raises": kind})
            continue
        summary.append(
            {
                "n_layer": n,
                "ranges": [isinstance(s, range) and s.step == 1 for s in segments],
                "layers_in_order": [i for s in segments for i in s] == list(range(n)),
                "sizes": sorted(len(s) for s in segments),
            }
        )
    return summary


def _cases_6_2() -> list[Case]:
    returns = (
        "Returns: a list of range objects (each with step 1): round(sqrt(n_layer)) segments, never fewer than one, "
        "that cover 0 .. n_layer - 1 in order, their sizes differing by at most one."
    )
    # Near the ties of round(sqrt(n)): sqrt(k * k + k) is just below k + 1/2 (k segments), sqrt(k * k + k + 1) just
    # above (k + 1): floor, ceil and round part there. 1 to 60 hold the first few; 9 splits evenly (one split only).
    near_ties = [n for k in range(1, 32) for n in (k * k + k, k * k + k + 1)]
    return [
        Case("sqrt_segments", (1,), promise=(returns, "In place: nothing.")),
        Case("sqrt_segments", (9,), promise=returns),
        Case("sqrt_segments", (0,), promise="Raises: ValueError if n_layer is below 1."),
        Case("sqrt_segments", (list(range(1, 61)) + near_ties + [1000, 1001, -1, -9],), drive=_segments_summary),
    ]


def _cases_6_3() -> list[Case]:
    # Few blocks: 2 make one segment (ceil(sqrt(2)) would make 2), 3 make two of 1 and 2 (floor(sqrt(3)) would make
    # one), here with an input that does not require grad; 5 make two of 2 and 3, here with dropout.
    two = ModelConfig(n_layer=2, n_head=1, n_embd=8, ctx=6, vocab_size=16)
    three = ModelConfig(n_layer=3, n_head=2, n_embd=12, ctx=4, vocab_size=16)
    dropout = ModelConfig(n_layer=5, n_head=4, n_embd=8, ctx=5, vocab_size=16, dropout=0.25)
    small = [_stack(two, 2, seed=2), _stack(three, 3, seed=3, input_grad=False), _stack(dropout, 2, seed=5)]
    _, x, cos, sin = _stack(ModelConfig(n_layer=1, n_head=2, n_embd=8, ctx=4, vocab_size=16), 1)
    return [
        # The forward alone: its value, and that it changes nothing.
        Case(
            "sqrt_checkpointed_forward",
            _stack(ModelConfig(n_layer=4, n_head=2, n_embd=8, ctx=6, vocab_size=16), 2),
            **VALUES,
            drive=_forward,
            promise=(FORWARD_RETURNS, FORWARD_IN_PLACE),
        ),
        # Forward and backward: the gradients, the 3 segment inputs kept, one segment recomputed at a time.
        Case("sqrt_checkpointed_forward", _stack(EIGHT, 4, seed=1), **VALUES, peak=BLOCK_PEAK, drive=_forward_backward),
        Case("sqrt_checkpointed_forward", tuple(small), **VALUES, drive=_forward_backward_each),
        Case(
            "sqrt_checkpointed_forward",
            (torch.nn.ModuleList(), x, cos, sin),
            promise="Raises: ValueError if blocks is empty (sqrt_segments(0) raises it).",
        ),
    ]


TRADEOFF_ROW_KEYS = ("mode", "activation_bytes", "seconds_per_step", "activations_ratio", "time_ratio")
# Compared by type only: times; the optimizers' ids; and the bytes, which another torch build's attention kernel
# may save differently: test_checkpointing_tradeoff_table checks them against this machine's own count.
TRADEOFF_IGNORED = (
    "*'seconds_per_step'*",
    "*'time_ratio'*",
    "*'started'*",
    "*'finished'*",
    "*'optimizer'*",
    "*'activation_bytes'*",
    "*'activations_ratio'*",
)


def _tradeoff_watched(function, **kwargs):
    """In the worker: checkpointing_tradeoff(**kwargs), watching the optimizer's steps (the gradient norm each
    step applied follows from the seed, the preset and the batch), the rows as _named_keys reads them."""
    with optimizer_steps() as steps:
        rows = function(**kwargs)
    return {"rows": _named_keys(rows), "steps": steps}


def _named_keys(rows):
    """The rows, each with the keys the exercise names (an extra key is no mistake; a missing one reads
    "(missing)")."""
    return [{key: row.get(key, "(missing)") for key in TRADEOFF_ROW_KEYS} for row in rows]


def _tradeoff_rows(function, **kwargs):
    """In the worker: checkpointing_tradeoff(**kwargs), its rows as _named_keys reads them."""
    return _named_keys(function(**kwargs))


def _tradeoff_case() -> Case:
    # Every argument but device away from its default; the first mode is not the one that saves the most, so
    # ratios to the largest are not ratios to the first. The gradient norms of 4 AdamW steps per mode (fp32, a
    # small model): rtol 1e-3 covers another CPU's kernels.
    kwargs = dict(preset="tiny-deep", batch=3, ctx=12, modes=("full", "none", "sqrt"), steps=3, device="cpu", seed=3)
    return Case("checkpointing_tradeoff", (), kwargs, rtol=1e-3, ignore=TRADEOFF_IGNORED, drive=_tradeoff_watched)


def _cases_6_4() -> list[Case]:
    raises = (
        'Raises: ValueError if the preset is unknown, modes is empty or names a mode other than "none", "full", '
        '"sqrt" and "selective", or batch, ctx or steps is below 1 or ctx is above the preset\'s ctx (all checked '
        "before any model is built)."
    )
    cheap = dict(preset="tiny", batch=1, ctx=4, modes=("sqrt",), steps=1, device="cpu", seed=1)
    refused = [
        {"preset": "huge"}, {"modes": ("none", "Sqrt")}, {"modes": ("none", "half")}, {"batch": 0}, {"ctx": 0},
        {"ctx": 65}, {"steps": 0}, {"steps": -2},
    ]  # fmt: skip
    return [
        _tradeoff_case(),  # run by test_checkpointing_tradeoff_table, once
        Case(
            "checkpointing_tradeoff",
            (),
            cheap,
            ignore=TRADEOFF_IGNORED,
            drive=_tradeoff_rows,
            promise=(
                "Returns: a list of dicts, one per mode in the order given, each with the keys mode, activation_bytes "
                "(an int), seconds_per_step, activations_ratio and time_ratio.",
                "In place: nothing.",
            ),
        ),
        Case("checkpointing_tradeoff", (), {**cheap, "modes": ()}, promise=raises),
        # The changed argument first in each call, so that the call's text (the key of its outcome) shows it.
        Case(
            "checkpointing_tradeoff",
            (Calls(((), {**change, **cheap, **change}) for change in refused),),
            drive=_each_call,
        ),
    ]


CONTRACTS = {"6.1": _cases_6_1, "6.2": _cases_6_2, "6.3": _cases_6_3, "6.4": _cases_6_4}


@pytest.mark.exercise("6.1", points=1)
def test_6_1_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["6.1"]())


@pytest.mark.exercise("6.2", points=1)
def test_6_2_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["6.2"]())


@pytest.mark.exercise("6.3", points=1)
def test_6_3_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["6.3"]())


@pytest.mark.exercise("6.4", points=1)
def test_6_4_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["6.4"]()[1:])  # the first: test_checkpointing_tradeoff_table
