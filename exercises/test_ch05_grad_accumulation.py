"""Grades chapter 5: token-normalized accumulation, the effective-batch arithmetic, and accum 1/4/16 at a fixed
effective batch."""

import copy
import functools
import math
import sys

import numpy as np
import pytest
import torch

from minigpt import memory
from minigpt.data import TokenData
from minigpt.grading import transfer
from minigpt.grading.contract import Case
from minigpt.grading.watch import check_run_times, now, train_runs
from minigpt.model import GPT, IGNORE_INDEX, ModelConfig, get_config

CHAPTER = "ch05_grad_accumulation"
HINTS = {  # the hints of solutions/ch05_grad_accumulation.py, shown under a wrong answer
    "5.1": "count the window's targets (y != IGNORE_INDEX) first; backward each summed loss / that count",
    "5.2": "each of world_size processes runs accum micro-batches of micro_batch sequences; "
    "target_batch / (micro_batch * world_size), which must be a whole number",
    "5.3": "micro_batch = effective // accum; one timed train() per accum; estimate() for the memory",
}


def _window(cfg, n_micro=4, micro=2, padding=None, seed=0):
    """Micro-batches of random tokens; padding[i] = how many targets at the end of micro-batch i are ignored."""
    gen = torch.Generator().manual_seed(seed)
    batches = []
    for i in range(n_micro):
        tokens = torch.randint(0, cfg.vocab_size, (micro, cfg.ctx + 1), generator=gen)
        x, y = tokens[:, :-1], tokens[:, 1:].clone()
        if padding and padding[i]:
            y[:, cfg.ctx - padding[i] :] = IGNORE_INDEX
        batches.append((x, y))
    return batches


def _gradients(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def _check_against_one_big_batch(answers, cfg, batches, earlier=None):
    """The learner's accumulated gradients against one big batch's. `earlier`: micro-batches whose gradients the
    model already holds when the call begins (an earlier window of the same step): they must be kept."""
    torch.manual_seed(0)
    model = GPT(cfg)
    if earlier is not None:
        _, earlier_loss = model(torch.cat([b[0] for b in earlier]), torch.cat([b[1] for b in earlier]))
        earlier_loss.backward()
    held = _gradients(model) if earlier is not None else 0.0
    big = copy.deepcopy(model)
    big.zero_grad()
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    _, big_loss = big(x, y)  # the mean over every counted target of the window
    big_loss.backward()
    window = _gradients(big)
    want = held + window

    loss = answers.accumulate_gradients(model, batches)
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None for g in grads), "call backward() on each micro-batch's loss (and do not zero the grads)"
    got = torch.cat([g.flatten() for g in grads])
    ratio = ((got - held) @ window / (window @ window)).item()
    # fp32: the micro-batches sum the same terms in another order, an error of about 1e-6 relative.
    error = ((got - want).norm() / want.norm()).item()
    hint = ""
    if earlier is not None and ((got - window).norm() / window.norm()).item() < 1e-4:
        hint = (
            " - the gradients the model held before the call are gone: backward adds to them, and "
            "accumulate_gradients must not zero them"
        )
    elif abs(ratio - len(batches)) < 0.05 * len(batches):
        hint = f" - {len(batches)}x: divide each micro-batch's loss before backward (no division by accum?)"
    elif error > 1e-4 and any((b[1] == IGNORE_INDEX).any() for b in batches):
        hint = (
            " - with padding, a mean of per-micro-batch means over-weights short micro-batches: divide each "
            "summed loss by the number of counted targets in the whole window"
        )
    elif error > 1e-4:
        hint = " - every micro-batch's gradients must add up: backward adds to them, do not zero them in between"
    assert error < 1e-4, f"accumulated gradients are {ratio:.3f}x one big batch's (relative error {error:.2e}){hint}"
    assert isinstance(loss, float), f"returned {loss!r}: return the loss as a Python float (.item()), not a tensor"
    assert loss == pytest.approx(big_loss.item(), rel=1e-5), (
        f"returned loss {loss:.5f}, one big batch's mean loss is {big_loss.item():.5f}"
    )


@pytest.mark.exercise("5.1", points=2)
def test_equal_micro_batches_match_one_big_batch(answers, small_cfg):
    # The model already holds the gradients of an earlier window: accumulation adds to them.
    _check_against_one_big_batch(answers, small_cfg, _window(small_cfg), earlier=_window(small_cfg, seed=5))


