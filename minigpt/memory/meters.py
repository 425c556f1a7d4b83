"""Three meters of a step's memory: what autograd saves, what is alive op by op, and what the allocator gave.

SavedTensorMeter is a saved_tensors_hooks context: every tensor autograd saves passes through it, and it
counts each storage once (views share one). LiveTensorTracker is a TorchDispatchMode: it sees every op's
outputs, follows each storage until it is freed, and records the largest live bytes per category and phase.
AllocatorMeter reads the allocator's own record of every allocation and free (torch.profiler's memory
events): it cannot say what a tensor is, but it sees scratch made inside an op, and it changes nothing.

Why the third: while a TorchDispatchMode is active, PyTorch treats every tensor as a subclass
(at::isTensorSubclassLike), and autograd then sums two gradients of one tensor into a NEW tensor instead
of adding one into the other in place. The tied embedding's two (V, C) gradients need a third, for
example. A meter that is a mode measures a slightly different program, so the peak comes from this one.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode

from minigpt.device import cuda_index
from minigpt.quantize import is_unpacking


class SavedTensorMeter(torch.autograd.graph.saved_tensors_hooks):
    """Records the storages autograd saves for backward, each once (views share a storage).

    Parameters and buffers are left out (they exist anyway). It also sees the inputs that non-reentrant
    checkpointing keeps (checkpoint saves them under the hooks active outside it), but not what
    selective checkpointing caches: that policy keeps op outputs in a dict, not through autograd.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        skip = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
        self._saved: dict[int, tuple[StorageWeakRef, int]] = {}  # storage address -> (weak ref, bytes)
        self.enabled = True

        def pack(t: torch.Tensor) -> torch.Tensor:
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
            if self.enabled and ptr not in skip and (ptr not in self._saved or self._saved[ptr][0].expired()):
                self._saved[ptr] = (StorageWeakRef(storage), storage.nbytes())
            # The meter only looks. A detached alias of the same storage, not t itself: when t is the
            # op's own output (exp, softmax), keeping t would tie the graph into a reference cycle that
            # is never freed unless backward runs (a forward-only measurement would leak its graph).
            return t.detach()

        super().__init__(pack, lambda t: t)

    def alive(self) -> dict[int, int]:
        """{address: bytes} of the saved storages still alive (a saved tensor can die with its graph)."""
        return {ptr: n for ptr, (ref, n) in self._saved.items() if not ref.expired()}


def _tensors(x):
    """The tensors in an op's arguments or results (nested tuples, lists and dicts)."""
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (tuple, list)):
        for item in x:
            yield from _tensors(item)
    elif isinstance(x, dict):
        for item in x.values():
            yield from _tensors(item)


class LiveTensorTracker(TorchDispatchMode):
    """Sees every op, and records each new storage it makes: bytes, when born, when freed, in which phase.

    "clock" counts ops. A storage's death is noticed through a weak reference, checked whenever an op
    makes a new storage (only then can memory grow). Tensors made before the tracker starts (weights,
    the batch) are not in it; views and in-place results are not new storages. After stop(), the
    records stay as they were: what was alive then counts as alive at the end.
    """

    def __init__(self, params: list[torch.Tensor], device_type: str) -> None:
        super().__init__()
        self.device_type = device_type  # storages elsewhere (AdamW's step counters on the host) are left out
        self.param_ptrs = {p.untyped_storage().data_ptr() for p in params}
        self.clock = 0
        self.phases: list[tuple[int, str]] = [(1, "forward")]  # (first op of the phase, its name)
        self.records: list[dict] = []
        self._live: dict[int, tuple[StorageWeakRef, dict]] = {}
        self.stopped = False

    @property
    def phase(self) -> str:
        return self.phases[-1][1]

    def set_phase(self, name: str) -> None:
        if name != self.phase:
            self.sweep(died=self.clock + 1)
            self.phases.append((self.clock + 1, name))

    def record_of(self, storage: torch.UntypedStorage) -> dict | None:
        """The record of a storage alive now (None if the tracker did not see it made)."""
        entry = self._live.get(storage.data_ptr())
        return entry[1] if entry is not None else None

    def live_records(self) -> set[int]:
        """Indices (in self.records) of the storages alive now."""
        self.sweep(died=self.clock + 1)
        return {rec["index"] for _, rec in self._live.values()}

    def stop(self) -> None:
        """The end of the metered step: note what has been freed, then record nothing more."""
        self.sweep(died=self.clock + 1)
        self.stopped = True

    def sweep(self, died: int) -> None:
        """Mark the storages freed since the last sweep as gone before op number `died`."""
        if self.stopped:
            return
        expired = torch.UntypedStorage._expired  # what StorageWeakRef.expired() calls, minus two wrappers
        for ptr in [p for p, (ref, _) in self._live.items() if expired(ref.cdata)]:
            self._live.pop(ptr)[1]["died"] = died

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.stopped:
            return func(*args, **(kwargs or {}))
        self.clock += 1
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in _tensors((args, kwargs))}
        new = [
            t
            for t in _tensors(out)
            if t.device.type == self.device_type
            and t.untyped_storage().nbytes()
            and t.untyped_storage().data_ptr() not in inputs
        ]  # not a view or in-place result of an input
        if not new:
            return out
        # Memory only grows when an op makes a storage: that is when to look for what was freed before it.
        self.sweep(died=self.clock)
        for t in new:
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
            if ptr in self._live:
                continue  # a second view of a storage this op already made
            rec = {
                "index": len(self.records),
                "ptr": ptr,
                "bytes": storage.nbytes(),
                "shape": tuple(t.shape),
                "born": self.clock,
                "died": None,
                "phase": self.phase,
                # autocast's copy of a weight: a cast whose input is a parameter
                # ... or a frozen weight unpacked for one matmul (LoRA's base, cast or dequantized: minigpt.lora)
                "weight_copy": (func is torch.ops.aten._to_copy.default and bool(inputs & self.param_ptrs))
                or is_unpacking(),
            }
            self.records.append(rec)
            self._live[ptr] = (StorageWeakRef(storage), rec)
        return out

    def timeline(self, category_of) -> tuple[dict[str, int], dict[str, int]]:
        """Largest live bytes of each category, and of all tracked storages in each phase, over the step."""
        self.sweep(died=self.clock + 1)
        births, deaths = {}, {}
        for rec in self.records:
            births.setdefault(rec["born"], []).append(rec)
            if rec["died"] is not None:
                deaths.setdefault(rec["died"], []).append(rec)
        phase_starts = dict(self.phases)
        live, maxima, phase_max, total, phase = {}, {}, {}, 0, "forward"
        for clock in range(1, self.clock + 1):
            phase = phase_starts.get(clock, phase)
            events = [(r, -1) for r in deaths.get(clock, [])] + [(r, 1) for r in births.get(clock, [])]
            for rec, sign in events:  # frees before this op, then what this op made
                cat = category_of(rec)
                live[cat] = live.get(cat, 0) + sign * rec["bytes"]
                maxima[cat] = max(maxima.get(cat, 0), live[cat])
                total += sign * rec["bytes"]
            phase_max[phase] = max(phase_max.get(phase, 0), total)
        return maxima, phase_max


