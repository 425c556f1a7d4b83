"""Grades chapter 4: a scaled fp16 step (unscale before clipping), the scaler's update rule, the schedule on
skipped steps, and the overflow experiment."""

import copy
import dataclasses
import functools
import inspect
import math
import warnings

import numpy as np
import pytest
import torch

from minigpt.data import TokenData
from minigpt.grading.contract import Case
from minigpt.grading.watch import model_inputs, optimizer_steps
from minigpt.model import GPT, ModelConfig

CHAPTER = "ch04_fp16_gradscaler"
TINY_LOSS = 1e-5
HINTS = {  # the hints of solutions/ch04_fp16_gradscaler.py, shown under a wrong answer
    "4.1": "scaler.scale(loss).backward(); scaler.unscale_ BEFORE clipping; scaler.step; scaler.update",
    "4.2": "inf -> scale * backoff, tracker 0; else tracker + 1, and at growth_interval grow and reset",
    "4.3": "a skipped step lowers the scale; only advance the scheduler when it did not",
    "4.4": "a GradScaler(init_scale=...) training loop; record scaler.get_scale() before each step",
}


class SmallGradientGPT(GPT):
    """A GPT whose loss is 1e-5 of the usual, so its gradients are as small as a big model's often are.

    In fp16 (smallest subnormal 2**-24, about 6e-8) most of them flush to zero unless the loss is scaled.
    """

    def forward(self, idx, targets=None, reduction="mean"):
        logits, loss = super().forward(idx, targets, reduction)
        return logits, None if loss is None else loss * TINY_LOSS


def _batch(cfg, seed=0):
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, cfg.vocab_size, (4, cfg.ctx + 1), generator=gen)
    return tokens[:, :-1], tokens[:, 1:]


def _fp32_gradient(model, x, y) -> torch.Tensor:
    model = copy.deepcopy(model)
    _, loss = model(x, y)
    loss.backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def _sgd_step(answers, model, x, y, max_norm, init_scale=2.0**16, growth_interval=2000):
    """Run the learner's step with SGD(lr=1): the weights then move by exactly minus the clipped gradient."""
    before = torch.cat([p.detach().flatten() for p in model.parameters()])
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
    out = answers.scaled_fp16_step(model, optimizer, scaler, x, y, max_norm=max_norm)
    after = torch.cat([p.detach().flatten() for p in model.parameters()])
    return out, before - after, scaler


@pytest.mark.exercise("4.1", points=2)
def test_clips_the_unscaled_gradients(answers, small_cfg):
    model = GPT(small_cfg)
    x, y = _batch(small_cfg)
    true_norm = _fp32_gradient(model, x, y).norm().item()
    out, moved, _ = _sgd_step(answers, model, x, y, max_norm=true_norm / 10)
    # 5%: fp16 matmuls change the gradients by about 0.1%; clipping then sets the norm exactly.
    assert out["grad_norm"] == pytest.approx(true_norm, rel=0.05), (
        f"grad_norm {out['grad_norm']:.4g} is not the true gradient norm {true_norm:.4g}"
        + (
            ": it looks scaled - call scaler.unscale_(optimizer) before clip_grad_norm_"
            if out["grad_norm"] > 100 * true_norm
            else ""
        )
    )
    assert moved.norm().item() == pytest.approx(true_norm / 10, rel=0.05), (
        f"with max_norm={true_norm / 10:.3g} the step moved the weights by {moved.norm().item():.3g}: clip the "
        f"unscaled gradients (scaler.unscale_ before clip_grad_norm_), else you clip numbers 65536x too big"
    )
    assert {"loss", "grad_norm", "scale", "skipped"} <= set(out) and out["skipped"] is False
    for key in ("loss", "grad_norm"):
        assert isinstance(out[key], float), f'out["{key}"] is {out[key]!r}: return a Python float (.item())'
    left = [n for n, p in model.named_parameters() if p.grad is not None and p.grad.any()]
    assert not left, f"the step left gradients in {left[:3]}...: zero them after the step (optimizer.zero_grad())"


