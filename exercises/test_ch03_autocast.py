"""Grades chapter 3: an autocast training step that keeps the loss in fp32, the precision comparison
and "why still fp32?"."""

import contextlib
import copy
import functools
import inspect
import math
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from minigpt import memory
from minigpt.data import TokenData
from minigpt.formats import update_is_lost
from minigpt.grading.contract import Case
from minigpt.grading.watch import check_run_times, now, optimizer_steps
from minigpt.model import GPT, ModelConfig, get_config

CHAPTER = "ch03_autocast"
HINTS = {  # the hints of solutions/ch03_autocast.py, shown under a wrong answer
    "3.1": "forward under torch.autocast, loss from logits.float(), then backward/clip/step/zero_grad",
    "3.2": "one TrainConfig per precision, train(), time it, and read the result's summary",
    "3.3": "round the weights into the dtype, add the update in that dtype, count the unchanged",
}


def _step_watched(answers, model, optimizer, x, y, dtype, max_norm):
    """In the worker: the learner's step, watching the dtype of the logits, the dtype of every cross-entropy's
    input (whoever computes it) and the optimizer's steps."""
    logits_dtypes, loss_dtypes = [], []
    hook = model.lm_head.register_forward_hook(lambda m, i, out: logits_dtypes.append(out.dtype))
    real_cross_entropy = F.cross_entropy

    def spy(input, *args, **kwargs):
        loss_dtypes.append(input.dtype)
        return real_cross_entropy(input, *args, **kwargs)

    F.cross_entropy = spy
    try:
        with optimizer_steps() as steps:
            loss = answers.autocast_train_step(model, optimizer, x, y, dtype=dtype, max_norm=max_norm)
    finally:
        F.cross_entropy = real_cross_entropy
        hook.remove()
    return {"loss": loss, "logits_dtypes": logits_dtypes, "loss_dtypes": loss_dtypes, "steps": steps}


def _step(answers, cfg, dtype, max_norm=1.0):
    """Run the learner's step once; return (model before, model after, what the worker saw, the batch)."""
    torch.manual_seed(0)
    model = GPT(cfg)
    before = copy.deepcopy(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randint(0, cfg.vocab_size, (2, 2, cfg.ctx))
    seen = answers.run(_step_watched, model, optimizer, x, y, dtype, max_norm)
    return before, model, seen, (x, y)


@pytest.mark.exercise("3.1", points=2)
def test_forward_in_16_bits_loss_in_fp32(answers, small_cfg):
    for dtype in (torch.bfloat16, torch.float16):
        _, _, seen, _ = _step(answers, small_cfg, dtype)
        loss, logits_dtypes, loss_dtypes = seen["loss"], seen["logits_dtypes"], seen["loss_dtypes"]
        assert logits_dtypes == [dtype], (
            f"the model's matmuls ran in {logits_dtypes}, not {dtype}: run the forward inside "
            f"torch.autocast(device_type=x.device.type, dtype=dtype)"
        )
        assert isinstance(loss, torch.Tensor) and loss.numel() == 1, "return the loss as a one-element tensor"
        assert loss.dtype == torch.float32 and all(d == torch.float32 for d in loss_dtypes), (
            f"the loss was computed from {loss_dtypes} logits and returned as {loss.dtype}: upcast the logits "
            f"with .float() before the cross-entropy, so the loss is fp32"
        )


@pytest.mark.exercise("3.1", points=2)
def test_weights_stay_fp32_and_take_a_step(answers, small_cfg):
    torch.manual_seed(0)
    model = GPT(small_cfg)
    x, y = torch.randint(0, small_cfg.vocab_size, (2, 2, small_cfg.ctx))
    model(x, y)[1].backward()
    max_norm = torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item() / 10  # clipping is active
    before, after, seen, (x, y) = _step(answers, small_cfg, torch.bfloat16, max_norm=max_norm)
    loss, optimizer_steps = seen["loss"], seen["steps"]
    assert len(optimizer_steps) == 1, f"{len(optimizer_steps)} optimizer steps, expected 1"
    # bf16 moves the gradient norm by about 1%, but clipping then sets it to max_norm exactly (up to the
    # 1e-6 clip_grad_norm_ adds to the norm, and fp32 rounding of its recomputation): 1e-3 relative.
    got = optimizer_steps[0]["grad_norm"]
    assert got == pytest.approx(max_norm, rel=1e-3), (
        f"with max_norm={max_norm:.4g} the optimizer stepped with gradients of norm {got:.4g}: clip the gradient "
        f"norm after backward and before optimizer.step()"
    )
    assert isinstance(loss, torch.Tensor) and not loss.requires_grad, (
        "return the loss detached (loss.detach()): the graph is not needed any more"
    )
    dtypes = {p.dtype for p in after.parameters()}
    assert dtypes == {torch.float32}, f"the weights became {dtypes}: autocast keeps them fp32, do not convert"
    changed = [n for (n, p), q in zip(after.named_parameters(), before.parameters()) if not torch.equal(p, q)]
    assert len(changed) == len(list(after.parameters())), "optimizer.step() did not update every weight"
    assert all(p.grad is None or not p.grad.any() for p in after.parameters()), "zero the gradients after the step"
    with torch.no_grad():
        _, reference = before(x, y)
    # bf16 keeps 8 significant bits: the logits, and so the loss, move by well under 1% (2% leaves room).
    assert loss.item() == pytest.approx(reference.item(), rel=0.02), (
        f"the step's loss {loss.item():.4f} is not the model's loss {reference.item():.4f} on that batch"
    )


@pytest.mark.exercise("3.1", points=2)
def test_3_1_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["3.1"]())


