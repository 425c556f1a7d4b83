"""A run's saved state: the run folder, its checkpoint (atomic saves) and the RNG plumbing of resume.

A checkpoint is written to a temporary file in the same folder and then renamed over the old one:
a rename is atomic, so a crash in the middle of a save leaves the previous checkpoint intact.
It holds everything a resumed run needs to continue exactly where the straight run would have been:
weights (and fp32 master copies), AdamW's moments, the schedule, the GradScaler, every RNG, the history.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict
from pathlib import Path
from typing import IO, TYPE_CHECKING

import numpy as np
import torch

from minigpt.files import write_atomically

if TYPE_CHECKING:  # train imports this module; these names are for the type hints only
    from minigpt.train import StepState, TrainConfig, TrainResult

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


# ----------------------------------------------------------------------------------------------------------
# Random number generators: a resumed run draws the same batches and dropout masks as the straight run


def rng_state(data_gen: torch.Generator) -> dict:
    """Every RNG a run draws from: torch's (dropout), CUDA's, numpy's, Python's, and the batch sampler's."""
    np_state = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]],
        "python": list(random.getstate()[1]),
        "data": data_gen.get_state(),
    }


def set_rng_state(state: dict, data_gen: torch.Generator) -> None:
    """Put back what rng_state() recorded."""
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    random.setstate((3, tuple(state["python"]), None))
    data_gen.set_state(state["data"])


# ----------------------------------------------------------------------------------------------------------
# The run folder: checkpoint.pt and log.jsonl


class RunFolder:
    """The folder of one run (`--out`): checkpoint.pt holds the whole training state, log.jsonl one line a step."""

    def __init__(self, out: str | Path) -> None:
        self.path = Path(out)
        self.checkpoint = self.path / "checkpoint.pt"
        self.log = self.path / "log.jsonl"

    def check_fresh(self) -> None:
        """A new run never overwrites a saved one: raise if this folder already holds a checkpoint."""
        if self.checkpoint.exists():
            raise FileExistsError(
                f"{self.checkpoint} already holds a checkpoint; pass --resume to continue it, or choose another "
                "--out (a new run never overwrites a saved one)"
            )

    def save(self, cfg: TrainConfig, state: StepState, result: TrainResult, data_gen: torch.Generator) -> Path:
        """Checkpoint everything the loop needs to continue after len(result.history) steps."""
        master = state.master
        snapshot = {
            "model": state.model.state_dict(),
            "master": [m.detach() for m in master.params] if master else None,
            "optimizer": state.optimizer.state_dict(),
            "scheduler": state.scheduler.state_dict(),
            "scaler": state.scaler.state_dict() if state.scaler is not None else None,
            "rng": rng_state(data_gen),
            "step": len(result.history),
            "history": result.history,
            "val_history": result.val_history,
            "train_config": asdict(cfg),
            "model_config": state.model.cfg.to_dict(),
        }
        return save_checkpoint(snapshot, self.checkpoint)

    def resume(self, state: StepState, result: TrainResult, data_gen: torch.Generator) -> int:
        """Load the checkpoint into the step state, the history and the RNGs; return the step to continue from."""
        saved = load_checkpoint(self.checkpoint)
        state.model.load_state_dict(saved["model"])
        if state.master:
            for (_, m), value in zip(state.master.pairs, saved["master"]):
                m.data.copy_(value)
        state.optimizer.load_state_dict(saved["optimizer"])
        state.scheduler.load_state_dict(saved["scheduler"])
        if state.scaler is not None:
            state.scaler.load_state_dict(saved["scaler"])
        set_rng_state(saved["rng"], data_gen)
        result.history, result.val_history = saved["history"], [tuple(v) for v in saved["val_history"]]
        return saved["step"]

    def open_log(self, history: list[dict]) -> IO[str]:
        """log.jsonl, rewritten from `history` (the checkpoint's, on resume) and left open for appending."""
        self.path.mkdir(parents=True, exist_ok=True)
        log = open(self.log, "w")  # noqa: SIM115 - the loop appends a line per step, then closes it
        log.writelines(json.dumps(r) + "\n" for r in history)
        return log
