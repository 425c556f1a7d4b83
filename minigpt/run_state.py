"""Save and load the whole training state, atomically.

A checkpoint is written to a temporary file in the same folder and then renamed over the old one:
a rename is atomic, so a crash in the middle of a save leaves the previous checkpoint intact.
"""

from __future__ import annotations

from pathlib import Path

import torch

from minigpt.files import write_atomically

FORMAT = "minigpt-checkpoint"
VERSION = 1


class CheckpointError(RuntimeError):
    """A checkpoint file that cannot be used: truncated, corrupt, or not a minigpt checkpoint."""


def save_checkpoint(state: dict, path: str | Path) -> Path:
    """Write `state` (plus a format marker) to `path` via a temp file and an atomic rename."""
    marked = {"format": FORMAT, "version": VERSION, **state}
    return write_atomically(path, lambda f: torch.save(marked, f))


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """Load a checkpoint written by save_checkpoint, with a clear error for anything else."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}; train without --resume first, or check --out")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # a damaged file fails in many ways (EOFError, UnpicklingError, KeyError, ...)
        raise CheckpointError(
            f"{path} is truncated, corrupt or not a minigpt checkpoint ({type(err).__name__}: "
            f"{str(err).splitlines()[0][:120]}); delete it to start over, or point --out elsewhere"
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path} is a PyTorch file but not a minigpt checkpoint (no '{FORMAT}' marker)")
    if state.get("version") != VERSION:
        raise CheckpointError(f"{path} is checkpoint version {state.get('version')}; this minigpt reads {VERSION}")
    return state
