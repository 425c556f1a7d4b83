"""Grades chapter 5: token-normalized accumulation, the effective-batch arithmetic, and accum 1/4/16 at a fixed
effective batch."""

import copy
import math

import pytest
import torch

from minigpt import memory
from minigpt.grading.watch import check_run_times, now, train_runs
from minigpt.model import GPT, IGNORE_INDEX, get_config

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


def _compare_watched(answers, **kwargs):
    """In the worker: compare_accumulation(**kwargs), watching each training run."""
    with train_runs(answers) as runs:
        called = now()
        rows = answers.compare_accumulation(**kwargs)
        returned = now()
    return {"rows": rows, "runs": runs, "called": called, "returned": returned}


@pytest.mark.exercise("5.3", points=3)
def test_compare_accumulation(answers, token_data):
    seen = answers.run(
        _compare_watched, effective=4, accums=(1, 2, 4), preset="tiny", ctx=16, steps=2, device="cpu", data=token_data
    )
    rows, train_runs = seen["rows"], seen["runs"]
    assert [r["accum"] for r in rows] == [1, 2, 4], "one row per accum, in the order given"
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
        want = memory.estimate(get_config("tiny"), r["micro_batch"], 16, device="cpu").peak
        assert r["predicted_peak_bytes"] == want, "predicted_peak_bytes: estimate(config, micro_batch, ctx).peak"
        assert r["measured_peak_bytes"] is None, "a CPU has no peak-memory counter: report None"
    peaks = [r["predicted_peak_bytes"] for r in rows]
    assert peaks == sorted(peaks, reverse=True) and peaks[0] > peaks[-1], "smaller micro-batches need less memory"
    # The same sequences in every run, split differently: accumulation is exact up to the order of fp32 sums.
    losses = [r["final_loss"] for r in rows]
    assert max(losses) - min(losses) < 1e-3, f"the same effective batch should give the same loss: {losses}"