def _overflowing_grad_scaler(monkeypatch):
    """Every GradScaler built with the default settings starts at 2**40 and backs off by 2**-30: the first fp16
    step overflows and is skipped, the next ones run at a scale of 1024, so a skipped_steps that is not read
    from the run shows (it is 1, neither 0 nor every step)."""
    init = torch.amp.GradScaler.__init__
    names = list(inspect.signature(init).parameters)[-len(init.__defaults__) :]
    defaults = dict(zip(names, init.__defaults__))
    defaults["init_scale"] = 2.0**40
    defaults["backoff_factor"] = 2.0**-30
    monkeypatch.setattr(init, "__defaults__", tuple(defaults.values()))


@contextlib.contextmanager
def _train_runs(answers):
    """Every minigpt.train.train() call inside the block (the answers' own `train` included): the settings of
    its config that the exercise passes on, the data it was given (its source), its losses and skipped steps,
    and when it started and finished (now(): both clocks)."""
    import minigpt.train as train_module

    real = train_module.train
    runs: list[dict] = []

    def recording_train(cfg, *args, **kwargs):
        data = args[0] if args else kwargs.get("data")
        started = now()
        result = real(cfg, *args, **kwargs)
        finished = now()
        settings = ("preset", "precision", "steps", "batch", "accum", "ctx", "device", "seed")
        runs.append(
            {
                **{key: getattr(cfg, key) for key in settings},
                "data": None if data is None else data.source,
                "losses": [float(loss) for loss in result.losses],
                "skipped_steps": result.skipped_steps,
                "started": started,
                "finished": finished,
            }
        )
        return result

    patched = [m for m in (train_module, answers) if getattr(m, "train", None) is real]
    for module in patched:
        module.train = recording_train
    try:
        yield runs
    finally:
        for module in patched:
            module.train = real


def _compare_watched(function, **kwargs):
    """In the worker: compare_precisions(**kwargs) with GradScalers that skip the first fp16 step, watching each
    training run."""
    with pytest.MonkeyPatch.context() as monkeypatch, _train_runs(sys.modules[function.__module__]) as runs:
        _overflowing_grad_scaler(monkeypatch)
        called = now()
        rows = function(**kwargs)
        returned = now()
    return {"rows": rows, "runs": runs, "called": called, "returned": returned}


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


