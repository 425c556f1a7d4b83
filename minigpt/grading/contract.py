"""Differential grading: the learner's answer and the reference answer run on the same inputs, and everything
the exercise promises is compared: the value returned (type, dtype, shape, value within a stated tolerance),
the arguments after the call (changed in place or not, and to what), whether a returned tensor is the caller's
own, the error raised for a bad input, and, where the exercise is about memory, the peak bytes of the call.

    cases = [Case("accum_for", (24, 5), {"world_size": 3}), Case("accum_for", (0, 4), promise="Raises: ...")]
    contract.check(answers, cases)         # in a test: the `contract` fixture of minigpt/grading/plugin.py

The reference's side of each case, its outcome, comes from the reference answers (solutions/) run in a worker
of their own, or, where the course has no solutions/ (the classroom template), from exercises/expected/, which
scripts/make_expected.py writes from the same runs. Both go through observe() and the same comparison, so the
two give the same grade.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import math
import pickle
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from minigpt.grading import transfer

# A peak is compared within this band of the reference's (ratio, low and high), plus a few KiB of slack for
# the small tensors any answer makes (a scalar loss, an index): a memory bug costs a whole extra tensor.
PEAK_SLACK_BYTES = 4096


@dataclass
class Case:
    """One call of an exercise's function on inputs the learner did not choose.

    function   its name in the chapter's file
    args       positional arguments (tensors, modules, configs, numbers, picklable callables)
    kwargs     keyword arguments: give every argument a value that is not its default somewhere
    rtol, atol how far a float or a float tensor may be from the reference's: |got - want| <= atol + rtol * |want|
               (0, 0: exactly; say in the test why a tolerance is what it is)
    ignore     result paths compared by type only, not value (patterns where only * and ? are special: "*['seconds']")
    peak       (low, high): the call's peak bytes must be within low x and high x the reference's (memory
               exercises only; None: not measured)
    drive      a module-level function of the test file, drive(function, *args, **kwargs) -> result, that calls
               the answer in a context (backward after it, a counter around a callable); None: function(*args)
    promise    the docstring line(s) this case checks ("Raises: ValueError if ..."): see tests/test_grading_contracts
    """

    function: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    rtol: float = 0.0
    atol: float = 0.0
    ignore: tuple[str, ...] = ()
    peak: tuple[float, float] | None = None
    drive: Callable | None = None
    promise: str | tuple[str, ...] = ()

    @property
    def promises(self) -> tuple[str, ...]:
        return (self.promise,) if isinstance(self.promise, str) else tuple(self.promise)

    def call_text(self, width: int = 160) -> str:
        """How the call reads: state_bytes(<Sequential>, 'adamw8bit', in_backward=True)."""
        parts = [_show(a) for a in self.args] + [f"{k}={_show(v)}" for k, v in self.kwargs.items()]
        text = f"{self.function}({', '.join(parts)})"
        return text if len(text) <= width else text[: width - 4] + "...)"

    def key(self) -> str:
        """A name for the case's stored outcome: the call and a fingerprint of every input, so that a stored
        outcome is never used for inputs it was not made from."""
        digest = hashlib.sha256()
        _fingerprint((self.function, self.args, self.kwargs, self.drive), digest)
        return f"{self.function}:{digest.hexdigest()[:16]}"


def _show(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"<{str(value.dtype).removeprefix('torch.')} tensor {tuple(value.shape)}>"
    if isinstance(value, torch.nn.Module):
        return f"<{type(value).__name__} of {sum(p.numel() for p in value.parameters()):,} parameters>"
    if callable(value) and not isinstance(value, type):
        return f"<{getattr(value, '__name__', type(value).__name__)}>"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _fingerprint(value: object, digest: hashlib._Hash) -> None:
    """Feed a canonical description of value (its tensors' bytes, its modules' state) into digest."""
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        digest.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")  # 0-dim too
        _fingerprint(_grad(value), digest)
    elif isinstance(value, torch.nn.Module):
        digest.update(f"M{type(value).__qualname__}".encode())
        _fingerprint(dict(value.state_dict()), digest)
    elif isinstance(value, dict):
        digest.update(b"D")
        for k in sorted(value, key=repr):
            _fingerprint(k, digest)
            _fingerprint(value[k], digest)
    elif isinstance(value, (list, tuple)):
        digest.update(f"L{len(value)}".encode())
        for item in value:
            _fingerprint(item, digest)
    elif callable(value) and hasattr(value, "__qualname__"):
        digest.update(f"F{value.__qualname__}".encode())
    elif hasattr(value, "func") and hasattr(value, "args"):  # functools.partial
        _fingerprint((value.func, value.args, value.keywords), digest)
    elif hasattr(value, "__dataclass_fields__"):
        _fingerprint({k: getattr(value, k) for k in value.__dataclass_fields__}, digest)
    else:
        digest.update(repr(value).encode())


# ----------------------------------------------------------------------------------------------------------
# In the worker: one call, watched


def _walk(value: object, path: str):
    """(path, tensor or stateful object) for everything a call's arguments hold that a call could change."""
    if isinstance(value, torch.Tensor):
        yield path, value
    elif isinstance(value, torch.nn.Module):
        for name, t in [*value.named_parameters(), *value.named_buffers()]:
            yield f"{path}.{name}", t
    elif isinstance(value, (transfer.OPTIMIZER, transfer.SCHEDULER, transfer.SCALER)):
        yield path, value
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _walk(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for k, item in value.items():
            yield from _walk(item, f"{path}[{k!r}]")


def _grad(t: torch.Tensor) -> torch.Tensor | None:
    """A tensor's .grad; None for a non-leaf (reading theirs only makes torch warn: they keep none)."""
    return t.grad if t.is_leaf else None


def _snapshot(thing: object) -> object:
    """What a thing holds now, as plain data: a tensor's values and gradient, or a stateful object's state."""
    if isinstance(thing, torch.Tensor):
        grad = _grad(thing)
        return (thing.detach().clone(), None if grad is None else grad.detach().clone())
    return transfer.plain(copy.deepcopy(thing.state_dict()))


def _same(a: object, b: object) -> bool:
    """Exactly equal plain data (NaN equals NaN; a tensor's dtype and shape count)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.is_floating_point() or a.is_complex():
            return bool(((a == b) | (a.isnan() & b.isnan())).all())
        return torch.equal(a, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def _storages(value: object, path: str):
    """(path, storage address) of every tensor in value, and of each tensor's gradient."""
    for where, thing in _walk(value, path):
        if isinstance(thing, torch.Tensor):
            for p, t in ((where, thing), (f"{where}.grad", _grad(thing))):
                if t is not None and t.numel():
                    yield p, t.untyped_storage().data_ptr()


def observe(answers: object, case: Case) -> dict:
    """Run case in the worker (answers: the module of answers, the learner's or the reference's) and return its
    outcome as plain data: {"raised"} or {"result", "aliases"}, and always {"changed", "peak"}.

    changed: {argument path: what it holds after the call} for each argument the call changed in place.
    aliases: [(result path, argument path)] for each returned tensor that shares memory with an argument.
    peak:    the most bytes of tensors the call made that were alive at once (the package's LiveTensorTracker).
    """
    from minigpt.memory.meters import LiveTensorTracker

    function = getattr(answers, case.function, None)
    if not callable(function):
        raise AttributeError(f"the answers have no function {case.function}(): keep the exercise's names")
    inputs = (case.args, case.kwargs)
    _seed_everything()  # an answer that draws from the global generators draws the same numbers in every run
    before = {p: _snapshot(t) for p, t in _walk(inputs, "args")}
    tracker = LiveTensorTracker([], "cpu") if case.peak is not None else None
    outcome: dict = {"raised": None, "result": None, "aliases": [], "peak": None}
    try:
        with tracker if tracker is not None else contextlib.nullcontext():
            if case.drive is not None:
                result = case.drive(function, *case.args, **case.kwargs)
            else:
                result = function(*case.args, **case.kwargs)
    except NotImplementedError:
        raise  # an unfinished exercise: "not done", not an outcome to compare
    except Exception as error:  # noqa: BLE001 - a documented error is an outcome like a value
        if any(isinstance(e, NotImplementedError) for e in _chain(error)):
            raise
        kind = next(c.__name__ for c in type(error).__mro__ if c.__module__ == "builtins")
        outcome["raised"] = {"builtin": kind, "type": type(error).__name__, "message": str(error)[:500]}
        result = None
    else:
        inputs_at = dict(_storages(inputs, "args"))
        owner = {ptr: p for p, ptr in inputs_at.items()}
        outcome["result"] = transfer.plain(result)
        outcome["aliases"] = sorted(
            (p, owner[ptr]) for p, ptr in _storages(_tensors_of(result), "result") if ptr in owner
        )
    if tracker is not None:
        tracker.stop()
        outcome["peak"] = tracker.timeline(lambda rec: "all")[0].get("all", 0)
    after = {p: _snapshot(t) for p, t in _walk(inputs, "args")}
    outcome["changed"] = {p: after[p] for p in before if p in after and not _same(before[p], after[p])}
    return outcome


def _seed_everything(seed: int = 0) -> None:
    import random

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass


def _chain(error: BaseException):
    seen = set()
    while error is not None and id(error) not in seen:
        yield error
        seen.add(id(error))
        error = error.__cause__ or error.__context__


def _tensors_of(value: object, depth: int = 0) -> object:
    """value with everything but its tensors (at any depth in lists, tuples and dicts) left out."""
    if depth > 20:
        return None
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (list, tuple)):
        return [_tensors_of(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {k: _tensors_of(v, depth + 1) for k, v in value.items()}
    return None


# ----------------------------------------------------------------------------------------------------------
# In the grader: an outcome against the reference's


def compare(got: dict, want: dict, case: Case) -> str | None:
    """What differs between the answer's outcome and the reference's, in one sentence; None if nothing does."""
    if want["raised"] is not None:
        kind = want["raised"]["builtin"]
        if got["raised"] is None:
            return f"expected a {kind} for this input (the docstring promises one), but it returned {_brief(got)}"
        if got["raised"]["builtin"] != kind:
            return f"raised {got['raised']['type']}: {got['raised']['message'][:200]}; expected a {kind}"
    elif got["raised"] is not None:
        return f"raised {got['raised']['type']}: {got['raised']['message'][:300]}"
    else:
        problem = _differs(got["result"], want["result"], "result", case)
        if problem:
            return f"returned {problem}"
        extra = sorted(set(map(tuple, got["aliases"])) - set(map(tuple, want["aliases"])))
        if extra:
            where, arg = extra[0]
            return (
                f"the returned {where.replace('result', 'value', 1)} shares memory with the argument {arg}: "
                f"return a new tensor, so that changing one does not change the other"
            )
    changed, expected = set(got["changed"]), set(want["changed"])
    if changed - expected:
        return f"changed {_paths(changed - expected)} in place; the exercise leaves {_it(changed - expected)} as given"
    if expected - changed:
        return f"did not change {_paths(expected - changed)}; the exercise changes {_it(expected - changed)} in place"
    for path in sorted(expected):
        problem = _differs(got["changed"][path], want["changed"][path], path, case)
        if problem:
            return f"left the argument {problem} after the call"
    if case.peak is not None and want["peak"] is not None:
        low, high = case.peak
        peak, ref = got["peak"] or 0, want["peak"]
        if not low * ref - PEAK_SLACK_BYTES <= peak <= high * ref + PEAK_SLACK_BYTES:
            return (
                f"the right values, but {peak:,} bytes of tensors were alive at once during the call; the reference "
                f"needs {ref:,} (within {low:g}x to {high:g}x of that passes): "
                + ("does it keep more alive than the exercise asks?" if peak > ref else "is the work split as asked?")
            )
    return None


def _brief(outcome: dict) -> str:
    return _value_text(outcome["result"])


def _paths(paths: set[str]) -> str:
    listed = sorted(paths)
    return ", ".join(listed[:3]) + (f" and {len(listed) - 3} more" if len(listed) > 3 else "")


def _it(paths: set[str]) -> str:
    return "it" if len(paths) == 1 else "them"


def _value_text(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype).removeprefix('torch.')} tensor of shape {tuple(value.shape)}"
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _matches(path: str, pattern: str) -> bool:
    """Whether a result path such as result['fp32']['seconds'] matches a pattern in which only * (any text) and ?
    (one character) are special: "*['seconds']" means what it says (fnmatch would read [...] as a set)."""
    regex = "".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern)
    return re.fullmatch(regex, path) is not None