# What Kineto and the CPU allocator write to the process's stderr (file descriptor 2) while the profiler runs:
# "USDT:<time> ... SyncActivityProfilerHandler.cpp:52] profiler_start", "STAGE:... Completed Stage: ...",
# "[W1127 07:41:17 ... CPUAllocator.cpp:245] Memory block of unknown size was allocated before the profiling".
_PROFILER_LOG_LINE = re.compile(r"^(USDT|STAGE):|^\[W\d{4} .*CPUAllocator\.cpp:\d+\] Memory block of unknown size")


@contextlib.contextmanager
def without_profiler_log_lines():
    """Run the profiler with its own log lines dropped; anything else written to stderr still shows."""
    sys.stderr.flush()
    with tempfile.TemporaryFile(mode="w+b") as caught:
        saved = os.dup(2)
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            kept = [
                ln for ln in caught.read().decode(errors="replace").splitlines() if not _PROFILER_LOG_LINE.match(ln)
            ]
            if kept:
                print("\n".join(kept), file=sys.stderr)


_PHASE_MARK = "minigpt phase: "


class AllocatorMeter:
    """The allocator's bytes over a step, phase by phase, from torch.profiler's memory events.

    Use it as a context around the step, call mark(name) where each phase begins (mark(None): stop
    counting), then phase_peaks(before) gives {phase: the most bytes allocated at once}, where `before` is
    what was allocated when the meter started (the profiler sees changes, not totals).
    """

    def __init__(self, device: torch.device) -> None:
        self.device_type = {"cpu": "CPU", "cuda": "CUDA"}.get(device.type)
        # the one GPU counted (a bare "cuda" is the current one): the profiler records every GPU of the process
        self.device_index = cuda_index(device) if device.type == "cuda" else None
        self._profiler = None
        self._quiet = without_profiler_log_lines()

    @property
    def available(self) -> bool:
        """Whether this torch build records allocations on this device (Kineto, and a CPU or a CUDA device)."""
        return self.device_type is not None and torch.autograd.kineto_available()

    def mark(self, phase: str | None) -> None:
        """The step enters `phase` now (None: what follows is not counted)."""
        with torch.profiler.record_function(_PHASE_MARK + (phase or "")):
            pass

    def __enter__(self) -> AllocatorMeter:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.device_type == "CUDA":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._quiet.__enter__()
        self._profiler = torch.profiler.profile(activities=activities, profile_memory=True)
        self._profiler.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._profiler.__exit__(*exc)
        finally:
            self._quiet.__exit__(*exc)

    def _counts(self, event) -> bool:
        """Whether a memory event is this meter's device's (any GPU's but ours is left out)."""
        return self.device_type != "CUDA" or self.device_index is None or event.device_index() == self.device_index

    def phase_peaks(self, before: int) -> dict[str, int]:
        """{phase: largest allocated bytes while in it}, counting from `before` bytes at the start."""
        kind = getattr(torch.autograd.DeviceType, self.device_type)
        events = sorted(self._profiler.profiler.kineto_results.events(), key=lambda e: e.start_ns())
        allocated, phase, peaks = before, None, {}
        for event in events:
            name = event.name()
            if name.startswith(_PHASE_MARK):
                phase = name[len(_PHASE_MARK) :] or None
            elif name == "[memory]" and event.device_type() == kind and self._counts(event):
                allocated += event.nbytes()  # an allocation (> 0) or a free (< 0)
                if phase is not None:
                    peaks[phase] = max(peaks.get(phase, 0), allocated)
            if phase is not None and phase not in peaks:
                peaks[phase] = allocated
        return peaks
