"""Grades chapter 8: per-rank bytes under each shard mode, the flat shard a rank owns, and averaging
gradients across processes (run in 2 real gloo processes on the CPU).
"""

import copy
import datetime
import functools
import importlib.util
import inspect
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
            assert all(type(v) is int for v in (start, end, padding)), (
                f"numel={numel}, world={world}: rank {rank} got {(start, end, padding)}: return whole numbers (int)"
            )
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
    _refuse_ops_gloo_lacks()
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
            if name not in ranks[0]["local"]:
                assert grad is None and other is None, (
                    f"{name} had no gradient on any rank (it is not in the loss): it keeps grad None, got "
                    f"{'a tensor' if grad is not None else 'None'} on rank 0 and "
                    f"{'a tensor' if other is not None else 'None'} on rank {rank}"
                )
                continue
            assert torch.equal(grad, other), (
                f"{name}: ranks 0 and {rank} end with different gradients (max difference "
                f"{(grad - other).abs().max():.3g}): the optimizer would then move their copies apart"
            )
    for name, local in ranks[0]["local"].items():
        mean = sum(r["local"][name] for r in ranks) / len(ranks)
        got = ranks[0]["grads"][name]
        # The same fp32 mean summed in another order: ~1e-7 of the values; a sum, a single rank's gradient or a
        # mean over the wrong count is off by far more than this.
        assert torch.allclose(got, mean, rtol=1e-5, atol=1e-7), (
            f"{name}: every rank holds the same gradient, but not the mean of the {len(ranks)} ranks' own (off by "
            f"{(got - mean).abs().max():.3g}"
            + ("; it is rank 0's own: nothing was averaged)" if torch.equal(got, local) else ")")
        )
    replaced = sorted({name for r in ranks for name, same in r["in_place"].items() if not same})
    assert not replaced, (
        f"{replaced}: p.grad is a new tensor after average_gradients; average each gradient in place (all_reduce "
        f"into p.grad, then p.grad /= world): whatever holds the gradient tensor (DDP's buckets, an optimizer "
        f"hook) must see the average"
    )


# ----------------------------------------------------------------------------------------------------------
# Contracts: the answer against the reference on inputs the learner did not choose (minigpt.grading.contract)

from minigpt.grading.contract import Case  # noqa: E402

NOTHING_IN_PLACE = "In place: nothing."


def _unchanged_plain_args(function, *args, **kwargs):
    """function(*args, **kwargs), and a check that it left its plain arguments (the dict of bytes per parameter)
    as they were: the contract sees a change to a tensor, not to a dict."""
    before = copy.deepcopy((args, kwargs))
    result = function(*args, **kwargs)
    if (args, kwargs) != before:
        raise AssertionError(f"the call changed its arguments: {before} became {(args, kwargs)}; leave them as given")
    return result


