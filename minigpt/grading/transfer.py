"""What crosses between the grader and a worker: the call, its result, and what the call changed in its arguments.

The grader sends a call as a pickle (the worker runs the learner's code anyway: nothing is lost by trusting the
grader there). The worker answers with torch.save, and the grader reads that with torch.load(weights_only=True),
which builds tensors, numbers, strings, lists, tuples, dicts, ranges and dtypes, and nothing that can run code:
whatever a learner's process writes, reading it cannot run code in the grader.

An argument can change in place (a model's weights and gradients, an optimizer's state, a scaler's scale), so
after each call the worker sends back the state of every tensor and stateful object its arguments hold, and the
grader writes it into its own copies: a test reads the caller's objects after the call, as if it had run here.
"""

from __future__ import annotations

import dataclasses
import io

import torch

MAX_REPORT_BYTES = 512 * 2**20  # a report is a result and a few small models' state: far below this
SAFE_GLOBALS = [range]  # what a report may hold beyond torch.load's default tensors, containers and dtypes
OPTIMIZER = torch.optim.Optimizer
SCHEDULER = torch.optim.lr_scheduler.LRScheduler
SCALER = torch.amp.GradScaler


class Unreadable:
    """A value the worker could not send as plain data (a learner's own class, a numpy array, ...).

    It equals nothing, so a test that compares it fails, and its repr says what it was.
    """

    def __init__(self, description: str) -> None:
        self.description = description

    def __repr__(self) -> str:
        return f"<{self.description}>"

    def __eq__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return id(self)


# ----------------------------------------------------------------------------------------------------------
# The tensors and stateful objects an argument holds


def parts(value: object) -> tuple[list[torch.Tensor], list[object]]:
    """(tensors, stateful objects) that `value` holds, each once, in an order that survives a pickle.

    Tensors: plain tensors, a module's parameters and buffers, an optimizer's parameters. Stateful objects:
    modules (their train/eval modes), optimizers, learning-rate schedulers and GradScalers. Lists, tuples and
    dicts are searched; anything else (a config, a callable, a number) holds nothing to send back.
    """
    tensors: dict[int, torch.Tensor] = {}
    stateful: dict[int, object] = {}

    def visit(v: object) -> None:
        if isinstance(v, torch.Tensor):
            tensors.setdefault(id(v), v)
        elif isinstance(v, torch.nn.Module):
            stateful.setdefault(id(v), v)
            for t in [*v.parameters(), *v.buffers()]:
                visit(t)
        elif isinstance(v, OPTIMIZER):
            stateful.setdefault(id(v), v)
            for group in v.param_groups:
                for p in group["params"]:
                    visit(p)
        elif isinstance(v, SCHEDULER):
            stateful.setdefault(id(v), v)
            visit(v.optimizer)
        elif isinstance(v, SCALER):
            stateful.setdefault(id(v), v)
        elif isinstance(v, (list, tuple)):
            for item in v:
                visit(item)
        elif isinstance(v, dict):
            for item in v.values():
                visit(item)

    visit(value)
    return list(tensors.values()), list(stateful.values())


def grads_of(tensors: list[torch.Tensor]) -> list[torch.Tensor | None]:
    """The .grad of each tensor (a pickle of a tensor leaves its gradient out: these travel beside it)."""
    return [t.grad for t in tensors]


def unpickled(tensors: list[torch.Tensor], stateful: list[object], grads: list[torch.Tensor | None]) -> None:
    """In the worker: what a pickle leaves out, put back: each tensor's gradient, and each GradScaler's scale
    as a tensor (a pickled scaler keeps its scale as a number, and would refuse to step gradients scaled
    before the pickle)."""
    for t, grad in zip(tensors, grads):
        if grad is not None:
            t.grad = grad
    for obj in stateful:
        if isinstance(obj, SCALER) and obj.is_enabled():
            obj.scale(torch.zeros(()))  # the scale tensor, made from the pickled number (the tests run on the CPU)


def state_after(tensors: list[torch.Tensor], stateful: list[object]) -> dict:
    """In the worker, after a call: the values and gradients of the arguments' tensors, and the state of the
    stateful objects, as plain data."""
    return {
        "tensors": [(t.detach(), None if t.grad is None else t.grad.detach()) for t in tensors],
        "states": [_state_of(obj) for obj in stateful],
    }


