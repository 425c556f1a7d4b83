"""The grader's side of the workers: a test calls the learner's answers through `answers`, and every call runs in
the exercise's worker process (minigpt.grading.worker), never in the grader.

    answers.decode_float(1.0, torch.bfloat16)    decode_float runs in the worker; its result comes back
    answers.run(step_watched, model, optimizer)  step_watched(the answers module, model, optimizer) runs there: a
                                                 function of the test file that watches the answer at work

The arguments go over as a pickle; the result, and what the call changed in the arguments, come back as plain
data and are written into the test's own objects (minigpt.grading.transfer). An exercise's calls share one
worker, started on its first call and killed with its whole process group when the next exercise starts, when
its answers have run longer than the timeout (all its tests together), and when grading ends. Workers are
forked from a server that has imported torch once (multiprocessing's forkserver, warmed up by
minigpt.grading.warm), so one starts in milliseconds, not the seconds an import of torch takes.
"""

from __future__ import annotations

import builtins
import multiprocessing
import multiprocessing.connection
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

from minigpt.grading import transfer, worker

STARTUP_LIMIT_S = 120.0  # for a worker to start (the grader's share of the work, not counted in the timeout)
PRELOAD = [  # imported once by the server the workers are forked from: what the tests and the answers import
    "torch",
    "torch.distributed",
    "torch.utils.checkpoint",
    "numpy",
    "pytest",
    "minigpt.data",
    "minigpt.distributed",
    "minigpt.formats",
    "minigpt.memory",
    "minigpt.model",
    "minigpt.plan",
    "minigpt.precision",
    "minigpt.recompute",
    "minigpt.train",
    "minigpt.grading.watch",
    "minigpt.grading.worker",
    "minigpt.grading.warm",  # last: runs a tiny version of the exercises' work, once, before any fork
]


class ExerciseTimeout(Exception):
    """The answer ran past the exercise's timeout: its worker, and every process it started, were killed."""

    def __init__(self, seconds: float, importing: str = "") -> None:
        super().__init__(seconds, importing)
        self.seconds, self.importing = seconds, importing


class ExerciseAlreadyTimedOut(Exception):
    """Raised instead of running a test whose exercise already timed out."""


class ImportFailed(Exception):
    """The answers file is missing, or importing it raised an error, ended its process or timed out."""


class WorkerFailed(Exception):
    """The worker ended during a call, or sent something that is not the report of that call."""


class AnswerRaised(Exception):
    """The learner's code raised an error in its worker. A kind of the builtin error it was (a learner's
    ValueError is a ValueError here too), so that pytest.raises(ValueError) can expect it."""

    kind, message, where, traceback = "", "", "", ""


_ERROR_CLASSES: dict[str, type[AnswerRaised]] = {}
_CONTEXT: multiprocessing.context.BaseContext | None = None


def _context() -> multiprocessing.context.BaseContext:
    """The way workers start: forked from a server that imported torch once, or spawned where there is none."""
    global _CONTEXT
    if _CONTEXT is None:
        if "forkserver" in multiprocessing.get_all_start_methods():
            _CONTEXT = multiprocessing.get_context("forkserver")
            _CONTEXT.set_forkserver_preload(PRELOAD)
        else:  # Windows
            _CONTEXT = multiprocessing.get_context("spawn")
    return _CONTEXT


def warm_up() -> None:
    """Start the server the workers are forked from now: it imports torch while pytest collects the tests."""
    if _context().get_start_method() == "forkserver":
        from multiprocessing import forkserver, resource_tracker

        # Workers are killed, not shut down, so the semaphores their code made (tqdm's lock, for one) are freed
        # by the resource tracker at the end: without its warning about them, which would only be noise here.
        warnings = os.environ.get("PYTHONWARNINGS")
        os.environ["PYTHONWARNINGS"] = "ignore:resource_tracker:UserWarning"
        try:
            resource_tracker.ensure_running()
        finally:
            if warnings is None:
                del os.environ["PYTHONWARNINGS"]
            else:
                os.environ["PYTHONWARNINGS"] = warnings
        forkserver.ensure_running()