# Every argument away from its default: an 8-layer preset, a subset of the precisions in another order, 3 steps,
# batch 3 and ctx 8 (below the preset's 64), and data of its own. device stays "cpu": the only one here.
# The precisions in neither sorted nor the default order: rows in the order given, whatever it is.
TABLE = dict(preset="tiny-deep", precisions=("fp32", "fp16", "bf16"), steps=3, batch=3, ctx=8, device="cpu")


def _table_case() -> Case:
    # Losses of 3 steps near 8.4: another CPU's 16-bit kernels round a few matmul outputs the other way and
    # AdamW's first step (lr * sign(g)) flips a few tiny gradients' sign; simulated, that moves the final loss
    # by up to 2e-3. 0.01 nats is 5x that, and 5x below the loss a step of the run moves (about 0.1).
    return Case(
        "compare_precisions",
        kwargs={**TABLE, "data": _few_token_data()},
        atol=0.01,
        ignore=("*'seconds']", "*'started']*", "*'finished']*", "*'called']*", "*'returned']*"),
        drive=_compare_watched,
        promise="In place: nothing.",
    )


def _cases_3_2() -> list[Case]:
    data = _few_token_data()
    small = dict(steps=1, batch=1, ctx=4, data=data)  # an answer that does not stop would train for one step
    unknown = "Raises: ValueError if a precision or the preset is unknown (TrainConfig checks, before that run trains)."
    size = (
        "Raises: ValueError if steps, batch or ctx is below 1, or ctx is above the preset's maximum (TrainConfig "
        "checks these too)."
    )
    return [
        _table_case(),
        # one fp16 step, called as it is (the table's case is watched): the same tolerance as the table's
        Case(
            "compare_precisions",
            kwargs={"precisions": ("fp16",), **small},
            atol=0.01,
            ignore=("*'seconds']",),
            promise="Returns: list of dicts, one per precision in the order given, each with the six keys above.",
        ),
        Case("compare_precisions", kwargs={"precisions": ("fp8",), **small}, promise=unknown),
        Case("compare_precisions", kwargs={"preset": "tiny-wide", **small}, promise=unknown),
        Case("compare_precisions", kwargs={**small, "steps": 0}, promise=size),
        Case("compare_precisions", kwargs={**small, "batch": 0}, promise=size),
        Case("compare_precisions", kwargs={**small, "ctx": 65}, promise=size),  # the tiny preset's ctx is 64
    ]


@pytest.mark.exercise("3.2", points=3)
def test_compare_precisions_table(answers, contract):
    contract.run(answers, _table_case(), check=_check_table)