def _cases_8_1() -> list[Case]:
    returns = (
        'Returns: a dict {"weights": int, "gradients": int, "optimizer": int}: the parameters\' worth this process '
        "holds of each state times that state's bytes per parameter, rounded to the nearest whole byte with round() "
        "(a half goes to the even neighbour: 2.5 -> 2), never truncated."
    )
    # Bytes per parameter: whole, fractional with halves (the rounding of ties shows), fractional that truncation
    # and rounding tell apart (0.875 x 3 = 2.625), floats that are whole (the result is still an int), and a key
    # that is not a state. All are exact in binary, so every order of the multiplication gives the same bytes.
    fractional = {"weights": 0.5, "gradients": 1.5, "optimizer": 2.25}
    sevenths = {"weights": 0.875, "gradients": 0.375, "optimizer": 4.125}
    whole_floats = {"weights": 2.0, "gradients": 2.0, "optimizer": 12.0}
    extra_key = {"weights": 2, "gradients": 2, "optimizer": 12, "activations": 30}
    cases = [
        Case(
            "per_rank_state_bytes",
            (10, fractional, "zero2", 4),
            drive=_unchanged_plain_args,
            promise=(returns, NOTHING_IN_PLACE),
        )
    ]
    for n_params, bytes_per_param, world in (
        (1_000_003, MIXED, 4),  # a prime: no world divides it evenly
        (10, fractional, 4),  # shards of 3: 1.5 -> 2, 4.5 -> 4, 6.75 -> 7; whole: 5, 15, 22.5 -> 22
        (7, sevenths, 3),  # shards of 3: 2.625 -> 3, 1.125 -> 1, 12.375 -> 12
        (13, whole_floats, 5),
        (3, extra_key, 8),  # fewer parameters than processes: shards of 1
        (6, MIXED, 1),  # one process holds everything, whatever the mode
        (0, MIXED, 3),  # no parameters
    ):
        cases.append(Case("per_rank_state_bytes", (n_params, bytes_per_param, world), drive=_every_mode))
    raises_mode = "Raises: ValueError if shard is not a mode of SHARDED_STATES."
    raises_world = "Raises: ValueError if world < 1 or n_params < 0."
    raises_key = 'Raises: KeyError if bytes_per_param lacks one of "weights", "gradients" and "optimizer".'
    cases += [
        Case("per_rank_state_bytes", (10, MIXED, "zero3", 2), promise=raises_mode),
        Case("per_rank_state_bytes", (10, MIXED, "zero1", 0), promise=raises_world),
        Case("per_rank_state_bytes", (-5, MIXED, "fsdp", 2), promise=raises_world),
        Case("per_rank_state_bytes", (10, {"weights": 2, "optimizer": 8}, "none", 2), promise=raises_key),
    ]
    return cases


def _every_mode(function, n_params: int, bytes_per_param: dict, world: int) -> dict:
    """function(n_params, bytes_per_param, shard, world) for every shard mode, each call checked to leave
    bytes_per_param as it was: {shard: bytes}."""
    return {
        shard: _unchanged_plain_args(function, n_params, bytes_per_param, shard, world)
        for shard in ("none", "zero1", "zero2", "fsdp")
    }


def _every_rank(function, numel: int, world: int) -> list:
    """function(numel, rank, world) for every rank: the whole split at once."""
    return [function(numel, rank, world) for rank in range(world)]


def _cases_8_2() -> list[Case]:
    returns = (
        "Returns: a tuple of three ints (start, end, padding) with 0 <= start <= end <= numel and (end - start) + "
        "padding == shard_size."
    )
    cases = [
        # A rank on its own (the last, padded), then every rank of splits that divide, do not, leave the last ranks
        # only padding, have no elements, or one process
        Case("flat_shard_range", (10, 3, 4), promise=(returns, NOTHING_IN_PLACE)),
        Case("flat_shard_range", (3, 7, 8)),  # fewer elements than ranks: the last ones own nothing
    ]
    for numel, world in ((12, 4), (13, 4), (5, 4), (3, 8), (9, 5), (0, 3), (1, 1), (17, 1), (2, 2), (1_000_003, 7)):
        cases.append(Case("flat_shard_range", (numel, world), drive=_every_rank))
    cases += [
        Case("flat_shard_range", (10, 0, 0), promise="Raises: ValueError if world < 1."),
        Case("flat_shard_range", (10, 4, 4), promise="Raises: ValueError if rank is not one of 0, 1, ..., world - 1."),
        Case("flat_shard_range", (10, -1, 4), promise="Raises: ValueError if rank is not one of 0, 1, ..., world - 1."),
        Case("flat_shard_range", (-4, 0, 2), promise="Raises: ValueError if numel < 0."),
    ]
    return cases


# 8.3 in real processes: each case forks `world` ranks from the exercise's worker, joined by gloo on the CPU.


