"""The worker: the process where a learner's answers run, one per exercise, started by the grader.

It imports the test file (for the functions a test runs next to the answer) and then the learner's chapter file,
and answers the grader's calls one at a time over a socket: call f(*args) and send back its result and the
state of its arguments, or the error it raised. Everything it sends is plain data (minigpt.grading.transfer).
Nothing here decides a grade: the grader checks what comes back, and kills this process, with every process
it started, when an exercise is over or its time is up.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import socket
import struct
import sys
import threading
import time
import traceback
from pathlib import Path
from types import ModuleType

import torch

from minigpt.grading import transfer

HEADER = struct.Struct("!Q")  # every message: its length, then that many bytes


def send(sock: socket.socket, data: bytes) -> None:
    """One message: its length, then its bytes."""
    sock.sendall(HEADER.pack(len(data)) + data)


def _receive(sock: socket.socket) -> bytes | None:
    """One message from the grader; None when the grader closed the socket."""
    header = _exactly(sock, HEADER.size)
    return None if header is None else _exactly(sock, HEADER.unpack(header)[0])


def _exactly(sock: socket.socket, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 2**20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def serve(sock: socket.socket, setup: dict) -> None:
    """The worker's main: import the test file and the answers, then answer calls until the grader closes."""
    _detach(setup["log"])
    sys.path.insert(0, str(Path(setup["tests_path"]).parent))  # so that processes this one spawns find the tests
    _import_file(setup["tests_name"], setup["tests_path"])  # the grader's own code: not the learner's time
    send(sock, transfer.dump_report({"started": os.getpid()}))
    answers_path = setup["answers_path"]
    try:
        answers = _import_file(setup["answers_name"], answers_path)
    except BaseException as error:  # noqa: BLE001 - SystemExit too: whatever stops the import is reported
        send(sock, transfer.dump_report({"import_error": describe(error, answers_path)}))
        return
    send(sock, transfer.dump_report({"ready": True}))
    while (request := _receive(sock)) is not None:
        send(sock, _answer(answers, pickle.loads(request), answers_path))


def _detach(log: str) -> None:
    """A process group of its own (the grader kills the group), output to the log, and no command line."""
    if hasattr(os, "setsid"):
        os.setsid()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.argv = ["minigpt-grading-worker"]  # the grader's arguments (its file paths) are none of the answer's business
    threads = os.environ.get("OMP_NUM_THREADS", "1")  # one unless asked: the exercise models are small
    torch.set_num_threads(int(threads) if threads.isdigit() and int(threads) > 0 else 1)
    threading.Thread(target=_stop_with_parent, args=(os.getppid(),), daemon=True).start()


def _stop_with_parent(parent: int) -> None:
    """If the process that started this one is gone (the grader was killed), end this worker's process group."""
    while os.getppid() == parent:
        time.sleep(0.5)
    if hasattr(os, "killpg"):
        os.killpg(os.getpgid(0), 9)
    os._exit(1)


def _import_file(name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _answer(answers: ModuleType, request: tuple, answers_path: str) -> bytes:
    """Run one call; its report as bytes: {"id", "result", "tensors", "states"}, {"id", "error"} when the call
    raised, or {"id", "unsendable"} when its result or its arguments' state cannot be sent as plain data."""
    number, target, args, kwargs, grads = request
    tensors, stateful = transfer.parts((args, kwargs))
    transfer.unpickled(tensors, stateful, grads)
    try:
        if isinstance(target, str):
            if not callable(getattr(answers, target, None)):
                raise AttributeError(f"{Path(answers_path).name} has no function {target}(): keep the exercise's names")
            result = getattr(answers, target)(*args, **kwargs)
        else:  # a function of the test file that watches the answer at work
            result = target(answers, *args, **kwargs)
    except BaseException as error:  # noqa: BLE001 - SystemExit and KeyboardInterrupt too: reported, not obeyed
        return transfer.dump_report({"id": number, "error": describe(error, answers_path)})
    try:
        report = {"id": number, "result": transfer.plain(result), **transfer.state_after(tensors, stateful)}
        return transfer.dump_report(report)
    except Exception as error:  # noqa: BLE001 - what the call returned or left behind cannot be sent
        return transfer.dump_report({"id": number, "unsendable": f"{type(error).__name__}: {_text(error)[:300]}"})


def describe(error: BaseException, answers_path: str) -> dict:
    """An error as plain data: its type, the builtin exception it is a kind of, its message, the hint of an
    unfinished exercise in its chain, and where in the answers file it was raised."""
    builtin = next(
        (c.__name__ for c in type(error).__mro__ if c.__module__ == "builtins" and issubclass(c, Exception)), None
    )
    return {
        "type": type(error).__name__,
        "builtin": builtin,
        "message": _text(error),
        "not_done": _not_done(error),
        "where": _where(error, Path(answers_path)),
        "traceback": "".join(traceback.format_exception(error)[-40:]),
    }


def _text(error: BaseException) -> str:
    try:
        return str(error)[:4000]
    except Exception:  # noqa: BLE001 - a learner's __str__ may raise anything
        return "(its message could not be read)"


def _not_done(error: BaseException | None) -> str | None:
    """The message of the NotImplementedError in the error or its chain (an exercise that calls an unfinished
    one), or None."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, NotImplementedError):
            return _text(error)
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _where(error: BaseException, path: Path) -> str:
    """'file.py:LINE in function()' for the deepest frame in the answers folder (a syntax error: its line)."""
    found, tb = "", error.__traceback__
    while tb is not None:
        frame_path = Path(tb.tb_frame.f_code.co_filename)
        if frame_path.parent == path.parent and not frame_path.name.startswith(("test_", "conftest")):
            found = f"{frame_path.name}:{tb.tb_lineno} in {tb.tb_frame.f_code.co_name}()"
        tb = tb.tb_next
    if not found and isinstance(error, SyntaxError) and error.lineno:
        found = f"{path.name}:{error.lineno}"
    return found