def _state_of(obj: object) -> object:
    if isinstance(obj, torch.nn.Module):
        return [m.training for m in obj.modules()]
    return plain(obj.state_dict())  # optimizers, schedulers and scalers: numbers, lists, dicts and tensors


def restore(tensors: list[torch.Tensor], stateful: list[object], report: dict) -> None:
    """In the grader: write what the call changed into the grader's own arguments.

    Raises ValueError when the report does not fit the arguments (it was not made from them).
    """
    values, states = report.get("tensors"), report.get("states")
    if not (isinstance(values, list) and isinstance(states, list)):
        raise ValueError("the report holds no state of the arguments")
    if len(values) != len(tensors) or len(states) != len(stateful):
        raise ValueError(f"the report holds {len(values)} tensors and {len(states)} states, not the arguments'")
    for t, value in zip(tensors, values):
        if not (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], torch.Tensor)):
            raise ValueError("a tensor's state in the report is not (values, gradient)")
        data, grad = value
        with torch.no_grad():
            if data.shape != t.shape or data.dtype != t.dtype:  # the call replaced it (e.g. model.to(torch.bfloat16))
                t.data = data
            elif not torch.equal(t, data):
                t.copy_(data)
        if grad is not None or t.grad is not None:
            t.grad = grad
    for obj, state in zip(stateful, states):
        if isinstance(obj, torch.nn.Module):
            for module, training in zip(obj.modules(), state):
                module.training = bool(training)
        else:
            obj.load_state_dict(state)


# ----------------------------------------------------------------------------------------------------------
# Results as plain data, and reports in and out of bytes


def plain(value: object, depth: int = 0) -> object:
    """`value` as data the grader can read: builtin types, tensors, ranges and dtypes; anything else Unreadable.

    Subclasses become their base type (a namedtuple a tuple, a numpy float a float), a dataclass a dict, and a
    tensor a plain tensor without its graph.
    """
    if depth > 40:
        return Unreadable("a value nested more than 40 levels deep")
    if value is None or type(value) in (bool, int, float, str, bytes, range, torch.dtype, torch.device, torch.Size):
        return value
    if isinstance(value, torch.Tensor):
        tensor = value.detach().as_subclass(torch.Tensor).cpu()
        return tensor.requires_grad_(True) if value.requires_grad and tensor.is_floating_point() else tensor
    for base in (int, float, str):
        if isinstance(value, base):
            return base(value)
    if isinstance(value, (list, tuple)):
        items = [plain(v, depth + 1) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        return {plain(k, depth + 1): plain(v, depth + 1) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}
    kind = type(value)
    if kind.__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        return plain(value.item(), depth + 1)  # a numpy scalar
    try:
        shown = repr(value)[:200]
    except Exception:  # noqa: BLE001 - a learner's __repr__ may raise anything
        shown = "?"
    return Unreadable(f"a {kind.__module__}.{kind.__qualname__}, which the grader cannot read: {shown}")


def _marked(value: object) -> object:
    """Unreadable values as dicts that torch.save can write (in the worker)."""
    if isinstance(value, Unreadable):
        return {"__unreadable__": value.description}
    if isinstance(value, list):
        return [_marked(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_marked(v) for v in value)
    if isinstance(value, dict):
        return {k: _marked(v) for k, v in value.items()}
    return value


def _unmarked(value: object) -> object:
    """The dicts _marked wrote, back to Unreadable (in the grader)."""
    if isinstance(value, dict):
        if set(value) == {"__unreadable__"}:
            return Unreadable(str(value["__unreadable__"]))
        return {k: _unmarked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_unmarked(v) for v in value)
    return value


def dump_report(report: dict) -> bytes:
    """A report as bytes (in the worker): plain data only, see plain()."""
    buffer = io.BytesIO()
    torch.save(_marked(report), buffer)
    return buffer.getvalue()


def load_report(data: bytes) -> dict:
    """Read a report (in the grader) without running any code from it. Raises ValueError if it is not one."""
    try:
        with torch.serialization.safe_globals(SAFE_GLOBALS):
            report = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as error:  # noqa: BLE001 - anything unreadable is the same failure
        raise ValueError(f"unreadable ({type(error).__name__}: {str(error)[:200]})") from None
    if not isinstance(report, dict):
        raise ValueError(f"a {type(report).__name__}, not a report")
    return _unmarked(report)