def wake_the_server() -> None:
    """Continue the server workers are forked from. It is every worker's parent, so an answer can stop it
    (os.kill(os.getppid(), signal.SIGSTOP)); stopped, it would fork no worker again and every later exercise
    would wait out its start. Called before each start and after each stop: a stop costs nothing."""
    if not hasattr(signal, "SIGCONT") or _context().get_start_method() != "forkserver":
        return
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)  # CPython's forkserver keeps its pid here
    if pid:
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass  # gone: multiprocessing starts a new one when asked


def answer_error(error: dict) -> Exception:
    """The grader's exception for an error the learner's code raised (a report's "error")."""
    if error.get("not_done") is not None:
        return NotImplementedError(str(error["not_done"]))
    builtin = error.get("builtin")
    base = getattr(builtins, builtin, None) if isinstance(builtin, str) else None
    cls = AnswerRaised
    if isinstance(base, type) and issubclass(base, Exception) and base is not Exception:
        if builtin not in _ERROR_CLASSES:
            try:
                _ERROR_CLASSES[builtin] = type(f"Answer{builtin}", (AnswerRaised, base), {})
            except TypeError:  # a builtin that cannot be combined
                _ERROR_CLASSES[builtin] = AnswerRaised
        cls = _ERROR_CLASSES[builtin]
    kind, message = str(error.get("type", "Exception")), str(error.get("message", ""))
    try:
        raised = cls(f"{kind}: {message}")
    except TypeError:  # a builtin with another constructor
        raised = AnswerRaised(f"{kind}: {message}")
    raised.kind, raised.message = kind, message
    raised.where, raised.traceback = str(error.get("where", "")), str(error.get("traceback", ""))
    return raised


class _Ended(Exception):
    """The worker closed its socket or ended (internal: becomes ImportFailed or WorkerFailed)."""


class _Late(Exception):
    """The deadline passed (internal: becomes ExerciseTimeout)."""