@pytest.mark.exercise("4.1", points=2)
def test_small_gradients_survive_fp16(answers, small_cfg):
    model = SmallGradientGPT(small_cfg)
    x, y = _batch(small_cfg, seed=1)
    reference = _fp32_gradient(model, x, y)
    _, moved, _ = _sgd_step(answers, model, x, y, max_norm=1e9)  # no clipping: the step is the gradient
    cosine = torch.nn.functional.cosine_similarity(moved, reference, dim=0).item()
    zeros = (moved == 0).float().mean().item()
    # With loss scaling the fp16 gradients match fp32's to ~0.1% (cosine > 0.9999); without it most of these
    # 1e-5-sized gradients flush to zero (cosine about 0.65): 0.99 separates the two on any device.
    assert cosine > 0.99 and moved.norm().item() == pytest.approx(reference.norm().item(), rel=0.05), (
        f"the fp16 gradients differ from fp32's (cosine {cosine:.3f}, {zeros:.0%} exactly zero): small "
        f"gradients underflow in fp16 - backpropagate scaler.scale(loss), not the loss"
    )


@pytest.mark.exercise("4.1", points=1)
def test_an_overflow_skips_the_step(answers, small_cfg):
    model = GPT(small_cfg)
    x, y = _batch(small_cfg)
    out, moved, scaler = _sgd_step(answers, model, x, y, max_norm=1.0, init_scale=2.0**40)
    assert out["skipped"] is True and out["scale"] == 2.0**40, (
        f"a scale of 2**40 overflows fp16: the step must report skipped=True and scale=2**40, got {out}"
    )
    assert not moved.any(), "the scaler found inf gradients, so the weights must not change"
    assert scaler.get_scale() == 2.0**39, "call scaler.update() after the step: it halves the scale"
    # A clean step at growth_interval=1 GROWS the scale: the scale changed, but the step was taken.
    out, moved, scaler = _sgd_step(answers, GPT(small_cfg), x, y, max_norm=1.0, init_scale=2.0**10, growth_interval=1)
    assert scaler.get_scale() == 2.0**11, "call scaler.update() after the step: a clean step at the interval grows it"
    assert out["skipped"] is False and out["scale"] == 2.0**10 and moved.any(), (
        f"a clean step with growth_interval=1 is taken and then doubles the scale (2**10 -> 2**11): report "
        f"skipped=False and scale=2**10, got {out} - a skipped step LOWERS the scale, a grown one is not skipped"
    )


@pytest.mark.exercise("4.1", points=2)
def test_4_1_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["4.1"]())


def _gradscaler_trace(found_infs, init_scale, **kwargs) -> list[tuple[float, int]]:
    """(scale, growth tracker) after each step of a real GradScaler, fed inf or finite gradients."""
    w = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([w], lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, **kwargs)
    trace = []
    for inf in found_infs:
        optimizer.zero_grad()
        scaler.scale(w.sum() * (math.inf if inf else 1.0) + 1.0).backward()
        scaler.step(optimizer)
        scaler.update()
        state = scaler.state_dict()
        trace.append((state["scale"], state["_growth_tracker"]))
    return trace


@pytest.mark.exercise("4.2", points=3)
def test_update_scale_matches_gradscaler(answers):
    gen = torch.Generator().manual_seed(0)
    patterns = [[False] * 7, [True, True, False, False, False, False], (torch.rand(40, generator=gen) < 0.3).tolist()]
    settings = [
        dict(growth_factor=2.0, backoff_factor=0.5, growth_interval=3),
        dict(growth_factor=4.0, backoff_factor=0.25, growth_interval=1),
        dict(growth_factor=2.0, backoff_factor=0.5, growth_interval=5),
        # from a scale of 1.0 a growth of 1.5 makes fractions (a scale is a float, not an int): at most 13 growths
        # in these 40 steps keep every 3**a / 2**b exact in GradScaler's fp32, so == still compares exactly
        dict(growth_factor=1.5, backoff_factor=0.5, growth_interval=3, init_scale=1.0),
    ]
    for kwargs in settings:
        init_scale = kwargs.pop("init_scale", 1024.0)
        for found_infs in patterns:
            want = _gradscaler_trace(found_infs, init_scale, **kwargs)
            scale, tracker = init_scale, 0
            for i, inf in enumerate(found_infs):
                scale, tracker = answers.update_scale(scale, tracker, inf, **kwargs)
                assert (scale, tracker) == want[i], (
                    f"with {kwargs}, after the steps {['inf' if f else 'ok' for f in found_infs[: i + 1]]} "
                    f"GradScaler has (scale, tracker) = {want[i]}, you have {(scale, tracker)}"
                )


