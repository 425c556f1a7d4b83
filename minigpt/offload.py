"""Activation offloading: what autograd saves for backward leaves the device in the forward and comes back.

Chapter 6's saved-tensor hooks, one step further. torch.autograd.graph.saved_tensors_hooks(pack, unpack)
lets us choose what the graph holds for each saved tensor: `pack` runs when the forward saves it and
returns anything; `unpack` runs when the backward needs it and must give the same values back.
- On CUDA, pack copies the tensor's bytes to pinned host memory (the mechanism of
  torch.autograd.graph.save_on_cpu) and unpack copies them back.
- On a CPU, the device IS host memory, so we go one level down the memory hierarchy: pack writes the
  bytes to a temp file and unpack reads them back. Written pages sit in the operating
  system's page cache, which is not this process's memory (RSS), and can go to disk when memory is short.
  Plain writes and reads (os.pwrite, os.preadv), not a memory map: mapped pages that stay resident would
  count in the RSS. The file never has a name (tempfile.TemporaryFile: Linux's O_TMPFILE; elsewhere a name
  removed the moment it is open), so its bytes live exactly as long as the process holds it open: nothing is
  left on disk after a crash or kill -9, and closing it at the end of each window gives the space back.

What moves: each saved floating-point tensor's whole storage (views of one storage are written once, and
come back with their own sizes and strides, so the gradients are bitwise those of a run without it).
What stays: tensors under OFFLOAD_MIN_BYTES, integer tensors (token ids and targets: the loop holds the
batch anyway), parameters, and autocast's 16-bit copies of them (they are weights, not activations).
With checkpointing, only what the checkpointed regions save through the outer hooks moves: "full" and
"selective" each block's input, "sqrt" each segment's input, plus everything saved outside the blocks
(the final norm's and the loss head's tensors). Selective checkpointing's kept matmul outputs stay: its
policy holds them in its own cache, which no hook sees.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import tempfile
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

import torch

from minigpt.heap import MMAP_THRESHOLD_BYTES, set_mmap_threshold

# Smaller saved tensors stay on the device: a write and a read cost more than they weigh (torchtune's
# activation offloading uses the same 1 KiB floor). The estimator splits the activation table with it.
OFFLOAD_MIN_BYTES = 1024


class OffloadError(OSError):
    """Offloading could not write or read its temp file (the disk is full, the disk failed)."""


@dataclass
class _Stored:
    """One storage that left the device: where its bytes are, and its copy back if one is alive now."""

    nbytes: int
    offset: int = 0  # CPU: where its bytes start in the temp file
    host: torch.Tensor | None = None  # CUDA: its bytes in pinned host memory
    source: object = None  # a weak reference to the storage it was packed from, while that is alive
    restored: object = field(default=None)  # a weak reference to its tensor unpacked in backward


def _is_weight_copy(t: torch.Tensor) -> bool:
    """Autocast's 16-bit copy of a parameter (or a view of one, such as the transposed weight a matmul saves):
    a cast whose autograd input is a leaf, the parameter."""
    fn = (t._base if t._base is not None else t).grad_fn
    return (
        fn is not None
        and type(fn).__name__ == "ToCopyBackward0"
        and type(fn.next_functions[0][0]).__name__ == ("AccumulateGrad")
    )


def open_offload_file(parent: str | None = None) -> BinaryIO:
    """A new temp file without a name for the offloaded bytes, in `parent` (default: TMPDIR).

    ValueError, saying what to do, if the folder cannot take one."""
    where = parent if parent is not None else tempfile.gettempdir()
    try:
        return tempfile.TemporaryFile(dir=where, buffering=0)
    except OSError as err:
        raise ValueError(
            f"--offload-activations: cannot make a temp file in {where} ({err.strerror or err}); "
            "point --offload-dir (or TMPDIR) at a writable folder with room for the activations"
        ) from None


class ActivationOffloader:
    """Saved-tensor hooks that move a forward's saved tensors to host memory (CUDA) or a temp file (CPU).

    Use as a context manager around forward AND backward (the temp file lives that long and is closed
    on the way out, whatever happened); `saving()` around each forward; `release()` after each backward.
    """

    def __init__(
        self,
        keep: Iterable[torch.Tensor],
        device: torch.device | str,
        folder: str | None = None,
        min_bytes: int = OFFLOAD_MIN_BYTES,
    ) -> None:
        self.device = torch.device(device)
        self.keep_ptrs = {t.untyped_storage().data_ptr() for t in keep}  # parameters and buffers
        self.parent, self.min_bytes = folder, min_bytes
        self._file: BinaryIO | None = None  # CPU: the temp file, open while the `with` block runs
        self._fd: int | None = None
        self._end = 0  # bytes in the temp file now
        self._stored: dict[tuple[int, int], _Stored] = {}  # (storage address, version) -> where it went
        self._kept: dict[int, tuple[object, int]] = {}  # what stayed: address -> (weak ref, bytes)
        self.offloaded_bytes = 0  # bytes off the device now (this micro-batch)
        self.peak_offloaded_bytes = 0  # the most there were at once
        self.enabled = True  # for measure(): the same switch as SavedTensorMeter's (always on here)
        self.on_load = None  # for measure(): called with each storage read back, right after it is made
        self.on_store = None  # for measure(): called with each storage written out, before the device frees it

    # -- the temp file: opened on entry, closed on exit (success, error or Ctrl-C) ------------------------
    def __enter__(self) -> ActivationOffloader:
        if self.device.type != "cuda":
            _give_freed_memory_back()
            self._file = open_offload_file(self.parent)
            self._fd = self._file.fileno()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
        self._fd = None
        if self._file is not None:
            self._file.close()  # the file has no name: closing it frees its space
            self._file = None

    def saving(self) -> torch.autograd.graph.saved_tensors_hooks:
        """The hooks, for one forward: what it saves goes through pack and comes back through unpack."""
        if self.device.type != "cuda" and self._fd is None:
            raise RuntimeError("ActivationOffloader.saving() outside its `with` block: the temp file is not open")
        return torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def release(self) -> None:
        """After a backward: forget what it stored and give the file's space back (the next forward reuses it)."""
        self._stored.clear()
        self._kept.clear()
        self._end = self.offloaded_bytes = 0
        if self._fd is not None:
            os.ftruncate(self._fd, 0)

    def alive(self) -> dict[int, int]:
        """{address: bytes} of the saved storages that stayed on the device and are still alive (for measure())."""
        return {ptr: n for ptr, (ref, n) in self._kept.items() if ref() is not None}

    # -- pack and unpack ------------------------------------------------------------------------------
    def _stays(self, t: torch.Tensor) -> bool:
        storage = t.untyped_storage()
        return (
            not t.is_floating_point()
            or t.device.type != self.device.type  # ("cuda" and "cuda:0" are the same GPU here)
            or storage.nbytes() < self.min_bytes
            or storage.data_ptr() in self.keep_ptrs
            or _is_weight_copy(t)
        )

    def _pack(self, t: torch.Tensor):
        # A detached alias, never t itself: when t is the op's own output, holding t would tie the graph
        # into a reference cycle (SavedTensorMeter does the same).
        if self._stays(t):
            storage = t.untyped_storage()
            if storage.data_ptr() not in self.keep_ptrs:
                self._kept[storage.data_ptr()] = (_storage_ref(t), storage.nbytes())
            return t.detach()
        storage = t.untyped_storage()
        key = (storage.data_ptr(), t._version)  # an in-place change makes new values: stored again
        stored = self._stored.get(key)
        if stored is None or stored.source() is None:  # not stored yet, or that storage died and this is another
            stored = self._store(t)
            self._stored[key] = stored
        return (stored, t.dtype, t.size(), t.stride(), t.storage_offset())

    def _unpack(self, packed):
        if isinstance(packed, torch.Tensor):
            return packed
        stored, dtype, size, stride, offset = packed
        back = stored.restored() if stored.restored is not None else None
        storage = back.untyped_storage() if back is not None else self._load(stored)  # views share one copy
        out = torch.empty(0, dtype=dtype, device=self.device).set_(storage, offset, size, stride)
        stored.restored = weakref.ref(out)
        return out

    def _store(self, t: torch.Tensor) -> _Stored:
        storage = t.untyped_storage()
        n = storage.nbytes()
        stored = _Stored(nbytes=n, source=_storage_ref(t))
        if self.on_store is not None:
            self.on_store(storage)
        if self.device.type == "cuda":
            stored.host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
            stored.host.copy_(_bytes_of(storage, self.device), non_blocking=True)  # ordered on this stream
        else:
            stored.offset = self._end
            self._write(storage.data_ptr(), n, self._end)
            self._end += n
        self.offloaded_bytes += n
        self.peak_offloaded_bytes = max(self.peak_offloaded_bytes, self.offloaded_bytes)
        return stored

    def _load(self, stored: _Stored) -> torch.UntypedStorage:
        buf = torch.empty(stored.nbytes, dtype=torch.uint8, device=self.device)
        if self.on_load is not None:
            self.on_load(buf.untyped_storage())
        if self.device.type == "cuda":
            buf.copy_(stored.host, non_blocking=True)
        else:
            self._read(buf, stored.offset)
        return buf.untyped_storage()

    # -- plain writes and reads of raw bytes ------------------------------------------------------------
    def _write(self, address: int, n: int, offset: int) -> None:
        view = memoryview((ctypes.c_char * n).from_address(address)).cast("B")  # the storage's bytes, no copy
        done = 0
        try:
            while done < n:
                done += os.pwrite(self._fd, view[done:], offset + done)
        except OSError as err:
            self.__exit__()  # the temp file goes at once: a full disk is not left full
            if err.errno == errno.ENOSPC:
                raise OffloadError(
                    f"--offload-activations: the disk is full after {(offset + done) / 2**20:,.1f} MiB of "
                    f"activations; free some space or point --offload-dir (or TMPDIR) at a larger disk "
                    "(the temp files are removed)"
                ) from None
            raise OffloadError(f"--offload-activations: cannot write the temp file ({err.strerror or err})") from None

    def _read(self, buf: torch.Tensor, offset: int) -> None:
        view, done, n = memoryview(buf.numpy()), 0, buf.numel()
        while done < n:
            got = os.preadv(self._fd, [view[done:]], offset + done)
            if got == 0:
                raise OffloadError("--offload-activations: the temp file is shorter than what was written to it")
            done += got


_MALLOC_FIXED = []


def _give_freed_memory_back() -> None:
    """On glibc, fix malloc's mmap threshold (once per process), so that freed activations leave the RSS."""
    if _MALLOC_FIXED:
        return
    _MALLOC_FIXED.append(True)
    set_mmap_threshold(MMAP_THRESHOLD_BYTES)  # as train() does (minigpt.heap); a no-op where libc is not glibc


def _storage_ref(t: torch.Tensor):
    """A callable that returns something while t's storage is alive, None once it is freed."""
    from torch.multiprocessing.reductions import StorageWeakRef

    ref = StorageWeakRef(t.untyped_storage())
    return lambda: None if ref.expired() else True


def _bytes_of(storage: torch.UntypedStorage, device: torch.device) -> torch.Tensor:
    """A 1-D uint8 tensor over the storage's bytes (a view, no copy)."""
    return torch.empty(0, dtype=torch.uint8, device=device).set_(storage)


@contextlib.contextmanager
def saving(offloader: ActivationOffloader | None) -> Iterator[None]:
    """offloader.saving(), or nothing without an offloader: what forward_backward wraps each forward in."""
    if offloader is None:
        yield
        return
    with offloader.saving():
        yield
