"""A run's saved state: the run folder, its checkpoint (atomic saves) and the RNG plumbing of resume.

A checkpoint is written to a temporary file in the same folder and then renamed over the old one:
a rename is atomic, so a crash in the middle of a save leaves the previous checkpoint intact.
It holds everything a resumed run needs to continue exactly where the straight run would have been:
weights (and fp32 master copies), AdamW's moments, the schedule, the GradScaler, every RNG, the history.

Also here, the plumbing that keeps a run's work safe: StopSignals turns Ctrl-C (SIGINT) and SIGTERM into
"stop after this step and save", and RunFolder locks its folder so that two runs never write to one.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import numpy as np
import torch

from minigpt.files import remove_stale_temp_files, write_atomically

try:
    import fcntl  # POSIX; Windows has no flock, and runs there are simply not locked
except ImportError:  # pragma: no cover - exercised on Windows only
    fcntl = None


FORMAT = "minigpt-checkpoint"
VERSION = 1


class CheckpointError(RuntimeError):
    """A checkpoint file that cannot be used: truncated, corrupt, or not a minigpt checkpoint."""


class RunFolderBusy(RuntimeError):
    """Another process is writing to this run folder (it holds the folder's lock)."""


def first_line(text: str, limit: int = 120) -> str:
    """The first line of `text`, cut at a word boundary (with "...") if longer than `limit` characters."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    if len(line) <= limit:
        return line
    return line[:limit].rsplit(" ", 1)[0].rstrip(" ,;:") + " ..."


def save_checkpoint(state: dict, path: str | Path) -> Path:
    """Write `state` (plus a format marker) to `path` via a temp file and an atomic rename."""
    marked = {"format": FORMAT, "version": VERSION, **state}
    return write_atomically(path, lambda f: torch.save(marked, f), size_hint=tensor_bytes(marked))


def tensor_bytes(value: object) -> int:
    """The bytes of every tensor in a nested dict, list or tuple: about what torch.save writes for it."""
    if isinstance(value, torch.Tensor):
        return value.untyped_storage().nbytes()
    if isinstance(value, dict):
        return sum(tensor_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    return 0


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu", mmap: bool = False) -> dict:
    """Load a checkpoint written by save_checkpoint, with a clear error for anything else.

    mmap: map the file instead of reading it (torch.load's mmap): a tensor's bytes are read when it is used."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}; train without --resume first, or check --out")
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed by the with below; opened apart to tell "unreadable" from "corrupt"
    except OSError as err:  # the file is there but cannot be read (permissions, I/O error)
        raise CheckpointError(f"cannot read {path} ({err.strerror or err}); check its permissions") from None
    try:
        with f:
            _check_zip_crcs(f)
            f.seek(0)
            mapped = mmap and os.name == "posix"  # where mapping is known to work; elsewhere read as before
            source = path if mapped else f  # torch maps a file by its path only
            state = torch.load(source, map_location=map_location, weights_only=True, mmap=mapped)
    except Exception as err:  # a damaged file fails in many ways (EOFError, UnpicklingError, KeyError, ...)
        raise CheckpointError(
            f"{path} is truncated, corrupt or not a minigpt checkpoint ({type(err).__name__}: "
            f"{first_line(str(err), 100)}); pass --restart to move the run aside and start over (nothing is "
            "deleted), or point --out elsewhere"
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path} is a PyTorch file but not a minigpt checkpoint (no '{FORMAT}' marker)")
    version = state.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise CheckpointError(
            f"{path} is checkpoint format version {version}, newer than this minigpt reads ({VERSION}); "
            "upgrade minigpt to resume it"
        )
    if version < VERSION:
        raise CheckpointError(f"{path} is checkpoint format version {version}; this minigpt reads only {VERSION}")
    return state


def _check_zip_crcs(f: IO[bytes]) -> None:
    """Raise if any part of the checkpoint fails its CRC-32 checksum.

    torch.save writes a zip archive with a checksum per part, but torch.load does not check them: a flipped
    bit in the weights would load silently. zipfile's testzip() reads every part and checks it.
    """
    with zipfile.ZipFile(f) as archive:
        bad = archive.testzip()
    if bad is not None:
        raise ValueError(f"checksum mismatch in its part {bad}")


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
    if state["cuda"] and torch.cuda.is_available():  # a run saved on more GPUs than here: the GPUs here
        torch.cuda.set_rng_state_all(state["cuda"][: torch.cuda.device_count()])
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    random.setstate((3, tuple(state["python"]), None))
    data_gen.set_state(state["data"])


# ----------------------------------------------------------------------------------------------------------
# Stopping cleanly: Ctrl-C and SIGTERM become "finish this step, save, return"


class StopSignals:
    """While active, SIGINT (Ctrl-C, or a notebook's "interrupt kernel") and SIGTERM only set `received`.

    The training loop looks at `received` between steps, so a step is never cut in half: a half-done step
    can hold partly accumulated gradients or a partly applied AdamW update, which must never be saved.
    A second signal raises KeyboardInterrupt at once (a user who insists); even then, a save in progress
    leaves the old checkpoint or the new one, never a mix, because saves are atomic.
    Python delivers signals to the main thread only, so elsewhere this does nothing; the previous handlers
    come back on exit, error or not.
    """

    def __init__(self) -> None:
        self.received: str | None = None  # "SIGINT" or "SIGTERM" once one arrived
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            # None: a handler not installed from Python; the default is the closest we can put back
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._previous.clear()

    def _handle(self, signum: int, frame: object) -> None:
        if self.received:
            raise KeyboardInterrupt  # the second signal: stop now
        self.received = signal.Signals(signum).name


# ----------------------------------------------------------------------------------------------------------
# The run folder: checkpoint.pt and log.jsonl

# Settings a resumed run must share with the saved one: they fix the model's shape, its weights' dtype
# and what the token ids mean. Others (steps, lr, batch, accum, ...) may change on resume.
RESUME_MUST_MATCH = ("preset", "n_layer", "n_embd", "n_head", "precision", "master_weights", "ctx", "tokenizer")
# (a LoRA run's adapters also fix their shapes, and the base's storage what they were trained against)
RESUME_MUST_MATCH += ("lora_rank", "lora_targets", "base_dtype", "quant_block", "train_norms", "train_embedding")
# (and the adapters' scale alpha / rank: a new alpha would rescale what the adapters have learned, silently)
RESUME_MUST_MATCH += ("lora_alpha",)
# (and the optimizer: AdamW's fp32 moments and AdamW8bit's codes are different state; with or without the
# step in backward the state is the same, so --optimizer-in-backward may change)
RESUME_MUST_MATCH += ("optimizer",)
# (and AdamW's other settings, which its saved state carries and would keep, whatever the config says;
# TrainConfig fields without a flag of their own)
RESUME_MUST_MATCH += ("weight_decay", "betas")

# What a resumed run may change and the loop applies: --lr, --steps and --warmup-steps re-plan the schedule
# from the saved step (minigpt.step.follow_schedule), the rest is read afresh every step. Not settings at all:
NOT_SETTINGS = ("resume", "restart", "verbose", "progress")


def resume_changes(saved: dict, now: dict) -> list[str]:
    """'--name A -> B' for each setting a resumed run was given differently from the saved run."""
    return [
        f"--{name.replace('_', '-')} {saved[name]} -> {now[name]}"
        for name in now
        if name in saved and name not in NOT_SETTINGS and _differ(saved[name], now[name])
    ]


def _differ(saved: object, now: object) -> bool:
    """Whether two config values differ; a tuple saved in a checkpoint may come back as a list."""
    if isinstance(saved, (list, tuple)) and isinstance(now, (list, tuple)):
        return list(saved) != list(now)
    return saved != now


def resume_mismatches(saved: dict, now: dict) -> list[str]:
    """'--name: saved A, given B' for each setting in RESUME_MUST_MATCH that differs."""
    flag = lambda name: "--" + name.replace("_", "-")  # noqa: E731
    return [
        f"{flag(name)}: saved {saved[name]}, given {now[name]}"
        for name in RESUME_MUST_MATCH
        if name in saved and _differ(saved[name], now[name])
    ]


class RunFolder:
    """The folder of one run (`--out`): checkpoint.pt holds the whole training state, log.jsonl one line a step.

    While a run writes to it, the folder is locked (a `.lock` file holding the run's pid), so a second
    run on the same folder fails at once instead of overwriting the first one's checkpoint.
    """

    def __init__(self, out: str | Path) -> None:
        self.path = Path(out)
        self.checkpoint = self.path / "checkpoint.pt"
        self.log = self.path / "log.jsonl"
        self.lock_path = self.path / ".lock"
        self.saved_step: int | None = None  # the step of the checkpoint on disk, once known

    def check_usable(self) -> None:
        """--out must name a folder this process can read and write, or a path where one can be made."""
        existing = next((p for p in (self.path, *self.path.parents) if p.exists()), None)  # the folder or an ancestor
        if existing is None:
            return
        if not existing.is_dir():
            where = "" if existing == self.path else f" (its parent {existing} is a file)"
            raise NotADirectoryError(f"--out {self.path} is not a folder{where}; choose a folder for the run")
        if not os.access(existing, os.R_OK | os.W_OK | os.X_OK):
            raise PermissionError(
                f"cannot read and write the run folder {existing} (permission denied); "
                "fix its permissions or choose another --out"
            )

    def check_fresh(self) -> None:
        """A new run never overwrites a saved one: raise if this folder already holds a checkpoint or a log."""
        found = [p.name for p in (self.checkpoint, self.log) if p.exists()]
        if not found:
            return
        if self.checkpoint.exists():
            ways = "pass --resume to continue it, --restart to move it aside and start over"
        else:  # a run that stopped (diverged, killed, its checkpoint deleted) before a checkpoint was saved
            ways = "it saved no checkpoint, so there is nothing to resume: --restart moves it aside to start over"
        raise FileExistsError(
            f"{self.path} already holds a run ({', '.join(found)}); {ways}, or choose another --out "
            "(a new run never overwrites a saved one)"
        )

    def check_resumable(self) -> None:
        """--resume needs a checkpoint: say what is there instead, and the way on (before the folder is locked,
        so a resume that cannot work leaves no folder behind)."""
        if self.checkpoint.is_file():
            return
        if not self.path.is_dir():
            raise CheckpointError(
                f"no checkpoint at {self.checkpoint}: there is no folder {self.path}; train without --resume to "
                "start a run there, or check --out"
            )
        holder = self.holder()
        if holder is not None:  # still training, not stopped: --restart is not the way on
            raise RunFolderBusy(
                f"{self.path} is in use by another run (pid {holder}), which has not saved a checkpoint yet; wait for "
                "it to save or finish, then --resume (or choose another --out)"
            )
        if self.log.exists():
            raise CheckpointError(
                f"no checkpoint at {self.checkpoint}: the run stopped before its first save (only log.jsonl is "
                "there), so there is nothing to resume; pass --restart instead of --resume to move it aside and "
                "start over"
            )
        raise CheckpointError(f"no checkpoint at {self.checkpoint}; train without --resume to start a run there")

    def move_aside(self) -> Path | None:
        """--restart: move this run's files into a new folder beside it, OUT.old-N; return it (None: no run here).

        Nothing is deleted; only the run's own files move (checkpoint.pt, log.jsonl), whatever else the folder
        holds stays. Call it holding the lock.
        """
        files = [p for p in (self.checkpoint, self.log) if p.exists()]
        if not files:
            return None
        base, n = self.path.resolve(), 1
        while True:
            aside = base.with_name(f"{base.name}.old-{n}")
            try:
                aside.mkdir()  # fails if it exists: two restarts never share a folder
                break
            except FileExistsError:
                n += 1
        for p in files:
            os.replace(p, aside / p.name)
        return aside

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the folder's lock for the duration of the with-block; RunFolderBusy if another run holds it.

        Leftover temp files of a save that was killed (kill -9 cannot clean up) are removed once the lock is
        ours: no other process can be writing them then.
        """
        self.path.mkdir(parents=True, exist_ok=True)
        lock = self._acquire_lock()
        try:
            remove_stale_temp_files(self.checkpoint)
            yield
        finally:
            if lock is not None:
                self.lock_path.unlink(missing_ok=True)
                lock.close()  # closing the file releases the flock

    def holder(self) -> str | None:
        """The pid of the run that holds this folder's lock now (None: nobody, or no flock on this system)."""
        if fcntl is None or not self.lock_path.is_file():
            return None
        with open(self.lock_path) as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                return lock.read().strip() or "unknown"
            fcntl.flock(lock, fcntl.LOCK_UN)
        return None

    def _acquire_lock(self) -> IO[str] | None:
        if fcntl is None:  # no flock on this system: run unlocked
            return None
        while True:
            lock = open(self.lock_path, "a+")  # noqa: SIM115 - held open for the run; closed by locked()
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # BlockingIOError: somebody holds it
                lock.seek(0)
                pid = lock.read().strip() or "unknown"
                lock.close()
                raise RunFolderBusy(
                    f"{self.path} is in use by another run (pid {pid}); wait for it to finish, or choose another --out"
                ) from None
            # The holder before us may have deleted the lock file between our open and our flock: then we
            # locked a file nobody else will see. Start again with the file that is there now.
            try:
                same_file = os.stat(self.lock_path).st_ino == os.fstat(lock.fileno()).st_ino
            except FileNotFoundError:
                same_file = False
            if same_file:
                lock.seek(0)
                lock.truncate()
                lock.write(str(os.getpid()))
                lock.flush()
                return lock
            lock.close()

    def save(self, snapshot: dict) -> Path:
        """Write a checkpoint (a dict holding at least "step") atomically; the previous one survives a failure.

        If the write fails (a full disk, say) the previous checkpoint is left as it was and CheckpointError
        says so.
        """
        try:
            path = save_checkpoint(snapshot, self.checkpoint)
        except OSError as err:
            kept = "no earlier checkpoint" if self.saved_step is None else f"the step-{self.saved_step} checkpoint"
            raise CheckpointError(
                f"could not save {self.checkpoint} at step {snapshot['step']} "
                f"({getattr(err, 'facts', None) or err.strerror or err}); "
                f"{kept} is left as it was. Free some space (or fix the folder), then resume with --resume"
            ) from None
        self.saved_step = snapshot["step"]
        return path

    def load(self, train_config: dict, steps: int) -> dict:
        """The checkpoint to resume from, after checking it fits the run's settings (before any slow work)."""
        saved = load_checkpoint(self.checkpoint)
        differ = resume_mismatches(saved.get("train_config", {}), train_config)
        if differ:
            raise ValueError(
                f"cannot resume {self.path} with different settings: {'; '.join(differ)}. Resume with the saved "
                "settings, or choose another --out for a new run"
            )
        if saved["step"] > steps:
            raise ValueError(
                f"{self.checkpoint} is at step {saved['step']}, past --steps {steps}; "
                f"pass --steps {saved['step']} or more"
            )
        self.saved_step = saved["step"]
        return saved

    def different_model(self, err: Exception) -> CheckpointError:
        """The error for a checkpoint whose model does not fit the one this run builds."""
        return CheckpointError(
            f"{self.checkpoint} holds a different model ({first_line(str(err), 100)}); "
            "resume with its settings, or choose another --out"
        )

    def open_log(self, history: list[dict]) -> IO[str]:
        """log.jsonl, rewritten from `history` (the checkpoint's, on resume) and left open for appending."""
        self.path.mkdir(parents=True, exist_ok=True)
        log = open(self.log, "w")  # noqa: SIM115 - the loop appends a line per step, then closes it
        log.writelines(json.dumps(r) + "\n" for r in history)
        return log
