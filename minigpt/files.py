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
    return path