class Worker:
    """One exercise's worker process: the learner's chapter file imported there, ready for calls."""

    def __init__(self, exercise: str, answers_path: Path, tests: ModuleType, log: Path) -> None:
        self.exercise, self.answers_path, self.tests, self.log = exercise, answers_path, tests, log
        self.process, self.sock, self.calls, self.log_offset = None, None, 0, 0

    def start(self, deadline: float, timeout: float) -> float:
        """Start the process and import the answers; return the deadline, moved on by the time the start took
        before the answers' import began (the grader's share)."""
        self.sock, theirs = socket.socketpair()
        setup = {
            "log": str(self.log),
            "tests_name": self.tests.__name__,
            "tests_path": self.tests.__file__,
            "answers_name": f"answers_{self.answers_path.stem}",
            "answers_path": str(self.answers_path),
        }
        began = time.monotonic()
        wake_the_server()
        self.process = _context().Process(target=worker.serve, args=(theirs, setup), name=f"exercise {self.exercise}")
        # multiprocessing re-runs the parent's main script in a new process unless it is `python -m`: a worker
        # must not (a script that calls pytest.main() would grade again in it), so it sees no main script.
        main, sys.modules["__main__"] = sys.modules["__main__"], ModuleType("__main__")
        try:
            self.process.start()
        finally:
            sys.modules["__main__"] = main
        theirs.close()
        try:
            started = self._receive(began + STARTUP_LIMIT_S)
        except (_Ended, _Late, WorkerFailed) as error:
            self.stop()
            raise WorkerFailed(
                f"the grader could not start a worker process ({error or type(error).__name__})"
            ) from None
        if "started" not in started:
            self.stop()
            raise WorkerFailed("the worker sent something else than 'started'")
        deadline += time.monotonic() - began
        try:
            report = self._receive(deadline)
        except _Late:
            self.stop()
            raise ExerciseTimeout(timeout, importing=self.answers_path.name) from None
        except _Ended:
            status = self.exit_status()
            self.stop()
            raise ImportFailed(
                f"could not import {self.answers_path.name}: its process ended ({status}) while the "
                f"file was imported - does code at the top level of the file exit?"
            ) from None
        if "import_error" in report and isinstance(report["import_error"], dict):
            self.stop()
            error = report["import_error"]
            where = str(error.get("where") or self.answers_path.name)
            raise ImportFailed(f"could not import {where}: {error.get('type')}: {_short(str(error.get('message')))}")
        if report.get("ready") is not True:
            self.stop()
            raise WorkerFailed("the worker sent something else than 'ready' after importing the answers")
        return deadline

    def call(self, target: str | object, args: tuple, kwargs: dict, deadline: float, timeout: float) -> object:
        """Run target (a function name of the answers, or a function of the test file) in the worker; return
        its result after writing what it changed into args and kwargs."""
        tensors, stateful = transfer.parts((args, kwargs))
        self.calls += 1
        request = pickle.dumps((self.calls, target, args, kwargs, transfer.grads_of(tensors)))
        name = target if isinstance(target, str) else target.__name__
        try:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
            worker.send(self.sock, request)
            report = self._receive(deadline)
        except (_Late, TimeoutError):
            self.stop()
            raise ExerciseTimeout(timeout) from None
        except (_Ended, OSError):
            status = self.exit_status()
            self.stop()
            raise WorkerFailed(
                f"your code ended its process ({status}) during {name}(): the grade comes from the "
                f"tests' checks only, so an answer that exits fails"
            ) from None
        finally:
            self.relay_output()
        if report.get("id") != self.calls:
            self.stop()
            raise WorkerFailed(f"the worker's report of {name}() is not one (id {report.get('id')!r})")
        if "error" in report:
            error = report["error"]
            raise answer_error(error if isinstance(error, dict) else {"message": repr(error)})
        if "unsendable" in report:
            raise WorkerFailed(f"what {name}() returned could not be sent back: {report['unsendable']}")
        try:
            transfer.restore(tensors, stateful, report)
        except Exception as error:  # noqa: BLE001 - a report that does not fit the arguments is a failed call
            self.stop()
            raise WorkerFailed(f"the state of the arguments after {name}() could not be read back: {error}") from None
        return report.get("result")

    def _receive(self, deadline: float) -> dict:
        header = self._read(worker.HEADER.size, deadline)
        size = worker.HEADER.unpack(header)[0]
        if size > transfer.MAX_REPORT_BYTES:
            self.stop()
            raise WorkerFailed(f"the worker sent {size:,} bytes, more than a report of a call can be")
        try:
            return transfer.load_report(self._read(size, deadline))
        except ValueError as error:
            self.stop()
            raise WorkerFailed(f"the worker sent something that is not a report: {error}") from None

    def _read(self, n: int, deadline: float) -> bytes:
        """n bytes from the worker, waiting at most until the deadline, and never after the worker ended."""
        chunks = []
        while n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Late
            ready = multiprocessing.connection.wait([self.sock, self.process.sentinel], timeout=left)
            if self.sock in ready:
                self.sock.setblocking(False)
                try:
                    chunk = self.sock.recv(min(n, 2**20))
                except BlockingIOError:
                    continue
                if not chunk:
                    raise _Ended
                chunks.append(chunk)
                n -= len(chunk)
            elif ready:  # the process ended and sent nothing more
                raise _Ended
        return b"".join(chunks)

    def relay_output(self) -> None:
        """What the learner's code printed since the last call, printed here: pytest shows it under a failure."""
        try:
            if self.log.stat().st_size == self.log_offset:
                return  # nothing new (most calls)
            with open(self.log, "rb") as f:
                f.seek(self.log_offset)
                data = f.read(1_000_000)
                self.log_offset = f.tell()
        except OSError:
            return
        if data:
            sys.stdout.write(data[-20_000:].decode("utf-8", errors="replace"))

    def exit_status(self) -> str:
        if self.process is None:
            return "not started"
        self.process.join(2)
        code = self.process.exitcode
        return "still running" if code is None else f"exit status {code}" if code >= 0 else f"signal {-code}"

    def stop(self) -> None:
        """Kill the worker and every process in its group; no signal handler, thread or loop outlives this."""
        if self.process is not None and self.process.pid is not None:
            if hasattr(os, "killpg"):
                try:
                    os.killpg(self.process.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass  # the group is gone (or not made yet: the process itself is killed next)
            self.process.kill()
            self.process.join(10)
        if self.sock is not None:
            self.sock.close()
        wake_the_server()


def _short(text: str, max_lines: int = 6) -> str:
    lines = text.strip().splitlines()
    return "\n".join(lines[:max_lines] + (["..."] if len(lines) > max_lines else []))


class Workers:
    """The live worker (at most one: the exercise being graded), the time each exercise's answers have run, and
    the chapters whose file did not import."""

    def __init__(self, answers_dir: Path, timeout: float) -> None:
        self.answers_dir, self.timeout = answers_dir, timeout
        self.log_dir = Path(tempfile.mkdtemp(prefix="minigpt-grading-"))
        self.current: Worker | None = None
        self.used: dict[str, float] = {}  # seconds each exercise's answers ran, all its tests together
        self.broken: dict[str, Exception] = {}

    def call(self, exercise: str, chapter: str, tests: ModuleType, target: str | object, args: tuple, kwargs: dict):
        """Run target in the exercise's worker, within what is left of the exercise's time (the timeout, for all
        its tests together: the import of the answers counts, the start of the worker process does not)."""
        deadline = time.monotonic() + self.timeout - self.used.get(exercise, 0.0)
        try:
            worker, deadline = self.get(exercise, chapter, tests, deadline)
            return worker.call(target, args, kwargs, deadline, self.timeout)
        finally:
            self.used[exercise] = self.timeout - (deadline - time.monotonic())

    def get(self, exercise: str, chapter: str, tests: ModuleType, deadline: float) -> tuple[Worker, float]:
        """The exercise's worker, started if need be (which stops any other); and the deadline, moved on by the
        worker's start."""
        if chapter in self.broken:
            raise ImportFailed(str(self.broken[chapter]))
        live = self.current
        if live is not None and live.exercise == exercise and live.process.is_alive():
            return live, deadline
        self.stop_current()
        path = self.answers_dir / f"{chapter}.py"
        if not path.is_file():
            raise ImportFailed(f"{path} not found: the answers for {chapter} should be there (--answers-dir sets it)")
        log = self.log_dir / f"{exercise}.log"
        self.current = Worker(exercise, path, tests, log)
        try:
            deadline = self.current.start(deadline, self.timeout)
        except ExerciseTimeout as error:
            self.broken[chapter] = ImportFailed(
                f"not run: importing {path.name} timed out after {error.seconds:g} s in an earlier exercise"
            )
            raise
        except ImportFailed as error:
            self.broken[chapter] = error
            raise
        finally:
            self.current.relay_output()
        return self.current, deadline

    def stop_current(self) -> None:
        if self.current is not None:
            self.current.stop()
            self.current = None

    def stop(self) -> None:
        self.stop_current()
        shutil.rmtree(self.log_dir, ignore_errors=True)


class Answers:
    """The learner's answers for one test: `answers.f(...)` runs f in the exercise's worker, and
    `answers.run(g, ...)` runs g(the answers module, ...) there."""

    def __init__(self, workers: Workers, exercise: str, chapter: str, tests: ModuleType) -> None:
        self._workers, self._exercise, self._chapter, self._tests = workers, exercise, chapter, tests

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)

        def call(*args: object, **kwargs: object) -> object:
            return self._call(name, args, kwargs)

        call.__name__ = name
        return call

    def run(self, function, *args: object, **kwargs: object) -> object:
        """function(the answers module, *args, **kwargs) in the worker: a module-level function of the test file
        that watches the answer at work. Its result must be plain data (dicts, lists, numbers, tensors)."""
        return self._call(function, args, kwargs)

    def _call(self, target: str | object, args: tuple, kwargs: dict) -> object:
        return self._workers.call(self._exercise, self._chapter, self._tests, target, args, kwargs)