@pytest.mark.exercise("5.1", points=2)
def test_padded_micro_batches_are_normalized_by_tokens(answers, small_cfg):
    # The last micro-batches are mostly padding, as at the end of a document-packed epoch.
    batches = _window(small_cfg, padding=[0, 0, 12, 15], seed=1)
    _check_against_one_big_batch(answers, small_cfg, batches)


@pytest.mark.exercise("5.2", points=1)
def test_effective_batch(answers):
    for micro, accum, world, want in ((8, 4, 1, 32), (8, 4, 2, 64), (32, 1, 1, 32), (3, 5, 7, 105)):
        got = answers.effective_batch(micro, accum, world_size=world)
        assert got == want, (
            f"effective_batch({micro}, {accum}, world_size={world}) returned {got} sequences, expected {want}: "
            f"each of {world} processes runs {accum} micro-batches of {micro} sequences"
        )


@pytest.mark.exercise("5.2", points=2)
def test_accum_for(answers):
    for target, micro, world, want in ((128, 32, 1, 4), (128, 8, 4, 4), (16, 16, 1, 1), (105, 3, 7, 5)):
        got = answers.accum_for(target, micro, world_size=world)
        assert got == want, (
            f"accum_for({target}, {micro}, world_size={world}) returned {got} accumulation steps, expected {want} "
            f"= {target} / ({micro} x {world})"
        )
    for target, micro, world in ((100, 32, 1), (128, 48, 1), (128, 32, 3), (128, 32, 0), (128, 32, -1)):
        with pytest.raises(ValueError):
            answers.accum_for(target, micro, world_size=world)
            pytest.fail(
                f"accum_for({target}, {micro}, world_size={world}) should raise ValueError: "
                + ("not a multiple" if world > 0 else "no run has fewer than 1 process")
            )


ROW_KEYS = ("accum", "micro_batch", "seconds", "final_loss", "predicted_peak_bytes", "measured_peak_bytes")
# Result paths compared by type only (fnmatch patterns: a "[" would open a character class, so none is used).
TIMES = ("*'seconds'*", "*'started'*", "*'finished'*", "result?'called'*", "result?'returned'*")


@functools.cache
def _markov_data() -> TokenData:
    """Tokens of the presets' 8192-token vocabulary from a sparse Markov chain: learnable, and small to send."""
    rng = np.random.default_rng(5)
    successors = rng.integers(0, 8192, size=(8192, 4))  # each token has 4 likely next tokens
    choices = rng.integers(0, 4, size=6_000)
    tokens = np.empty(6_000, dtype=np.uint16)
    tokens[0] = 0
    for i in range(1, len(tokens)):
        tokens[i] = successors[tokens[i - 1], choices[i]]
    return TokenData(train=tokens[:5_000], val=tokens[5_000:], tokenizer="minigpt-8k", source="markov")


def _compare_drive(function, **kwargs):
    """In the worker: compare_accumulation(**kwargs), watching each training run (the rows as _named_keys reads
    them)."""
    answers = sys.modules[function.__module__]
    with train_runs(answers) as runs:
        called = now()
        rows = function(**kwargs)
        returned = now()
    return {"rows": _named_keys(rows), "runs": runs, "called": called, "returned": returned}


def _named_keys(rows):
    """The rows, each with the keys the exercise names (an extra key is no mistake); a missing one reads
    "(missing)"."""
    return [{key: row.get(key, "(missing)") for key in ROW_KEYS} for row in rows]


def _rows_drive(function, **kwargs):
    """In the worker: compare_accumulation(**kwargs), its rows read by the keys the exercise names."""
    return _named_keys(function(**kwargs))


def _compare_case() -> Case:
    # Every argument but device (a CPU is all a grader has) away from its default, the accums in descending order,
    # on the tiny-deep preset: an ignored preset, ctx, data, steps or order shows in the runs and the losses. Two
    # fp32 training steps of a small model: rtol 1e-4 covers another CPU's kernels. Times: compared by type only.
    kwargs = dict(effective=4, accums=(4, 1), preset="tiny-deep", ctx=16, steps=2, device="cpu")
    return Case(
        "compare_accumulation", (), {**kwargs, "data": _markov_data()}, rtol=1e-4, ignore=TIMES, drive=_compare_drive
    )