@pytest.mark.exercise("4.2", points=2)
def test_4_2_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["4.2"]())


def _warmup(step: int) -> float:
    return (step + 1) / 10


@pytest.mark.exercise("4.3", points=3)
def test_schedule_does_not_move_on_a_skipped_step(answers):
    layer = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _warmup)
    # growth_interval=2: the third and sixth steps are the second clean step in a row, and grow the scale
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=2)
    x = torch.ones(2, 4)
    for inf in (True, False, False, True, False, False):
        before = [p.detach().clone() for p in layer.parameters()]
        lr, epoch, scale = optimizer.param_groups[0]["lr"], scheduler.last_epoch, scaler.get_scale()
        optimizer.zero_grad()
        scaler.scale(layer(x).sum() * (math.inf if inf else 1.0)).backward()
        skipped = answers.step_unless_skipped(optimizer, scheduler, scaler)
        moved = any(not torch.equal(p, b) for p, b in zip(layer.parameters(), before))
        grew = scaler.get_scale() > scale
        what = "had inf gradients" if inf else "was clean" + (" and grew the scale" if grew else "")
        assert skipped is inf, f"the step {what}: return skipped={inf}" + (
            " (a skipped step lowers the scale; one that grows it was taken)" if grew else ""
        )
        assert moved is not inf, "step the optimizer through the scaler: scaler.step(optimizer)"
        if inf:
            assert scheduler.last_epoch == epoch and optimizer.param_groups[0]["lr"] == lr, (
                "the learning-rate schedule advanced on a skipped step: step the scheduler only when the "
                "optimizer really stepped"
            )
        else:
            assert scheduler.last_epoch == epoch + 1, (
                f"the step {what}: advance the schedule after a real step (scheduler.step())"
            )
    assert scaler.get_scale() == 1024.0, "call scaler.update() after each step: two backoffs and two growths"


@pytest.mark.exercise("4.3", points=2)
def test_4_3_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["4.3"]())


def _overflow_watched(function, **kwargs):
    """In the worker: fp16_overflow_experiment(**kwargs), watching the optimizer's steps and the models' inputs."""
    with optimizer_steps() as steps, model_inputs() as inputs:
        rows = function(**kwargs)
    return {"rows": rows, "steps": steps, "inputs": inputs}


@functools.cache
def _few_token_data() -> TokenData:
    """3,000 tokens of a Markov chain over 24 of the 8192 token ids: a model learns it in a few steps, so losses
    on it are far from the losses on the built-in corpus (an answer that drops `data` shows)."""
    rng = np.random.default_rng(7)
    ids = rng.choice(8192, 24, replace=False)
    successors = rng.integers(0, 24, size=(24, 2))
    tokens = np.empty(3000, dtype=np.uint16)
    state = 0
    for i in range(len(tokens)):
        state = successors[state, rng.integers(0, 2)]
        tokens[i] = ids[state]
    return TokenData(train=tokens[:2500], val=tokens[2500:], tokenizer="minigpt-8k", source="markov-24")


# Every argument away from its default (device stays "cpu", the only one here). At 340,000 the scaled
# gradients of the first two steps overflow fp16 and those of the next two do not: the thresholds of these
# four steps are between 2**16.8 and 2**17.7, and the same pattern holds from 0.87x to 1.25x this scale.
OVERFLOW = dict(lr=1e-2, steps=4, init_scale=340_000.0, preset="tiny-deep", batch=3, ctx=8, seed=5)
OVERFLOW_SCALES = [340_000.0, 170_000.0, 85_000.0, 85_000.0]  # halved after each skipped step, then kept