def _differs(got: object, want: object, path: str, case: Case) -> str | None:
    """Where got differs from want ("<path>: <what>"), or None."""
    ignored = any(_matches(path, pattern) for pattern in case.ignore)
    if isinstance(want, tuple) and len(want) == 2 and path.startswith("args") and isinstance(want[0], torch.Tensor):
        # an argument's (values, gradient) after the call
        got_pair = got if isinstance(got, tuple) else (got, None)
        return _differs(got_pair[0], want[0], path, case) or _differs(got_pair[1], want[1], f"{path}.grad", case)
    if want is None:
        return None if got is None else f"{path}: {_value_text(got)}, expected None"
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"{path}: {_value_text(got)}, expected {_value_text(want)}"
        if got.dtype != want.dtype:
            return f"{path}: a {got.dtype} tensor, expected {want.dtype}"
        if got.shape != want.shape:
            return f"{path}: shape {tuple(got.shape)}, expected {tuple(want.shape)}"
        if ignored or _same(got, want):
            return None
        if not want.is_floating_point():
            wrong = (got != want).nonzero()
            at = tuple(wrong[0].tolist())
            count = int((got != want).sum())
            return (
                f"{path}: {count} of {want.numel()} values differ, e.g. at {at}: {got[at].item()}, "
                f"expected {want[at].item()}"
            )
        g, w = got.double(), want.double()
        bad = ~(((g - w).abs() <= case.atol + case.rtol * w.abs()) | (g.isnan() & w.isnan()) | (g == w))
        if not bad.any():
            return None
        at = tuple(bad.nonzero()[0].tolist())
        return (
            f"{path}: {int(bad.sum())} of {want.numel()} values differ beyond the tolerance (rtol {case.rtol:g}, "
            f"atol {case.atol:g}), e.g. at {at}: {got[at].item():.8g}, expected {want[at].item():.8g}"
        )
    if isinstance(want, bool) or isinstance(got, bool):
        if type(got) is not type(want):
            return f"{path}: {_value_text(got)} ({type(got).__name__}), expected a {type(want).__name__}"
        return None if ignored or got == want else f"{path}: {got}, expected {want}"
    if isinstance(want, int):
        if type(got) is not int:
            return f"{path}: {_value_text(got)} (a {type(got).__name__}), expected an int"
        return None if ignored or got == want else f"{path}: {got:,}, expected {want:,}"
    if isinstance(want, float):
        if type(got) not in (float, int):
            return f"{path}: {_value_text(got)} (a {type(got).__name__}), expected a float"
        if ignored or got == want or (math.isnan(got) and math.isnan(want)):
            return None
        if math.isfinite(want) and abs(got - want) <= case.atol + case.rtol * abs(want):
            return None
        return f"{path}: {got!r}, expected {want!r} (rtol {case.rtol:g}, atol {case.atol:g})"
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)):
            return f"{path}: {_value_text(got)}, expected a {type(want).__name__} of {len(want)}"
        if len(got) != len(want):
            return f"{path}: {len(got)} items, expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            problem = _differs(g, w, f"{path}[{i}]", case)
            if problem:
                return problem
        return None
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return f"{path}: {_value_text(got)}, expected a dict with keys {sorted(want, key=repr)}"
        if set(got) != set(want):
            return f"{path}: keys {sorted(got, key=repr)}, expected {sorted(want, key=repr)}"
        for k in want:
            problem = _differs(got[k], want[k], f"{path}[{k!r}]", case)
            if problem:
                return problem
        return None
    if type(got) is not type(want):
        return f"{path}: {_value_text(got)} (a {type(got).__name__}), expected a {type(want).__name__}"
    return None if ignored or got == want else f"{path}: {_value_text(got)}, expected {_value_text(want)}"


# ----------------------------------------------------------------------------------------------------------
# The reference's outcomes: live from solutions/, or stored in exercises/expected/


def expected_path(exercises: Path, chapter: str) -> Path:
    return exercises / "expected" / f"{chapter}.pt"


def save_expected(path: Path, outcomes: dict[str, dict[str, dict]]) -> None:
    """Write {exercise: {case key: outcome}} for a chapter (scripts/make_expected.py)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(transfer._marked(outcomes), buffer)
    temporary = path.with_suffix(".tmp")
    temporary.write_bytes(buffer.getvalue())
    temporary.replace(path)


def load_expected(path: Path) -> dict[str, dict[str, dict]]:
    """The stored outcomes of a chapter, read without running any code from the file."""
    return transfer.load_report(path.read_bytes())


def fresh(case: Case) -> Case:
    """A copy of the case that shares nothing with it: each run gets inputs no other run has touched."""
    return pickle.loads(pickle.dumps(case))
