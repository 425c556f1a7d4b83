"""Write a file so that nobody ever sees half of it: a temp file in the same folder, then a rename.

A rename within one folder is atomic, so a reader (or a crash in the middle of a save) finds the old
file or the new one, never a truncated mix. Checkpoints, token caches and the built-in corpus use it.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


class DiskFull(OSError):
    """The disk filled up while a file was written: which disk, how much the file needs, how much is free."""

    def __init__(self, facts: str, advice: str) -> None:
        super().__init__(errno.ENOSPC, f"{facts}; {advice}")
        self.facts = facts  # without the advice, for a caller that gives its own


def write_atomically(path: str | Path, write: Callable[[BinaryIO], object], size_hint: int | None = None) -> Path:
    """Call `write(f)` on a temp file next to `path`, flush it to disk, then rename it over `path`.

    If `write` fails the temp file is removed and whatever was at `path` before is left untouched; a full disk
    is a DiskFull that names the folder and the space needed (size_hint: about how many bytes the file takes).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())  # the bytes are on disk before the name points at them
        os.replace(tmp, path)
    except BaseException as error:
        written = Path(tmp).stat().st_size if Path(tmp).exists() else 0
        Path(tmp).unlink(missing_ok=True)
        if _is_disk_full(error):
            raise _disk_full(path, written, size_hint) from None
        raise
    _fsync_folder(path.parent)
    return path


def _is_disk_full(error: BaseException) -> bool:
    """ENOSPC (or a quota) from the OS, or torch.save's way of saying its write came up short."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return True
    return isinstance(error, RuntimeError) and ("unexpected pos" in str(error) or "file write failed" in str(error))


def _disk_full(path: Path, written: int, size_hint: int | None) -> DiskFull:
    free = shutil.disk_usage(path.parent).free
    need = f"about {_mib(size_hint)}" if size_hint else f"more than the {_mib(written)} written before it filled"
    return DiskFull(
        f"the disk holding {path.parent} is full: {path.name} needs {need}, and {_mib(free)} are free there",
        f"the previous {path.name}, if any, is untouched; free some space or write to another disk",
    )


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable (a power cut could otherwise forget it); not possible on Windows."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def stale_temp_files(path: str | Path) -> list[Path]:
    """Temp files write_atomically(path, ...) left behind: only a killed process (kill -9, power cut) leaves any."""
    path = Path(path)
    return sorted(path.parent.glob(path.name + ".*.tmp"))


def remove_stale_temp_files(path: str | Path) -> int:
    """Delete stale_temp_files(path); call it only when no other process can be writing `path`. Returns the count."""
    stale = stale_temp_files(path)
    for tmp in stale:
        tmp.unlink(missing_ok=True)
    return len(stale)