def _check_table(seen: dict) -> None:
    rows, train_runs = seen["rows"], seen["runs"]
    assert isinstance(rows, list) and all(isinstance(r, dict) for r in rows), (
        f"compare_precisions returned {type(rows).__name__}: return a list with one dict per precision"
    )
    precisions = TABLE["precisions"]
    assert [r["precision"] for r in rows] == list(precisions), "one row per precision, in the order given"
    keys = {"precision", "seconds", "final_loss", "predicted_peak_bytes", "measured_peak_bytes", "skipped_steps"}
    for r in rows:
        assert keys <= set(r), f"row {r} lacks {keys - set(r)}"
        assert r["seconds"] > 0 and math.isfinite(r["final_loss"]), f"bad time or loss in {r}"
        # batch 3 and ctx 8 (below the preset's 64): a size at which the three precisions' peaks differ
        want = memory.estimate(get_config("tiny-deep"), 3, 8, r["precision"], device="cpu").peak
        assert r["predicted_peak_bytes"] == want, f"{r['precision']}: predicted peak should be estimate(...).peak"
        assert r["measured_peak_bytes"] is None, "a CPU has no peak-memory counter: report None"
    assert len(train_runs) == len(rows), f"{len(train_runs)} calls of minigpt.train.train for {len(rows)} rows"
    for r, run in zip(rows, train_runs):
        asked = ("tiny-deep", r["precision"], 3, 3, 8, "markov-24")
        got = (run["preset"], run["precision"], run["steps"], run["batch"], run["ctx"], run["data"])
        assert got == asked, (
            f"the run for {r['precision']} trained with (preset, precision, steps, batch, ctx, data) = {got}; "
            f"expected {asked}: pass every argument on, and the data to train(cfg, data)"
        )
        # The row reports that run: read exactly.
        assert r["final_loss"] == run["losses"][-1], (
            f"{r['precision']}: final_loss {r['final_loss']!r}, but the run's losses were {run['losses']}: report "
            f"the last one (result.losses[-1])"
        )
        assert r["skipped_steps"] == run["skipped_steps"], (
            f"{r['precision']}: skipped_steps {r['skipped_steps']}, but the run skipped {run['skipped_steps']} "
            f"steps (result.skipped_steps)"
        )
    check_run_times(rows, seen, "precision")
    assert train_runs[1]["skipped_steps"] == 1, "this test's GradScaler of 2**40 should overflow the first step"
    # Same seed, same batches, three steps from the same init: bf16 matmuls move the loss by far less than
    # 0.05 nats (the loss is about 8.4 here; a step moves it by about 0.2).
    fp32, bf16 = rows[0]["final_loss"], rows[2]["final_loss"]
    assert abs(bf16 - fp32) < 0.05, f"the bf16 run's final loss {bf16:.4f} vs fp32's {fp32:.4f}: more than 0.05 apart"


@pytest.mark.exercise("3.2", points=1)
def test_3_2_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["3.2"]()[1:])  # the table itself: test_compare_precisions_table


@pytest.mark.exercise("3.3", points=2)
def test_lost_update_fraction(answers):
    weights = torch.randn(20_000, generator=torch.Generator().manual_seed(0)) * 0.02  # like GPT's init
    original = weights.clone()
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for update in (1e-6, 1e-5, 1e-4, 1e-3):
            got = answers.lost_update_fraction(weights, update, dtype)
            assert torch.equal(weights, original), (
                f"lost_update_fraction(weights, {update:g}, {dtype}) changed the caller's weights: work on a copy "
                f"(weights.to(dtype) is the same tensor when the dtype already matches)"
            )
            assert isinstance(got, float), (
                f"lost_update_fraction(weights, {update:g}, {dtype}) returned {got!r}: return a Python float "
                f"(.item()), not a tensor"
            )
            stored = weights.to(dtype)
            want = ((stored.double() + update).to(dtype) == stored).double().mean().item()
            # 0.5%: only elements within fp32's rounding of a tie can come out differently (see formats.py).
            assert got == pytest.approx(want, abs=0.005), (
                f"lost_update_fraction(weights, {update:g}, {dtype}) returned {got:.4f}, expected {want:.4f}: "
                f"compare after rounding the sums into {dtype}"
            )
    for w in weights[:50].tolist():  # the same rule, one weight at a time, as chapter 1 defined it
        lost = answers.lost_update_fraction(torch.tensor([w]), 1e-4, torch.bfloat16)
        assert lost == float(update_is_lost(w, 1e-4, torch.bfloat16)), f"weight {w}: lost should be {not lost}"


@pytest.mark.exercise("3.3", points=1)
def test_bf16_weights_lose_small_updates(answers):
    weights = torch.randn(20_000, generator=torch.Generator().manual_seed(1)) * 0.02
    bf16 = answers.lost_update_fraction(weights, 1e-5, torch.bfloat16)
    fp32 = answers.lost_update_fraction(weights, 1e-5, torch.float32)
    assert bf16 > 0.5 and fp32 < 0.01, (
        f"an update of 1e-5 should be lost for most bf16 weights of size ~0.02 (got {bf16:.2f}) and for "
        f"almost no fp32 ones (got {fp32:.2f})"
    )