@pytest.mark.exercise("5.3", points=3)
def test_compare_accumulation(answers, contract):
    seen = contract.run(answers, _compare_case())
    rows, train_runs = seen["rows"], seen["runs"]
    assert [r["accum"] for r in rows] == [4, 1], "one row per accum, in the order given"
    assert len(train_runs) == len(rows), f"{len(train_runs)} calls of minigpt.train.train for {len(rows)} rows"
    for r, run in zip(rows, train_runs):
        assert (run["batch"], run["accum"], run["ctx"], run["steps"]) == (r["micro_batch"], r["accum"], 16, 2), (
            f"the run for accum={r['accum']} trained with batch={run['batch']}, accum={run['accum']}, "
            f"ctx={run['ctx']}, steps={run['steps']}; expected batch={r['micro_batch']} (the micro-batch), "
            f"accum={r['accum']}, ctx=16, steps=2"
        )
        # The row reports that run: its last loss exactly.
        assert r["final_loss"] == run["losses"][-1], (
            f"accum={r['accum']}: final_loss {r['final_loss']!r}, but the run's losses were {run['losses']}: report "
            f"the last one (result.losses[-1])"
        )
    check_run_times(rows, seen, "accum")
    for r in rows:
        assert r["micro_batch"] * r["accum"] == 4, f"micro_batch x accum must be the effective batch: {r}"
        assert r["seconds"] > 0 and math.isfinite(r["final_loss"]), f"bad time or loss in {r}"
        want = memory.estimate(get_config("tiny-deep"), r["micro_batch"], 16, device="cpu").peak
        assert r["predicted_peak_bytes"] == want, "predicted_peak_bytes: estimate(config, micro_batch, ctx).peak"
        assert r["measured_peak_bytes"] is None, "a CPU has no peak-memory counter: report None"
    peaks = [r["predicted_peak_bytes"] for r in sorted(rows, key=lambda r: r["accum"])]
    assert peaks == sorted(peaks, reverse=True) and peaks[0] > peaks[-1], "smaller micro-batches need less memory"
    # The same sequences in every run, split differently: accumulation is exact up to the order of fp32 sums.
    losses = [r["final_loss"] for r in rows]
    assert max(losses) - min(losses) < 1e-3, f"the same effective batch should give the same loss: {losses}"


# ----------------------------------------------------------------------------------------------------------
# The contracts: each exercise's whole promise, checked against the reference on inputs the learner did not choose

# Small enough to run in milliseconds, with activations that outweigh the weights: 3 micro-batches of 4 x 32
# tokens keep about 140 KiB of activations each, the weights (and so their gradients) are 34 KiB.
WIDE = ModelConfig(n_layer=2, n_head=2, n_embd=16, ctx=32, vocab_size=32)
# Another shape (3 layers, 4 heads, another width and vocabulary) for the cases without a peak.
DEEP = ModelConfig(n_layer=3, n_head=4, n_embd=24, ctx=12, vocab_size=20)
# The gradients' values: the micro-batches sum the same terms as the reference in another order (and another CPU
# reduces in another order): about 1e-8 absolute on gradients up to 3e-2 here, so rtol 1e-4 and atol 2e-7 (a
# wrong weighting is off by 10% or more). The loss, a sum of fp32 losses, is well within rtol 1e-4 too.
GRADS = dict(rtol=1e-4, atol=2e-7)
# One micro-batch's activations at a time: the reference's peak is one micro-batch's graph plus the gradients.
# Keeping all 3 graphs (the losses summed with one backward, or each kept with retain_graph) is 2.7x that; each
# kept until the next forward is done (retain_graph alone) 1.8x. Within 0.75x..1.3x: an honest answer may keep the
# last logits (16 KiB here) or a loss tensor a little longer.
ONE_GRAPH = (0.75, 1.3)
ACCUMULATE_RETURNS = "Returns: a float, the window's mean loss per counted target (what one big batch's loss would be)."
ACCUMULATE_IN_PLACE = (
    "In place: adds the window's gradients into the .grad of each parameter that requires grad; gradients already "
    "there are kept and added to, not zeroed. The weights and the micro-batches are left as given (no optimizer "
    "step)."
)
ACCUMULATE_RAISES = (
    "Raises: ValueError if micro_batches is empty or every target in it is IGNORE_INDEX (nothing to learn from)."
)