def _refuse_ops_gloo_lacks() -> None:
    """Make the reducing collectives refuse ReduceOp.AVG and PREMUL_SUM, as gloo does in older versions of torch
    (newer ones average): an answer must run on the learner's torch, whatever its version."""
    lacking = (dist.ReduceOp.AVG, dist.ReduceOp.PREMUL_SUM)
    for name in ("all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor", "all_reduce_coalesced"):
        original = getattr(dist, name, None)
        if original is None:
            continue
        signature = inspect.signature(original)

        def refusing(*args, _original=original, _signature=signature, **kwargs):
            op = _signature.bind(*args, **kwargs).arguments.get("op")
            if any(op == unsupported for unsupported in lacking):
                raise RuntimeError(f"Cannot use {op} with Gloo (gloo has no average in every torch version)")
            return _original(*args, **kwargs)

        setattr(dist, name, refusing)


def _rank_error(error: BaseException) -> dict:
    builtin = next(c.__name__ for c in type(error).__mro__ if c.__module__ == "builtins")
    return {"error": type(error).__name__, "builtin": builtin, "message": str(error)[:500]}


def _in_rank(rank: int, world: int, port: int, out_dir: str, work, args: tuple) -> None:
    """One forked rank: join the gloo group (15 s to meet: a collective only some ranks call fails, not hangs; a
    right answer takes well under a second, and the exercise's other runs leave room in its 60 s), run
    work(*args), save its result or its error, and leave at once (an orderly shutdown can let gloo abort)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
        _refuse_ops_gloo_lacks()
        result = {"result": work(*args)}
        dist.destroy_process_group()
    except Exception as error:  # noqa: BLE001 - the drive in the worker raises it there
        result = _rank_error(error)
    done = Path(out_dir) / f"rank{rank}.pt"
    try:
        torch.save(result, done.with_suffix(".partial"))
    except Exception as error:  # noqa: BLE001 - a result that torch.save cannot store
        torch.save(_rank_error(error), done.with_suffix(".partial"))
    os.replace(done.with_suffix(".partial"), done)
    os._exit(0)


def _on_ranks(world: int, work, *args) -> list:
    """work(*args) in `world` processes forked from here and joined by gloo; each rank's result. A rank's error
    is raised here: NotImplementedError as it is (not done), any other as a RuntimeError naming the rank."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as out_dir:
        done = [Path(out_dir) / f"rank{rank}.pt" for rank in range(world)]
        try:
            torch.multiprocessing.start_processes(
                _in_rank, args=(world, port, out_dir, work, args), nprocs=world, start_method="fork"
            )
        except torch.multiprocessing.ProcessExitedException:
            if not all(path.exists() for path in done):
                missing = [rank for rank, path in enumerate(done) if not path.exists()]
                raise RuntimeError(f"rank {missing[0]} of {world} ended before it finished") from None
        results = [torch.load(path, weights_only=False) for path in done]
    for rank, result in enumerate(results):
        if "error" in result:
            if result["error"] == "NotImplementedError":
                raise NotImplementedError(result["message"])
            raise RuntimeError(f"on rank {rank} of {world}: {result['error']}: {result['message']}")
    return [result["result"] for result in results]


def _average_in_rank(average_gradients, model: torch.nn.Module, grads: list[dict]) -> dict:
    """In a rank: give the model this rank's gradients, average them, and report what the model holds after."""
    rank = dist.get_rank()
    for name, p in model.named_parameters():
        p.grad = None if grads[rank][name] is None else grads[rank][name].clone()
    held = {name: p.grad for name, p in model.named_parameters()}
    returned = average_gradients(model)
    return {
        "returned": returned,
        "weights": {name: p.detach().clone() for name, p in model.named_parameters()},
        "grads": {name: None if p.grad is None else p.grad.detach().clone() for name, p in model.named_parameters()},
        "replaced": [
            name for name, p in model.named_parameters() if held[name] is not None and p.grad is not held[name]
        ],
    }