RETURNS_4_4 = (
    'Returns: list of dicts, one per step: {"step": int, 1, 2, ..., "loss": float, "scale": float, the scale used '
    'for that step (scaler.get_scale() before scaler.update()), "skipped": bool}.'
)


def _overflow_case() -> Case:
    # Two AdamW steps at lr 1e-2 after two skipped ones. AdamW's first step moves every weight by lr x sign(g),
    # and another CPU may round a tiny gradient's sign the other way: simulated (16-bit matmul outputs one unit
    # off), the last loss moved by up to 2e-3. 0.01 nats is 5x that and 5x below what the default lr of 3e-3
    # changes (0.05); the clipped gradient norms (1.0) and the scales (powers of two of an fp32 number) fit too.
    return Case(
        "fp16_overflow_experiment",
        kwargs={**OVERFLOW, "data": _few_token_data()},
        atol=0.01,
        ignore=("*'optimizer']", "*'started']*", "*'finished']*"),
        drive=_overflow_watched,
        promise="In place: nothing (data is only read).",
    )


@pytest.mark.exercise("4.4", points=2)
def test_overflow_experiment_shows_the_scaler_backing_off(answers, contract):
    contract.run(answers, _overflow_case(), check=_check_overflow)


def _check_overflow(seen: dict) -> None:
    rows, optimizer_steps = seen["rows"], seen["steps"]
    assert isinstance(rows, list) and all(isinstance(r, dict) for r in rows), "return a list of one dict per step"
    assert [r.get("step") for r in rows] == [1, 2, 3, 4], "one row per step, numbered from 1"
    # ctx=8 is below the tiny-deep preset's 64: every batch is (batch, ctx) as asked
    assert seen["inputs"] and set(map(tuple, seen["inputs"])) == {(3, 8)}, (
        f"the model saw batches of shape {sorted(set(map(tuple, seen['inputs'])))}, expected (batch, ctx) = (3, 8): "
        f"draw them with the batch and ctx you are given, not the model's maximum"
    )
    # 340,000 times the gradients of the first two batches overflows fp16's 65504 somewhere in the backward.
    scales, skipped = [r.get("scale") for r in rows], [r.get("skipped") for r in rows]
    assert scales == OVERFLOW_SCALES and skipped == [True, True, False, False], (
        f"from init_scale=340000 the first two steps overflow fp16: they are skipped and the scale halves each "
        f"time; at 85000 the next two are taken, and the scale stays until 2000 clean steps; got {rows}"
    )
    assert len(optimizer_steps) == 2, (
        f"the optimizer stepped {len(optimizer_steps)} times in 4 steps, 2 of them with inf gradients; expected 2: "
        f"step through the scaler (scaler.step(optimizer)), which skips those"
    )
    assert all(isinstance(r.get("loss"), float) for r in rows), "each row's loss is a Python float (loss.item())"
    assert all(math.isfinite(r["loss"]) for r in rows), "the losses must stay finite: the scaler protects the weights"
    # The true gradient norms of the two clean steps are above 1, so clipping to 1.0 is active: AdamW must
    # receive unscaled gradients of norm 1. clip_grad_norm_ multiplies by 1 / (norm + 1e-6), and the norm
    # recomputed here differs by fp32 rounding (~1e-6 relative): 1e-4 is far from both mistakes, no
    # clipping (above 1) and clipping the scaled gradients (about 1 / 85000).
    norms = [s["grad_norm"] for s in optimizer_steps]
    assert all(n == pytest.approx(1.0, rel=1e-4) for n in norms), (
        f"AdamW received gradients of norm {[round(n, 6) for n in norms]}, expected 1.0 at each of the 2 steps "
        f"(the true norms are above 1): unscale (scaler.unscale_), then clip to 1.0, then step"
    )
    assert not any(s["on_leftover_gradients"] for s in optimizer_steps), (
        "the second step's backward added to the first step's gradients: zero the gradients after each step "
        "(optimizer.zero_grad())"
    )