def _micro_batches(cfg, sizes, ignored=(), seed=0):
    """Micro-batches of sizes[i] sequences of random tokens; ignored[i] is the fraction of micro-batch i's targets
    set to IGNORE_INDEX, at random places (1.0: all of them)."""
    gen = torch.Generator().manual_seed(seed)
    batches = []
    for i, size in enumerate(sizes):
        tokens = torch.randint(0, cfg.vocab_size, (size, cfg.ctx + 1), generator=gen)
        x, y = tokens[:, :-1].clone(), tokens[:, 1:].clone()
        fraction = ignored[i] if i < len(ignored) else 0.0
        if fraction:
            y[torch.rand(y.shape, generator=gen) < fraction] = IGNORE_INDEX
        batches.append((x, y))
    return batches


def _model(cfg, seed=0, frozen=()):
    model = GPT(cfg, seed=seed)
    for name, p in model.named_parameters():
        p.requires_grad_(not any(name.startswith(f) for f in frozen))
    return model


def _with_gradients_held(function, model, micro_batches):
    """In the worker: give every parameter that requires grad a gradient of its own first (an earlier window of
    the same optimizer step), then accumulate: the gradients already there must be added to."""
    gen = torch.Generator().manual_seed(11)
    for p in model.parameters():
        if p.requires_grad:
            p.grad = torch.randn(p.shape, generator=gen) * 1e-2
    return function(model, micro_batches)


class Calls(list):
    """A list of (args, kwargs), shown as how many there are in a grader's message (each outcome names its call)."""

    def __repr__(self) -> str:
        return f"<{len(self)} calls>"


def _each_call(function, calls):
    """In the worker: function(*args, **kwargs) for each (args, kwargs) in calls, as {the call: "returns <value>"
    or "raises <its builtin kind>"}: many small calls in one case, compared like the rest (an int is not a float)."""
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


def _cases_5_1() -> list[Case]:
    deep = _model(DEEP, seed=3)
    frozen = _model(DEEP, seed=4, frozen=("tok_emb", "blocks.1.mlp"))  # tied: the head is frozen with it
    return [
        # Equal micro-batches: the gradients, the loss, and one micro-batch's graph at a time.
        Case(
            "accumulate_gradients",
            (_model(WIDE), _micro_batches(WIDE, [4, 4, 4])),
            **GRADS,
            peak=ONE_GRAPH,
            promise=(ACCUMULATE_RETURNS, ACCUMULATE_IN_PLACE),
        ),
        # Micro-batches of different sizes (dividing each mean by the number of micro-batches is wrong even without
        # padding), and gradients already held when the call begins: added to, not replaced.
        Case(
            "accumulate_gradients", (deep, _micro_batches(DEEP, [3, 1, 2], seed=2)), **GRADS, drive=_with_gradients_held
        ),
        # Padding at random places, a micro-batch mostly padding and one all padding (its mean would be 0 / 0);
        # some weights frozen (no gradient for them), the others holding gradients.
        Case(
            "accumulate_gradients",
            (frozen, _micro_batches(DEEP, [2, 2, 2, 1], ignored=[0.1, 0.9, 1.0, 0.3], seed=3)),
            **GRADS,
            drive=_with_gradients_held,
        ),
        # Nothing to learn from: an error, not a division by zero, and no gradient touched.
        Case(
            "accumulate_gradients",
            (deep, _micro_batches(DEEP, [2, 1], ignored=[1.0, 1.0], seed=5)),
            promise=ACCUMULATE_RAISES,
        ),
        Case("accumulate_gradients", (deep, []), promise=ACCUMULATE_RAISES),
    ]


