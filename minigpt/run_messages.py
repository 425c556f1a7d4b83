"""What `minigpt train` says, and who says it: one voice under torchrun, and the command that resumes a run.

torchrun starts one process per device, each running the same `minigpt train`. Left alone, every one of
them prints its summary, its JSON and its errors, interleaved. Process 0 speaks for the run; another
process prints only an error that may be its own alone. The resume hint shows the launch
command the user actually typed, torchrun and its process count included.
"""

from __future__ import annotations

import os
import shlex
import sys

import torch.distributed as dist

# A process whose peer died sees its collective fail with one of these (gloo, NCCL); the peer has said why.
PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "NCCL communicator was aborted")


def launch_rank() -> int:
    """This process's rank under torchrun (its RANK variable), 0 otherwise."""
    return int(os.environ.get("RANK", "0"))


def launch_world() -> int:
    """How many processes torchrun started (WORLD_SIZE), 1 otherwise."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def speaks(err: BaseException | None = None, usage_error: bool = False) -> bool:
    """Whether this process prints (`err`: the error it is about to report).

    Alone: always. Under torchrun: process 0 prints the run's output and the errors every process meets alike
    (bad flags, minigpt's own checks); any process prints a foreign error (from torch, say), which may be its
    own alone; nobody prints a failed collective, the echo of a peer that died: that peer says why, or
    torchrun's summary does.
    """
    if launch_world() == 1:
        return True
    if err is not None and (isinstance(err, dist.DistError) or any(cause in str(err) for cause in PEER_GONE)):
        return False
    shared = err is None or usage_error or type(err).__module__.startswith("minigpt") or isinstance(err, OSError)
    return launch_rank() == 0 or not shared


def launch_command(argv: list[str]) -> list[str]:
    """The command that started this process: `minigpt ...`, `python -m minigpt ...`, or `torchrun ... -m minigpt`."""
    script = sys.argv[0].replace("\\", "/")
    as_module = script.endswith("minigpt/__main__.py")  # python -m minigpt (torchrun -m minigpt runs it so too)
    if launch_world() == 1 and "TORCHELASTIC_RUN_ID" not in os.environ:
        return ["python", "-m", "minigpt", *argv] if as_module else ["minigpt", *argv]
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", launch_world()))
    torchrun = ["torchrun", "--nproc_per_node", str(per_node)]
    if launch_world() > per_node:  # several machines: each runs this command, with its own rendezvous flags
        torchrun += ["--nnodes", str(launch_world() // per_node)]
    return [*torchrun, *(["-m", "minigpt"] if as_module else [sys.argv[0]]), *argv]


def resume_command(argv: list[str]) -> str:
    """The command line that continues this run: the same launch and flags, without --restart, with --resume once."""
    return shlex.join([*launch_command([a for a in argv if a not in ("--resume", "--restart")]), "--resume"])


class OutputThatOutlivesItsReader:
    """sys.stdout that keeps the program going when its reader leaves (`minigpt train ... | head -2`).

    Python turns a closed pipe into BrokenPipeError at the next print, which would end a training run in the middle
    of its work. This wrapper swallows it once, points the file descriptor at /dev/null (so the interpreter's own
    flush at exit is quiet too) and lets the run carry on: what was printed after is lost, the run and its
    checkpoints are not.
    """

    def __init__(self, stream) -> None:
        self.stream, self.reader_left = stream, False

    def write(self, text: str) -> int:
        if not self.reader_left:
            try:
                return self.stream.write(text)
            except BrokenPipeError:
                self._lose_the_reader()
        return len(text)

    def flush(self) -> None:
        if not self.reader_left:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._lose_the_reader()

    def _lose_the_reader(self) -> None:
        self.reader_left = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):  # no file descriptor (a notebook's stream): nothing to quiet
            pass

    def __getattr__(self, name: str):
        return getattr(self.stream, name)