def _averaged_on_ranks(average_gradients, model: torch.nn.Module, grads: list[dict]):
    """average_gradients on len(grads) ranks, rank r starting from grads[r]; every rank must end with the same
    gradients, each in the tensor it had. The caller's model then holds what rank 0's holds (its weights and
    gradients: the contract compares them), and rank 0's return value is returned."""
    ranks = _on_ranks(len(grads), _average_in_rank, average_gradients, model, grads)
    for rank, result in enumerate(ranks):
        if result["replaced"]:
            raise AssertionError(
                f"rank {rank}: p.grad of {result['replaced']} is a new tensor after average_gradients: average each "
                f"gradient in place (all_reduce into p.grad, then p.grad /= world)"
            )
        for name, grad in result["grads"].items():
            first = ranks[0]["grads"][name]
            if (grad is None) != (first is None) or (grad is not None and not torch.equal(grad, first)):
                raise AssertionError(
                    f"ranks 0 and {rank} end with different gradients of {name}: every rank must hold the same mean"
                )
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(ranks[0]["weights"][name])
            p.grad = ranks[0]["grads"][name]
    return ranks[0]["returned"]


class _Net(torch.nn.Module):
    """Parameters of several shapes, one in float64, one frozen-out (no gradient), nested in a submodule."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.embed = torch.nn.Embedding(11, 6)
        self.block = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3, bias=False))
        self.scale = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
        self.unused = torch.nn.Parameter(torch.zeros(4))  # its gradient stays None on every rank


def _rank_grads(model: torch.nn.Module, world: int, seed: int, none: tuple[str, ...] = ()) -> list[dict]:
    """A gradient per rank for every parameter (None for those in `none`): different on each rank, with values
    over a few decades and some exact zeros, in the parameter's dtype."""
    g = torch.Generator().manual_seed(seed)
    grads = []
    for _ in range(world):
        rank = {}
        for name, p in model.named_parameters():
            if name in none:
                rank[name] = None
                continue
            decades = torch.randint(-2, 1, p.shape, generator=g).double()
            values = torch.randn(p.shape, generator=g, dtype=torch.float64) * torch.pow(10.0, decades)
            values[torch.rand(p.shape, generator=g) < 0.1] = 0.0
            rank[name] = values.to(p.dtype)
        grads.append(rank)
    return grads


def _in_processes(function, *args, **kwargs) -> list:
    """function(*args, **kwargs) (data_parallel_by_hand) in 2 ranks joined by gloo; each rank's result."""
    return _on_ranks(2, functools.partial(function, *args, **kwargs))


def _cases_8_3() -> list[Case]:
    in_place = (
        "In place: every p.grad that is not None becomes the mean of that gradient over the processes, in the same "
        "tensor (whatever holds it sees the average); the parameters, and gradients that are None, stay as they are."
    )
    promises = ("Returns: None.", in_place, "Raises: nothing of its own.")
    net = _Net()
    # The mean of 3 or 4 fp32 values (|value| < 5), summed in another order (another gloo, or divided before the
    # sum): a few units in the last place of the largest term, so atol 2e-6 where terms cancel and rtol 1e-5
    # elsewhere. A sum (3x), a mean over the wrong count or one rank's own gradient is off by far more.
    return [
        Case(
            "average_gradients",
            (net, _rank_grads(net, 3, seed=1, none=("unused",))),
            drive=_averaged_on_ranks,
            rtol=1e-5,
            atol=2e-6,
            promise=promises,
        ),
        # The notebook's loop, 2 steps of 6 sequences on 2 ranks (3 each): the loss of each step on every rank. Two
        # AdamW steps of a small GPT in fp32 on another CPU's kernels: ~1e-6 of a loss near 4, so rtol 1e-4; ranks
        # that stepped on their own gradients are ~1e-2 apart by the second step.
        Case("data_parallel_by_hand", (2,), {"batch": 6}, drive=_in_processes, rtol=1e-4),
    ]


CONTRACTS = {"8.1": _cases_8_1, "8.2": _cases_8_2, "8.3": _cases_8_3}


@pytest.mark.exercise("8.1", points=1)
def test_8_1_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["8.1"]())


@pytest.mark.exercise("8.2", points=1)
def test_8_2_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["8.2"]())


@pytest.mark.exercise("8.3", points=1)
def test_8_3_keeps_its_contract(answers, contract):
    contract.check(answers, CONTRACTS["8.3"]())
