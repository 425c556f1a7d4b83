"""Write a file so that nobody ever sees half of it: a temp file in the same folder, then a rename.

A rename within one folder is atomic, so a reader (or a crash in the middle of a save) finds the old
file or the new one, never a truncated mix. Checkpoints, token caches and the built-in corpus use it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def write_atomically(path: str | Path, write: Callable[[BinaryIO], object]) -> Path:
    """Call `write(f)` on a temp file next to `path`, flush it to disk, then rename it over `path`.

    If `write` fails the temp file is removed and whatever was at `path` before is left untouched.
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
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)
    return path


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