@pytest.mark.exercise("4.4", points=1)
def test_4_4_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["4.4"]()[1:])  # the experiment itself: test_overflow_experiment_shows_...


# ----------------------------------------------------------------------------------------------------------
# The contracts: each exercise's whole docstring, on inputs the learner did not choose (minigpt.grading.contract)

STEP_CFG = ModelConfig(n_layer=2, n_head=2, n_embd=32, ctx=16, vocab_size=64)  # gradient norm 1.28 on _tokens()

# The optimizers, schedules and GradScalers of the cases: torch's own, named in a few words that are the same in
# every process. A case's fingerprint (the name of its stored outcome) reads an argument's repr, and torch's repr
# of a schedule or a GradScaler holds its memory address, which changes at every run; an optimizer's is many
# lines, too many for a failure message.


def _settings(base: type, settings: dict) -> str:
    """base(name=value, ...) for each setting that is not base's default."""
    defaults = {k: p.default for k, p in inspect.signature(base.__init__).parameters.items()}
    shown = [f"{k}={v!r}" for k, v in settings.items() if k in defaults and defaults[k] != v]
    return f"{base.__name__}({', '.join(shown)})"


class NamedSGD(torch.optim.SGD):
    def __repr__(self) -> str:
        return _settings(torch.optim.SGD, self.defaults)


class NamedAdamW(torch.optim.AdamW):
    def __repr__(self) -> str:
        return _settings(torch.optim.AdamW, self.defaults)


class NamedLambdaLR(torch.optim.lr_scheduler.LambdaLR):
    def __repr__(self) -> str:
        lambdas = ", ".join(f.__qualname__ for f in self.lr_lambdas)
        return f"LambdaLR({lambdas}, last_epoch={self.last_epoch})"


class NamedStepLR(torch.optim.lr_scheduler.StepLR):
    def __repr__(self) -> str:
        return f"StepLR(step_size={self.step_size}, gamma={self.gamma}, last_epoch={self.last_epoch})"


class NamedGradScaler(torch.amp.GradScaler):
    def __repr__(self) -> str:
        if not self.is_enabled():
            return "GradScaler(enabled=False)"
        state = self.state_dict()
        settings = {"init_scale": state["scale"], **state}
        tracker = state["_growth_tracker"]
        return _settings(torch.amp.GradScaler, settings)[:-1] + (f", growth_tracker={tracker})" if tracker else ")")


def _tokens(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """x and y of shape (3, 13): an odd batch, and sequences shorter than the model's ctx of 16."""
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randint(0, STEP_CFG.vocab_size, (3, 13), generator=gen) for _ in range(2))


def _scaler(init_scale: float, tracker: int = 0, **settings) -> torch.amp.GradScaler:
    """A CPU GradScaler with these settings, its growth tracker already at `tracker` clean steps."""
    scaler = NamedGradScaler("cpu", init_scale=init_scale, **settings)
    scaler.load_state_dict({**scaler.state_dict(), "_growth_tracker": tracker})
    return scaler


def _fp16_step_watched(function, model, optimizer, scaler, x, y, **kwargs):
    """In the worker: scaled_fp16_step, with the dtype of the logits the model made (the forward's precision)."""
    dtypes = []
    hook = model.lm_head.register_forward_hook(lambda module, args, out: dtypes.append(out.dtype))
    try:
        out = function(model, optimizer, scaler, x, y, **kwargs)
    finally:
        hook.remove()
    return {"returned": out, "logits_dtypes": dtypes}


