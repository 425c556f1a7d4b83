"""What a test can watch while an answer runs: the optimizer steps it takes, the training runs it starts, the
token ids its models see, the bytes autograd saves.

The watching happens next to the answer, in its worker: a test file's function run by answers.run(...) opens
these around its call of the answer and returns what they saw, as plain data (dicts, lists and numbers).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import torch

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}  # the two clocks an answer may time with


def now() -> dict[str, float]:
    """Both clocks, read now: {"wall": time.perf_counter(), "cpu": time.process_time()}."""
    return {name: read() for name, read in CLOCKS.items()}


def count_saved_bytes(module: torch.nn.Module, run: Callable[[], object]) -> tuple[int, object]:
    """(bytes autograd saves for backward while run() executes, run()'s result); weights not counted.

    Each storage counts once (views share one). The result is returned so the graph, and with it the
    saved tensors, stays alive until the count is read.
    """
    skip = {t.untyped_storage().data_ptr() for t in [*module.parameters(), *module.buffers()]}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in skip:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = run()
    return sum(saved.values()), out


@contextlib.contextmanager
def optimizer_steps() -> Iterator[list[dict]]:
    """Every optimizer.step() of any torch optimizer inside the block, in order, as dicts:

    optimizer              id() of the optimizer that stepped
    grad_norm              the norm of its gradients as the step began: what the step applied
    started, finished      time.perf_counter() as the step began and ended
    on_leftover_gradients  a backward since the previous step added to gradients that step had left behind
                           (no zero_grad in between)
    """
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    steps: list[dict] = []
    waiting: dict[int, torch.Tensor] = {}  # parameters whose next gradient must find none left over
    hooked: dict[int, object] = {}
    leftover = [False]

    def arrived(p: torch.Tensor, grad: torch.Tensor) -> None:  # before the new gradient is added to p.grad
        if waiting.pop(id(p), None) is not None and p.grad is not None and bool(p.grad.any()):
            leftover[0] = True

    def pre(optimizer, args, kwargs) -> None:
        grads = [p.grad.flatten().float() for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        norm = torch.cat(grads).norm().item() if grads else 0.0
        steps.append(
            {
                "optimizer": id(optimizer),
                "grad_norm": norm,
                "started": now(),
                "finished": None,
                "on_leftover_gradients": leftover[0],
            }
        )
        leftover[0] = False

    def post(optimizer, args, kwargs) -> None:
        steps[-1]["finished"] = now()
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    waiting[id(p)] = p
                    if id(p) not in hooked:
                        hooked[id(p)] = p.register_hook(lambda grad, p=p: arrived(p, grad))

    handles = [register_optimizer_step_pre_hook(pre), register_optimizer_step_post_hook(post)]
    try:
        yield steps
    finally:
        for handle in [*handles, *hooked.values()]:
            handle.remove()


@contextlib.contextmanager
def train_runs(answers: object) -> Iterator[list[dict]]:
    """Every minigpt.train.train() call inside the block (the answers' own `train` included), as dicts: its
    config's precision, batch, accum, ctx and steps, the run's losses and skipped steps, and when it started
    and finished (now(): both clocks)."""
    import minigpt.train as train_module

    real = train_module.train
    runs: list[dict] = []

    def recording_train(cfg, *args, **kwargs):
        started = now()
        result = real(cfg, *args, **kwargs)
        finished = now()
        runs.append(
            {
                **{key: getattr(cfg, key) for key in ("precision", "batch", "accum", "ctx", "steps")},
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


def check_run_times(rows: list[dict], seen: dict, what: str) -> None:
    """In the grader: each row's "seconds" timed its own run, as train_runs saw it (seen: "runs", and "called"
    and "returned", now() around the answer's call). By the wall clock or by the process's CPU time (the
    answer may use either), the seconds are at least the run itself, and at most the time from the end of
    the run before it to the start of the run after it: a clock started once before the loop reads more."""
    runs = seen["runs"]
    for i, (r, run) in enumerate(zip(rows, runs)):
        bounds = {
            name: (
                run["finished"][name] - run["started"][name],
                (runs[i + 1]["started"] if i + 1 < len(runs) else seen["returned"])[name]
                - (runs[i - 1]["finished"] if i > 0 else seen["called"])[name],
            )
            for name in CLOCKS
        }
        if any(low <= r["seconds"] <= high for low, high in bounds.values()):
            continue
        low = min(low for low, _ in bounds.values())
        assert r["seconds"] >= low, (
            f"{what} {r[what]}: seconds {r['seconds']:.4f} s, but train() alone took {low:.4f} s: time the whole "
            f"run (read the clock before and after train())"
        )
        high = max(high for _, high in bounds.values())
        raise AssertionError(
            f"{what} {r[what]}: seconds {r['seconds']:.4f} s, more than the {high:.4f} s from the end of the run "
            f"before to the start of the next: the clock also counted the runs before this one - start it just "
            f"before each train(), not once before the loop"
        )


@contextlib.contextmanager
def model_inputs() -> Iterator[list[tuple[int, ...]]]:
    """The shape of the token ids of every GPT forward pass inside the block, in order."""
    from torch.nn.modules.module import register_module_forward_pre_hook

    from minigpt.model import GPT

    shapes: list[tuple[int, ...]] = []

    def seen(module: torch.nn.Module, args: tuple) -> None:
        if isinstance(module, GPT) and args and isinstance(args[0], torch.Tensor):
            shapes.append(tuple(args[0].shape))

    handle = register_module_forward_pre_hook(seen)
    try:
        yield shapes
    finally:
        handle.remove()