@pytest.mark.exercise("3.3", points=2)
def test_3_3_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["3.3"]())


# ----------------------------------------------------------------------------------------------------------
# The contracts: each exercise's whole docstring, on inputs the learner did not choose (minigpt.grading.contract)

STEP_CFG = ModelConfig(n_layer=2, n_head=2, n_embd=32, ctx=16, vocab_size=64)  # gradient norm 1.28 on _batch()

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


def _batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """x and y of shape (3, 13): an odd batch, and sequences shorter than the model's ctx of 16."""
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randint(0, STEP_CFG.vocab_size, (3, 13), generator=gen) for _ in range(2))


def _cases_3_1() -> list[Case]:
    returns = "Returns: torch.Tensor, the batch's loss before the step, as an fp32 scalar (0-dim) tensor, detached."
    in_place = (
        "In place: the model's weights take one optimizer step on the clipped gradients, the optimizer's state "
        "advances, and the gradients are left as None."
    )

    def sgd_case(dtype, max_norm, seed):
        model = GPT(STEP_CFG, seed=seed)
        optimizer = NamedSGD(model.parameters(), lr=0.5, momentum=0.9)  # the step is -0.5 x the gradient
        # SGD moves each weight by 0.5 x its clipped gradient (up to 0.02 with max_norm 0.3, 0.08 unclipped).
        # Another CPU's 16-bit kernels round a few matmul outputs the other way: simulated, with 1 in 10 of all
        # the matmul outputs one unit off, the weights and the momentum moved by 1.2e-4 at most. atol 5e-4 is
        # 4x that and 30x below what clipping to another norm changes; rtol 1e-4 is for the loss (about 4.2),
        # which the same simulation moved by 7e-6.
        return Case(
            "autocast_train_step",
            (model, optimizer, *_batch(seed)),
            {"dtype": dtype, "max_norm": max_norm},
            rtol=1e-4,
            atol=5e-4,
            promise=(returns, in_place),
        )

    cases = [
        sgd_case(torch.bfloat16, 0.3, 1),  # clipping active: the gradient norm is 1.28
        sgd_case(torch.float16, 3.0, 2),  # not active here, where the default max_norm of 1.0 would clip
    ]
    model = GPT(STEP_CFG, seed=3)
    # AdamW's first step moves every weight by lr x sign(gradient): a gradient near zero whose sign another CPU
    # rounds the other way moves its weight by 2 x lr, so the weights agree to 2.5 x lr (2.5e-3) only; the
    # case still shows the step taken, the state made, the gradients gone and the loss (rtol 1e-4).
    adamw = NamedAdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    cases.append(Case("autocast_train_step", (model, adamw, *_batch(3), torch.bfloat16, 0.5), rtol=1e-4, atol=2.5e-3))
    bad_dtype = "Raises: ValueError if dtype is not torch.bfloat16 or torch.float16."
    bad_norm = "Raises: ValueError if max_norm is not positive."
    for kwargs, promise in (
        ({"dtype": torch.float32}, bad_dtype),  # autocast on a CPU would warn and run in fp32
        ({"dtype": torch.float64}, bad_dtype),
        ({"max_norm": 0.0}, bad_norm),  # clip_grad_norm_ would zero every gradient
        ({"max_norm": -1.0, "dtype": torch.float16}, bad_norm),
    ):
        model = GPT(STEP_CFG, seed=4)
        optimizer = NamedSGD(model.parameters(), lr=0.5, momentum=0.9)
        # a bad call changes nothing: not the weights, not their gradients, not the optimizer
        cases.append(Case("autocast_train_step", (model, optimizer, *_batch(4)), kwargs, promise=promise))
    return cases