def _cases_4_1() -> list[Case]:
    returns = (
        'Returns: dict {"loss": float, the loss the model computed (not the scaled one), "grad_norm": float, the '
        'norm of the true (unscaled) gradients before clipping (inf or nan on a skipped step), "scale": float, '
        'the scale used for this step (scaler.get_scale() before scaler.update()), "skipped": bool, whether the '
        "scaler skipped the optimizer step (it then lowers the scale; a scale that grows was a step taken)}."
    )
    in_place = (
        "In place: the model's weights take one optimizer step on the clipped gradients (none when skipped), the "
        "optimizer's state advances with them, the gradients are left as None, and the scaler's scale and growth "
        "tracker move on (scaler.update())."
    )

    def case(model, optimizer, scaler, seed, max_norm, **extra):
        # SGD(lr=0.5) moves each weight by half its clipped gradient (up to 0.02 with max_norm 0.3, 0.08
        # unclipped). Another CPU's fp16 kernels round a few matmul outputs the other way: simulated, with 1 in 10
        # of all the matmul outputs one unit off, the weights and the momentum moved by 1.2e-4 at most. atol 5e-4
        # is 4x that and 30x below what clipping to another norm changes; rtol 1e-4 is for the loss (about 4.2)
        # and the gradient norm (1.28), which the same simulation moved by less than 1e-5.
        return Case(
            "scaled_fp16_step",
            (model, optimizer, scaler, *_tokens(seed)),
            {"max_norm": max_norm},
            rtol=1e-4,
            atol=5e-4,
            drive=_fp16_step_watched,
            **extra,
        )

    def sgd(model):
        return NamedSGD(model.parameters(), lr=0.5, momentum=0.9)

    model = GPT(STEP_CFG, seed=1)
    # clean, clipped (norm 1.28 > 0.3), and at the end of the growth interval: the scale grows 3x after the step
    grows = _scaler(2.0**12, growth_factor=3.0, backoff_factor=0.25, growth_interval=1)
    cases = [case(model, sgd(model), grows, 1, 0.3, promise=in_place)]
    model = GPT(STEP_CFG, seed=2)
    # clean, not clipped (the default max_norm of 1.0 would clip), one more clean step counted: the scale stays
    counts = _scaler(2.0**10, tracker=1, growth_factor=4.0, growth_interval=4)
    cases.append(case(model, sgd(model), counts, 2, 3.0))
    model = GPT(STEP_CFG, seed=3)
    # 2**40 overflows fp16: the step is skipped, the scale backs off 8x, the tracker restarts; nothing else moves
    overflows = _scaler(2.0**40, tracker=3, growth_factor=4.0, backoff_factor=0.125, growth_interval=5)
    adamw = NamedAdamW(model.parameters(), lr=1e-3)
    # called as it is, without watching the forward (a forward in another precision does not overflow here)
    skipped = case(model, adamw, overflows, 3, 0.7, ignore=("*'grad_norm']",), promise=(returns, in_place))
    cases.append(dataclasses.replace(skipped, drive=None))
    bad = "Raises: ValueError if max_norm is not positive."
    for max_norm in (0.0, -1.0):
        model = GPT(STEP_CFG, seed=4)
        # a bad call changes nothing: not the weights, their gradients, the optimizer or the scaler
        cases.append(case(model, sgd(model), _scaler(2.0**8, growth_interval=1), 4, max_norm, promise=bad))
    return cases


