"""Grades chapter 8: per-rank bytes under each shard mode, the flat shard a rank owns, and averaging
gradients across processes (run in 2 real gloo processes on the CPU).
"""

import datetime
import functools
import importlib.util
import math
import os
import socket
import tempfile
import traceback
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

CHAPTER = "ch08_sharding"
HINTS = {  # the hints of solutions/ch08_sharding.py, shown under a wrong answer
    "8.1": "a split state holds ceil(n_params / world) parameters' worth; the others all of them",
    "8.2": "shard_size = ceil(numel / world); clip both ends to numel; padding fills up to shard_size",
    "8.3": "all_reduce (a sum, in place) each p.grad, then divide it by dist.get_world_size()",
}
STATES = ("weights", "gradients", "optimizer")
MIXED = {"weights": 4, "gradients": 4, "optimizer": 8}  # fp32 weights and grads, AdamW's m and v


# ----------------------------------------------------------------------------------------------------------
# 8.1 per_rank_state_bytes


@pytest.mark.exercise("8.1", points=3)
def test_per_rank_bytes_of_each_mode(answers):
    n, world = 1_000_000, 4  # divides evenly: no padding
    expected = {
        "none": {"weights": 4 * n, "gradients": 4 * n, "optimizer": 8 * n},
        "zero1": {"weights": 4 * n, "gradients": 4 * n, "optimizer": 8 * n // world},
        "zero2": {"weights": 4 * n, "gradients": 4 * n // world, "optimizer": 8 * n // world},
        "fsdp": {"weights": 4 * n // world, "gradients": 4 * n // world, "optimizer": 8 * n // world},
    }
    for shard, want in expected.items():
        got = answers.per_rank_state_bytes(n, MIXED, shard, world)
        assert set(got) == set(STATES), f"return a dict with the keys {STATES}, got {sorted(got)}"
        for state in STATES:
            assert got[state] == want[state], (
                f"{shard} on {world} processes, {n:,} parameters: each rank holds {want[state]:,} bytes of "
                f"{state}, your answer says {got[state]:,} (only the states {shard} splits are divided by {world})"
            )
    one = answers.per_rank_state_bytes(n, MIXED, "fsdp", 1)
    assert one == expected["none"], f"one process holds everything whatever the mode: expected {expected['none']}"


@pytest.mark.exercise("8.1", points=1)
def test_per_rank_bytes_round_the_shard_up(answers):
    # 10 parameters over 4 ranks: shards of ceil(10 / 4) = 3 (the last padded), not 10 / 4 = 2.5 or 2
    got = answers.per_rank_state_bytes(10, {"weights": 2, "gradients": 2, "optimizer": 12}, "fsdp", 4)
    assert got == {"weights": 6, "gradients": 6, "optimizer": 36}, (
        f"10 parameters on 4 ranks: every rank holds a padded shard of ceil(10 / 4) = 3 parameters, so "
        f"6 / 6 / 36 bytes; got {got} (round the shard up, then multiply by the bytes per parameter)"
    )
    assert all(isinstance(v, int) for v in got.values()), f"bytes are whole numbers: return ints, got {got}"
    with pytest.raises(ValueError):
        answers.per_rank_state_bytes(10, MIXED, "zero4", 2)
        pytest.fail("per_rank_state_bytes(..., shard='zero4', ...) returned: raise ValueError for an unknown mode")
    for world in (0, -2):
        with pytest.raises(ValueError):
            got = answers.per_rank_state_bytes(10, MIXED, "none", world)
            pytest.fail(
                f"per_rank_state_bytes(..., world={world}) returned {got}: raise ValueError, a run has 1 or more"
            )


# ----------------------------------------------------------------------------------------------------------
# 8.2 flat_shard_range


def _ranges(answers, numel, world):
    return [tuple(answers.flat_shard_range(numel, rank, world)) for rank in range(world)]


@pytest.mark.exercise("8.2", points=3)
def test_shards_cover_the_tensor_once(answers):
    for numel, world in ((12, 4), (10, 4), (7, 2), (1000, 3), (5, 4), (3, 8)):
        ranges = _ranges(answers, numel, world)
        size = math.ceil(numel / world)
        owners = [0] * numel
        for rank, (start, end, padding) in enumerate(ranges):
            assert 0 <= start <= end <= numel, (
                f"numel={numel}, world={world}: rank {rank} got [{start}, {end}), which is not a slice of the "
                f"tensor (0 <= start <= end <= {numel})"
            )
            assert (end - start) + padding == size, (
                f"numel={numel}, world={world}: every rank holds ceil({numel} / {world}) = {size} elements; "
                f"rank {rank} holds {end - start} + {padding} padding"
            )
            for i in range(start, end):
                owners[i] += 1
        lost = [i for i, n in enumerate(owners) if n != 1]
        assert not lost, (
            f"numel={numel}, world={world}: elements {lost[:5]} belong to {[owners[i] for i in lost[:5]]} "
            f"ranks each, not exactly one; your ranges: {ranges}"
        )


@pytest.mark.exercise("8.2", points=1)
def test_shard_range_examples(answers):
    want = {
        (10, 4): [(0, 3, 0), (3, 6, 0), (6, 9, 0), (9, 10, 2)],  # the last shard is padded
        (5, 4): [(0, 2, 0), (2, 4, 0), (4, 5, 1), (5, 5, 2)],  # the last rank holds only padding
    }
    for (numel, world), expected in want.items():
        got = _ranges(answers, numel, world)
        assert got == expected, f"numel={numel}, world={world}: expected {expected}, got {got}"


# ----------------------------------------------------------------------------------------------------------
# 8.3 average_gradients, in 3 real processes (a world other than 2: nothing may assume 2)

WORLD = 3


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    model.unused = torch.nn.Parameter(torch.ones(2))  # never in the loss: its grad stays None
    return model


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(12, 8, generator=g), torch.randint(0, 3, (12,), generator=g)  # 12: equal parts for 2, 3, 4


def _rank_worker(answers_path: str) -> dict:
    """In each gloo process: the gradients of this rank's part of the batch, after average_gradients, and
    whether each gradient is still the tensor it was (averaged in place).

    An error is returned (as text), not raised, so that the grader can tell "not done" from a bug.
    """
    # A collective that only some ranks call waits for the others forever: give up after 20 s, so that such an
    # answer fails with a message instead of hanging the grader (a correct answer takes well under a second).
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
    try:
        spec = importlib.util.spec_from_file_location("answers_ch08_sharding", answers_path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        model, (x, y) = _model(), _batch()
        rank, world = dist.get_rank(), dist.get_world_size()
        mine = slice(rank * len(x) // world, (rank + 1) * len(x) // world)
        torch.nn.functional.cross_entropy(model(x[mine]), y[mine]).backward()
        local = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        tensors = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
        module.average_gradients(model)
        grads = {name: None if p.grad is None else p.grad.clone() for name, p in model.named_parameters()}
        in_place = {name: p.grad is tensors[name] for name, p in model.named_parameters() if name in tensors}
        return {"local": local, "grads": grads, "in_place": in_place}
    except Exception as error:  # noqa: BLE001 - reported to the parent, which raises it there
        return {"error": type(error).__name__, "message": str(error), "traceback": traceback.format_exc()}
    finally:
        dist.destroy_process_group()


def _rank_process(rank: int, world: int, port: int, answers_path: str, out_dir: str) -> None:
    """One rank, forked from the exercise's worker: it has torch imported already, so it starts at once."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    done = Path(out_dir) / f"rank{rank}.pt"
    torch.save(_rank_worker(answers_path), done.with_suffix(".partial"))
    os.replace(done.with_suffix(".partial"), done)  # the whole result, or no file
    os._exit(0)  # at once: an orderly shutdown can let gloo's threads abort the process


@functools.cache
def _ranks_in_worker(answers_path: str, world: int) -> list[dict]:
    """Every rank's result, from `world` processes joined by gloo (once per worker: both tests read it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as out_dir:
        done = [Path(out_dir) / f"rank{rank}.pt" for rank in range(world)]
        try:
            args = (world, port, answers_path, out_dir)
            torch.multiprocessing.start_processes(_rank_process, args=args, nprocs=world, start_method="fork")
        except torch.multiprocessing.ProcessExitedException:
            if not all(path.exists() for path in done):  # a rank died before its result was saved
                raise
        return [torch.load(path, weights_only=False) for path in done]


def _ranks_watched(answers, world: int) -> list[dict]:
    """In the worker: every rank's result, from `world` processes (run once per worker)."""
    return _ranks_in_worker(answers.__file__, world)


def _all_ranks(answers) -> list[dict]:
    """Every rank's result; a rank's error raised here, in the grader."""
    ranks = answers.run(_ranks_watched, WORLD)
    for rank, result in enumerate(ranks):
        if "error" in result:
            if result["error"] == "NotImplementedError":
                raise NotImplementedError(result["message"])
            yours = [
                line.strip() for line in result["traceback"].splitlines() if "answers_ch08" in line or "ch08_" in line
            ]
            raise AssertionError(
                f"average_gradients raised {result['error']} on rank {rank}: {result['message'][:300]}\n"
                + (f"  at {yours[-1]}\n" if yours else "")
                + "  (a collective must be called by every rank, on the same tensors, in the same order)"
            )
    return ranks


def _one_process_grads() -> dict:
    model, (x, y) = _model(), _batch()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    return {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.exercise("8.3", points=3)
def test_averaged_gradients_equal_one_process_on_the_whole_batch(answers):
    ranks, reference = _all_ranks(answers), _one_process_grads()
    for rank, result in enumerate(ranks):
        for name, want in reference.items():
            got = result["grads"][name]
            # Equal parts: the mean of the ranks' part-batch means is the whole batch's mean. Only the order of
            # the fp32 sums differs, ~1e-7 of values near 0.1; 1e-5 leaves room and still tells a sum (3x), a
            # division by 2, one rank's gradient or an unchanged gradient apart, which differ by 1e-2 or more.
            assert torch.allclose(got, want, rtol=1e-4, atol=1e-5), (
                f"rank {rank} of {WORLD}, {name}: after average_gradients the gradient should equal one process's "
                f"on the whole batch (the mean of the {WORLD} ranks' gradients); it is off by "
                f"{(got - want).abs().max():.3g} (ratio of norms {got.norm() / want.norm():.3f}) - divide by "
                f"dist.get_world_size(), whatever it is"
            )


@pytest.mark.exercise("8.3", points=1)
def test_every_rank_ends_with_the_same_gradients(answers):
    ranks = _all_ranks(answers)
    for name, grad in ranks[0]["grads"].items():
        for rank, result in enumerate(ranks[1:], start=1):
            other = result["grads"][name]
            if grad is None or other is None:
                assert grad is None and other is None, f"{name}: a parameter without a gradient keeps grad None"
                continue
            assert torch.equal(grad, other), (
                f"{name}: ranks 0 and {rank} end with different gradients (max difference "
                f"{(grad - other).abs().max():.3g}): the optimizer would then move their copies apart"
            )
    changed = any(not torch.equal(ranks[0]["local"][n], g) for n, g in ranks[0]["grads"].items() if g is not None)
    assert changed, "rank 0's gradients are the ones its own part of the batch gave: nothing was averaged"
    replaced = sorted({name for r in ranks for name, same in r["in_place"].items() if not same})
    assert not replaced, (
        f"{replaced}: p.grad is a new tensor after average_gradients; average each gradient in place (all_reduce "
        f"into p.grad, then p.grad /= world): whatever holds the gradient tensor (DDP's buckets, an optimizer "
        f"hook) must see the average"
    )