def _cases_5_2() -> list[Case]:
    effective_raises = (
        "Raises: ValueError if micro_batch, accum or world_size is below 1 (a run has at least one of each)."
    )
    accum_sizes = (
        "Raises: ValueError if target_batch, micro_batch or world_size is below 1 (a run has at least one process)."
    )
    accum_divides = (
        "Raises: ValueError if target_batch is not a multiple of micro_batch x world_size (say which numbers do not "
        "divide): a rounded accum would silently train on another batch size."
    )
    # Non-positive sizes, some of which a check of the product or a modulo alone lets through: -2 x 3 x -1 is 6,
    # 8 % -4 == 0 and -4 x -2 is 8. Not a multiple: 12 is a multiple of 4 and of 2 but not of 4 x 2; 8 is below
    # one round of 16; 128 is a multiple of 32 but not of 32 x 3.
    effective_calls = [((8, 4), {}), ((1, 1), {"world_size": 1}), ((6, 1), {"world_size": 2})]
    effective_calls += [((m, a), {"world_size": w}) for m, a, w in ((4, 0, 1), (4, 2, 0), (-2, 3, -1), (2, -3, 2))]
    effective_calls += [((m, a), {"world_size": w}) for m, a, w in ((-1, -1, 1), (5, 2, -4))]
    accum_calls = [((128, 32), {}), ((16, 16), {"world_size": 1}), ((48, 4), {"world_size": 3})]
    accum_calls += [((24, 4), {"world_size": 6}), ((7, 1), {"world_size": 1})]  # accum 1: one round is the target
    accum_calls += [((t, m), {"world_size": w}) for t, m, w in ((-8, 4, 1), (8, -4, 1), (8, -4, -2), (8, 0, 1))]
    accum_calls += [((t, m), {"world_size": w}) for t, m, w in ((8, 4, 0), (8, 2, -1), (100, 32, 1), (128, 48, 1))]
    accum_calls += [((t, m), {"world_size": w}) for t, m, w in ((128, 32, 3), (8, 4, 4), (30, 7, 1))]
    return [
        Case(
            "effective_batch",
            (3, 5),
            {"world_size": 7},
            promise=("Returns: an int, micro_batch x accum x world_size.", "In place: nothing."),
        ),
        Case("effective_batch", (0, 4), {"world_size": 1}, promise=effective_raises),
        Case("effective_batch", (Calls(effective_calls),), drive=_each_call),
        Case(
            "accum_for",
            (105, 3),
            {"world_size": 7},
            promise=("Returns: an int, target_batch / (micro_batch x world_size).", "In place: nothing."),
        ),
        Case("accum_for", (0, 4), {"world_size": 1}, promise=accum_sizes),
        Case("accum_for", (12, 4), {"world_size": 2}, promise=accum_divides),
        Case("accum_for", (Calls(accum_calls),), drive=_each_call),
    ]


def _cases_5_3() -> list[Case]:
    # The first case is the experiment of test_compare_accumulation, which runs it (once there, not here).
    raises = (
        "Raises: ValueError if effective is below 1, accums is empty, or an accum is below 1 or does not divide "
        "effective (all checked before any training: a rounded micro-batch would train on another batch)."
    )
    cheap = dict(preset="tiny", ctx=4, steps=1, device="cpu", data=_markov_data())
    refused = [((), {"effective": e, "accums": a, **cheap}) for e, a in ((4, (1, 3)), (4, ()), (4, (0,)), (4, (-2,)))]
    refused += [((), {"effective": 0, "accums": (1,), **cheap})]
    return [
        _compare_case(),
        # The cheapest run there is: what it returns, and that it changes nothing it is given.
        Case(
            "compare_accumulation",
            (),
            {"effective": 1, "accums": (1,), **cheap},
            rtol=1e-4,  # one fp32 training step
            ignore=("*'seconds'*",),
            drive=_rows_drive,
            promise=(
                "Returns: a list of dicts, one per accum in the order given, each with the keys accum, micro_batch, "
                "seconds, final_loss, predicted_peak_bytes and measured_peak_bytes.",
                "In place: nothing.",
            ),
        ),
        Case("compare_accumulation", (), {"effective": 6, "accums": (4,), **cheap}, promise=raises),
        Case("compare_accumulation", (Calls(refused),), drive=_each_call),
    ]


CONTRACTS = {"5.1": _cases_5_1, "5.2": _cases_5_2, "5.3": _cases_5_3}


@pytest.mark.exercise("5.1", points=1)
def test_5_1_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["5.1"]())


@pytest.mark.exercise("5.2", points=1)
def test_5_2_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["5.2"]())


@pytest.mark.exercise("5.3", points=1)
def test_5_3_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["5.3"]()[1:])  # the first: test_compare_accumulation