def _cases_4_2() -> list[Case]:
    returns = "Returns: tuple (the new scale, a float; the new growth tracker, an int)."
    nothing = "In place: nothing."
    # The scale is plain Python float arithmetic. Most factors here are powers of two (exact); for 1.5 and 0.3,
    # rtol 1e-6 also accepts an answer that multiplies in fp32 as GradScaler does, and nothing else.
    exact = {"rtol": 1e-6}
    calls = [
        ((1024.0, 7, True), {"backoff_factor": 0.25, "growth_interval": 10}),  # not the default 0.5
        ((1024.0, 0, True), {}),
        ((65536.0, 5, False), {}),  # one more clean step
        ((65536.0, 1999, False), {}),  # the 2000th clean step in a row: grows
        ((512.0, 2, False), {"growth_factor": 3.0, "growth_interval": 3}),  # reaches the interval: grows 3x
        ((512.0, 1, False), {"growth_factor": 3.0, "growth_interval": 3}),
        ((512.0, 0, False), {"growth_factor": 4.0, "backoff_factor": 0.125, "growth_interval": 1}),  # every step
        ((512.0, 0, True), {"growth_factor": 4.0, "backoff_factor": 0.125, "growth_interval": 1}),
        ((100.0, 4, True), {"growth_factor": 1.5, "backoff_factor": 0.3, "growth_interval": 5}),
        ((100.0, 4, False), {"growth_factor": 1.5, "backoff_factor": 0.3, "growth_interval": 5}),
        ((2.0**-10, 0, True), {}),  # a scale below 1 backs off the same way
    ]
    cases = [Case("update_scale", args, kwargs, promise=(returns, nothing), **exact) for args, kwargs in calls]
    cases.append(Case("update_scale", (1024.0, 3, False, 2.0, 0.5, 6), **exact))  # every argument by position
    interval = "Raises: ValueError if growth_interval is below 1."
    factors = (
        "Raises: ValueError if growth_factor is not above 1, or backoff_factor is not between 0 and 1 (both excluded)."
    )
    tracker = (
        "Raises: ValueError if growth_tracker is negative or not below growth_interval (the tracker resets when it "
        "gets there, so it never holds more)."
    )
    bad = [
        ((1024.0, 0, False), {"growth_interval": 0}, interval),
        ((1024.0, 0, True), {"growth_interval": -3}, interval),
        ((1024.0, 0, False), {"growth_factor": 1.0}, factors),
        ((1024.0, 0, True), {"growth_factor": 0.5}, factors),  # checked whichever way the step went
        ((1024.0, 0, False), {"backoff_factor": 1.0}, factors),  # ... and here too
        ((1024.0, 0, True), {"backoff_factor": 0.0}, factors),
        ((1024.0, 0, True), {"backoff_factor": 2.0}, factors),
        ((1024.0, -1, False), {}, tracker),
        ((1024.0, 3, False), {"growth_interval": 3}, tracker),
        ((1024.0, 5, True), {"growth_interval": 3}, tracker),
    ]
    cases += [Case("update_scale", args, kwargs, promise=promise) for args, kwargs, promise in bad]
    return cases


def _step_after_backward(function, model, optimizer, scheduler, scaler, x, losses, unscale_first=False):
    """In the worker: for each loss factor (1.0, inf or nan), scaled gradients of model(x).sum() x factor (inf
    and nan make the gradients inf and nan), then step_unless_skipped; unscale_first: the caller unscales them
    first, as one that clips does. Returns what each call returned."""
    returned = []
    with warnings.catch_warnings():
        # the scheduler's check that the optimizer stepped first does not survive the pickle that brought them here
        warnings.filterwarnings("ignore", message="Seems like `optimizer.step\\(\\)` has been overridden")
        for factor in losses:
            optimizer.zero_grad()
            scaler.scale(model(x).sum() * factor).backward()
            if unscale_first:
                scaler.unscale_(optimizer)
            returned.append(function(optimizer, scheduler, scaler))
    return returned


def _step_after_one_backward(function, model, optimizer, scheduler, scaler, x, factor):
    """In the worker: one step of _step_after_backward, and what that call returned, as it returned it."""
    return _step_after_backward(function, model, optimizer, scheduler, scaler, x, (factor,))[0]