def _ties(dtype: torch.dtype) -> torch.Tensor:
    """Weights where updates of half a gap land exactly on a tie: powers of two (whose gap below is half the gap
    above), values whose last mantissa bit is 1 (a tie rounds them up, away from themselves), negatives, zeros."""
    ulp = {torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10, torch.float32: 2.0**-23}[dtype]
    values = [1.0, 1.0 + ulp, 0.5, -1.0, -(1.0 + ulp), 1.0 - ulp / 2, 2.0**-6, 3.0, 0.0, -0.0, 1.5, -0.5]
    return torch.tensor(values, dtype=torch.float32)


def _zero_dim(function, value, update, dtype):
    """In the worker: the answer on a 0-dim tensor holding value."""
    return function(torch.tensor(value), update, dtype)


def _cases_3_3() -> list[Case]:
    returns = "Returns: float, the fraction of all the elements (0.0 to 1.0), whatever the tensor's shape."
    in_place = (
        "In place: nothing: the caller's weights stay as they are (weights.to(dtype) is the very same tensor when "
        "the dtype already matches, so never add to it in place)."
    )
    gen = torch.Generator().manual_seed(3)
    cases = []
    # The fraction is a count over the number of elements; .float().mean() rounds it to fp32 and count / n does
    # not: rtol 1e-6 covers that and nothing else (one element more or less moves it by at least 1/n, 1e-2 here).
    fraction = {"rtol": 1e-6}
    for dtype, half_gap in ((torch.bfloat16, 2.0**-8), (torch.float16, 2.0**-11), (torch.float32, 2.0**-24)):
        # exact ties, both ways: updates that are numbers of the dtype, and sums exact in fp32, so that every
        # honest way of adding (in the dtype, in fp32, in fp64) rounds them alike
        for update in (half_gap, -half_gap / 2, -0.75 * half_gap, half_gap * 1.5):
            cases.append(Case("lost_update_fraction", (_ties(dtype), update, dtype), promise=returns, **fraction))
    weights = torch.randn(7, 13, generator=gen) * 0.02  # like GPT's init, 2-D, 91 elements
    for dtype, update in ((torch.bfloat16, 1e-4), (torch.float16, -5e-6), (torch.float32, 1e-9)):
        cases.append(Case("lost_update_fraction", (weights, update, dtype), promise=in_place, **fraction))
    cubes = torch.randn(2, 3, 5, generator=gen) * 0.5  # 3-D, and stored in bf16 already, asked in fp16
    cases.append(Case("lost_update_fraction", (cubes.to(torch.bfloat16), -1e-4, torch.float16), **fraction))
    # a 0-dim tensor, made in the worker by _zero_dim (a case's fingerprint could not read a 0-dim tensor's bytes)
    cases.append(Case("lost_update_fraction", (1.0, 2.0**-6, torch.bfloat16), drive=_zero_dim, **fraction))
    cases.append(Case("lost_update_fraction", (weights, 0.0, torch.bfloat16), **fraction))  # every one is lost
    cases.append(Case("lost_update_fraction", (weights, 1.0, torch.float16), **fraction))  # none is lost: 0.0
    empty = "Raises: ValueError if weights has no elements."
    cases.append(Case("lost_update_fraction", (torch.empty(0), 1e-3, torch.bfloat16), promise=empty))
    cases.append(Case("lost_update_fraction", (torch.empty(3, 0), 1e-3, torch.float32), promise=empty))
    not_float = "Raises: ValueError if dtype is not a floating-point dtype."
    cases.append(Case("lost_update_fraction", (weights, 1e-3, torch.int32), promise=not_float))
    cases.append(Case("lost_update_fraction", (weights, 1e-3, torch.bool), promise=not_float))
    return cases


CONTRACTS = {"3.1": _cases_3_1, "3.2": _cases_3_2, "3.3": _cases_3_3}