def _cases_4_3() -> list[Case]:
    returns = "Returns: bool, True if the step was skipped (the scale went down), False if the optimizer stepped."
    in_place = (
        "In place: the optimizer steps through the scaler (scaler.step unscales the gradients in place, then changes "
        "the parameters and the optimizer's state unless it skips), the scaler's scale and growth tracker move on "
        "(scaler.update()), and the scheduler takes one step only when the optimizer did. The gradients are not "
        "zeroed: that is the caller's job."
    )
    # fp32 on a 5 -> 3 linear layer: another CPU sums the few products in another order (1e-7 relative).
    fp32 = {"rtol": 1e-5, "atol": 1e-7}
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(1)
    layer = torch.nn.Linear(5, 3)
    optimizer = NamedSGD(layer.parameters(), lr=0.1, momentum=0.9)
    scheduler = NamedLambdaLR(optimizer, _warmup)  # the lr changes at every step
    # growth_interval=2: the third step is the second clean step in a row, and grows the scale 4x; it ends at
    # (256, 1), not where it started
    scaler = _scaler(1024.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=2)
    losses = (math.inf, 1.0, 1.0, math.nan, 1.0)
    cases = [
        Case(
            "step_unless_skipped",
            (layer, optimizer, scheduler, scaler, x, losses),
            drive=_step_after_backward,
            promise=(in_place, "Raises: nothing of its own."),
            **fp32,
        )
    ]
    torch.manual_seed(2)
    layer = torch.nn.Linear(5, 3)
    optimizer = NamedAdamW(layer.parameters(), lr=0.01)
    scheduler = NamedStepLR(optimizer, step_size=1, gamma=0.5)
    scaler = _scaler(256.0, tracker=2, growth_interval=3)  # grows 2x after the first step, then backs off, counts
    cases.append(
        Case(
            "step_unless_skipped",
            (layer, optimizer, scheduler, scaler, x, (1.0, math.inf, 1.0)),
            {"unscale_first": True},
            drive=_step_after_backward,
            promise=in_place,
            **fp32,
        )
    )
    torch.manual_seed(3)
    layer = torch.nn.Linear(5, 3)
    optimizer = NamedSGD(layer.parameters(), lr=0.05)
    scheduler = NamedLambdaLR(optimizer, _warmup)
    off = NamedGradScaler("cpu", enabled=False)  # an fp32 run's scaler: its scale is 1.0, it never skips
    cases.append(
        Case(
            "step_unless_skipped",
            (layer, optimizer, scheduler, off, x, 1.0),
            drive=_step_after_one_backward,
            promise=returns,
            **fp32,
        )
    )
    torch.manual_seed(4)
    layer = torch.nn.Linear(5, 3)
    optimizer = NamedSGD(layer.parameters(), lr=0.05)
    scheduler = NamedStepLR(optimizer, step_size=2, gamma=0.1)
    cases.append(
        Case(
            "step_unless_skipped",
            (layer, optimizer, scheduler, _scaler(2.0**20, tracker=5, growth_interval=7), x, math.nan),
            drive=_step_after_one_backward,
            promise=returns,
            **fp32,
        )
    )
    return cases


def _cases_4_4() -> list[Case]:
    data = _few_token_data()
    small = dict(steps=1, batch=1, ctx=4, data=data)  # an answer that does not stop trains for one step
    positive = "Raises: ValueError if lr or init_scale is not positive."
    sizes = "Raises: ValueError if steps, batch or ctx is below 1, or ctx is above the preset's maximum context."
    return [
        _overflow_case(),
        # two clean steps, called as it is (the experiment's case is watched): the same tolerance as that case's
        Case(
            "fp16_overflow_experiment",
            (5e-3, 2, 2.0**12, "tiny", 2, 6, "cpu", data, 1),
            atol=0.01,
            promise=RETURNS_4_4,
        ),
        Case("fp16_overflow_experiment", kwargs={**small, "lr": 0.0}, promise=positive),
        Case("fp16_overflow_experiment", kwargs={**small, "lr": -1e-3}, promise=positive),
        Case("fp16_overflow_experiment", kwargs={**small, "init_scale": 0.0}, promise=positive),
        Case("fp16_overflow_experiment", kwargs={**small, "steps": 0}, promise=sizes),
        Case("fp16_overflow_experiment", kwargs={**small, "batch": 0}, promise=sizes),
        Case("fp16_overflow_experiment", kwargs={**small, "ctx": 0}, promise=sizes),
        Case("fp16_overflow_experiment", kwargs={**small, "ctx": 65}, promise=sizes),  # the tiny preset's is 64
        Case(
            "fp16_overflow_experiment",
            kwargs={**small, "preset": "tiny-wide"},
            promise="Raises: ValueError if the preset is unknown.",
        ),
    ]


CONTRACTS = {"4.1": _cases_4_1, "4.2": _cases_4_2, "4.3": _cases_4_3, "4.4": _cases_4_4}
