"""The autograder: a pytest plugin, switched on by exercises/conftest.py, that grades your answers in exercises/
(or the reference answers with --solutions).

    pytest exercises/                      grade every exercise
    pytest exercises/ -k 4.2               grade one exercise (its id; or -m "exercise(id='4.2')")
    pytest exercises/ --solutions          grade the reference answers in solutions/
    pytest exercises/ --answers-dir DIR    grade the chNN_*.py files in another folder
    pytest exercises/ --gradescope results.json   also write Gradescope's autograder results

Each test belongs to one exercise, `@pytest.mark.exercise("4.2", points=2)`. An exercise you have not done
yet fails with one line (its hint); an answer that is done but wrong fails with the property it got wrong,
expected and actual, and the hint (each test file's HINTS). A test that runs too long fails after a
timeout, and the exercise's other tests are then marked timed out without running (a hang costs one
timeout per exercise); the other exercises still run. At the end a score table is printed and written to
grade.json (--grade-json PATH to move it).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
import torch

DEFAULT_TIMEOUT_S = 60.0  # per test; a correct answer takes a few seconds on a 2-core CPU
RESULTS = pytest.StashKey[dict]()  # nodeid -> {"exercise", "points", "status", "message"}
TIMED_OUT = pytest.StashKey[set]()  # exercises one of whose tests timed out: their other tests do not run

# The exercise models are small: one thread is as fast as several, and unlike several it does not slow
# down 10x or more when other processes share the cores (a CI runner, a classroom server).
if "OMP_NUM_THREADS" not in os.environ:
    torch.set_num_threads(1)


class ExerciseTimeout(BaseException):
    """Raised inside a test that ran past its timeout (a BaseException, so `except Exception` can't eat it)."""


class ExerciseAlreadyTimedOut(Exception):
    """Raised instead of running a test whose exercise already used up its one timeout."""


# ----------------------------------------------------------------------------------------------------------
# Options and markers


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("exercises", "grading the course exercises")
    group.addoption("--solutions", action="store_true", help="grade the reference answers in solutions/")
    group.addoption("--answers-dir", metavar="DIR", help="grade the chNN_*.py files in DIR (default: exercises/)")
    group.addoption(
        "--grade-json",
        metavar="PATH",
        default="grade.json",
        help="where to write the machine-readable grade (default: ./grade.json)",
    )
    group.addoption(
        "--exercise-timeout",
        metavar="SECONDS",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"seconds each exercise test may run before it fails (default: {DEFAULT_TIMEOUT_S:g})",
    )
    group.addoption(
        "--gradescope",
        metavar="PATH",
        help="also write the grade as Gradescope's autograder results.json to PATH",
    )
    group.addoption(
        "--tracebacks", action="store_true", help="show pytest's full tracebacks instead of one message per failed test"
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "exercise(id, points=1): the exercise a test grades, and its points")
    config.stash[RESULTS] = {}
    config.stash[TIMED_OUT] = set()


def exercises_dir(config: pytest.Config) -> Path:
    """The course's exercises/ folder: the stubs and the tests that grade them."""
    return config.rootpath / "exercises"


def answers_dir(config: pytest.Config) -> Path:
    """The folder whose chNN_*.py files are graded."""
    if config.getoption("--solutions") and config.getoption("--answers-dir"):
        raise pytest.UsageError("use --solutions or --answers-dir, not both")
    if config.getoption("--solutions"):
        return config.rootpath / "solutions"
    return Path(config.getoption("--answers-dir") or exercises_dir(config)).resolve()


def pytest_sessionstart(session: pytest.Session) -> None:
    folder = answers_dir(session.config)
    if not folder.is_dir():
        raise pytest.UsageError(f"--answers-dir {folder} is not a folder")


def exercise_of(item: pytest.Item) -> tuple[str, float] | None:
    """(exercise id, points) of a test, from its exercise marker."""
    mark = item.get_closest_marker("exercise")
    if mark is None:
        return None
    if len(mark.args) != 1:
        raise pytest.UsageError(f'{item.nodeid}: write the marker as @pytest.mark.exercise("4.2", points=2)')
    return str(mark.args[0]), float(mark.kwargs.get("points", 1))


@pytest.hookimpl(tryfirst=True)  # before -m and -k deselect
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test must name its exercise; `-k 4.2` selects an exercise; each test gets a timeout."""
    timeout = config.getoption("--exercise-timeout")
    for item in items:
        if not item.path.is_relative_to(exercises_dir(config)):
            continue
        found = exercise_of(item)
        if found is None:
            raise pytest.UsageError(f"{item.nodeid} has no @pytest.mark.exercise(id, points=...) marker")
        item.extra_keyword_matches.add(found[0])  # so that `-k 4.2` selects it
        item.add_marker(pytest.mark.exercise(id=found[0]))  # and `-m "exercise(id='4.2')"` (pytest >= 8.3)
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(timeout))  # read by pytest-timeout, which calls the hook below


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A hang costs one timeout per exercise: once a test of it timed out, its other tests do not run."""
    found = exercise_of(item)
    if found is not None and found[0] in item.config.stash[TIMED_OUT]:
        raise ExerciseAlreadyTimedOut(found[0])


# ----------------------------------------------------------------------------------------------------------
# Loading the answers


def load_answers(config: pytest.Config, chapter: str) -> ModuleType:
    """Import chapter's module (e.g. "ch04_fp16_gradscaler") from the answers folder, once per session."""
    path = answers_dir(config) / f"{chapter}.py"
    name = f"answers_{chapter}"
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path):
        return sys.modules[name]
    if not path.is_file():
        pytest.fail(
            f"{path} not found: the answers for {chapter} should be there (--answers-dir sets the folder)",
            pytrace=False,
        )
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # a learner's file that does not import: say where, briefly
        line = getattr(error, "lineno", None) or _line_in(error, path)
        where = f"{path.name}" + (f", line {line}" if line else "")
        pytest.fail(f"could not import {where}: {type(error).__name__}: {error}", pytrace=False)
    sys.modules[name] = module
    return module


@pytest.fixture(scope="module")
def answers(request: pytest.FixtureRequest) -> ModuleType:
    """The module under grading for this test file (its CHAPTER), from exercises/ or solutions/."""
    return load_answers(request.config, request.module.CHAPTER)


# ----------------------------------------------------------------------------------------------------------
# Shared test inputs


@pytest.fixture
def small_cfg():
    """A model that trains in milliseconds: 2 layers, 32 wide, 64-token vocabulary."""
    from minigpt.model import ModelConfig

    return ModelConfig(n_layer=2, n_head=2, n_embd=32, ctx=16, vocab_size=64)


@pytest.fixture(scope="session")
def token_data():
    """Tokens for the presets' 8192-token vocabulary from a sparse Markov chain (learnable, no corpus to build)."""
    import numpy as np

    from minigpt.data import TokenData

    rng = np.random.default_rng(0)
    successors = rng.integers(0, 8192, size=(8192, 4))  # each token has 4 likely next tokens
    choices = rng.integers(0, 4, size=40_000)
    tokens = np.empty(40_000, dtype=np.uint16)
    tokens[0] = 0
    for i in range(1, len(tokens)):
        tokens[i] = successors[tokens[i - 1], choices[i]]
    return TokenData(train=tokens[:36_000], val=tokens[36_000:], tokenizer="minigpt-8k", source="markov")


def count_saved_bytes(module: torch.nn.Module, run):
    """(bytes autograd saves for backward while run() executes, run()'s result); weights not counted.

    Each storage counts once (views share one). The result is returned so the graph, and with it the
    saved tensors, stays alive until the count is read.
    """
    skip = {t.untyped_storage().data_ptr() for t in [*module.parameters(), *module.buffers()]}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in skip:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = run()
    return sum(saved.values()), out


@pytest.fixture
def saved_bytes():
    """count_saved_bytes(module, run): what a forward pass keeps for backward, measured on real tensors."""
    return count_saved_bytes


@dataclass
class OptimizerStep:
    """One optimizer.step() seen by the optimizer_steps fixture."""

    optimizer: int  # id() of the optimizer that stepped
    grad_norm: float  # the norm of its gradients as the step began: what the step applied (clipped or not)
    started: float  # time.perf_counter() as the step began
    finished: float = math.nan  # and as it ended


@pytest.fixture
def optimizer_steps():
    """Every optimizer.step() of any torch optimizer while the test runs, in order (torch's global step hooks)."""
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    steps: list[OptimizerStep] = []

    def pre(optimizer, args, kwargs):
        grads = [p.grad.flatten().float() for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        norm = torch.cat(grads).norm().item() if grads else 0.0
        steps.append(OptimizerStep(id(optimizer), norm, time.perf_counter()))

    def post(optimizer, args, kwargs):
        steps[-1].finished = time.perf_counter()

    handles = [register_optimizer_step_pre_hook(pre), register_optimizer_step_post_hook(post)]
    yield steps
    for handle in handles:
        handle.remove()


@dataclass
class TrainRun:
    """One minigpt.train.train() call seen by the train_runs fixture."""

    cfg: object  # the TrainConfig it was given
    result: object  # what it returned
    seconds: float  # how long it took


@pytest.fixture
def train_runs(answers, monkeypatch):
    """Every minigpt.train.train() call the answers make while the test runs: what each run really did."""
    import minigpt.train as train_module

    real = train_module.train
    runs: list[TrainRun] = []

    def recording_train(cfg, *args, **kwargs):
        start = time.perf_counter()
        result = real(cfg, *args, **kwargs)
        runs.append(TrainRun(cfg, result, time.perf_counter() - start))
        return result

    monkeypatch.setattr(train_module, "train", recording_train)
    if getattr(answers, "train", None) is real:  # the stubs' `from minigpt.train import train`
        monkeypatch.setattr(answers, "train", recording_train)
    return runs


# ----------------------------------------------------------------------------------------------------------
# Timeouts: pytest-timeout decides when, this hook decides how (one clean failure, no stack dump)


@pytest.hookimpl(optionalhook=True)
def pytest_timeout_set_timer(item: pytest.Item, settings) -> bool | None:
    if exercise_of(item) is None or not hasattr(signal, "SIGALRM"):
        return None  # pytest-timeout's own timer
    if threading.current_thread() is not threading.main_thread():
        return None

    def on_timeout(signum, frame):
        raise ExerciseTimeout(settings.timeout)

    def cancel():
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)

    item.cancel_timeout = cancel  # pytest-timeout's cancel hook calls it
    signal.signal(signal.SIGALRM, on_timeout)
    signal.setitimer(signal.ITIMER_REAL, settings.timeout)
    return True


# ----------------------------------------------------------------------------------------------------------
# Reports: one kind line per failure, and the status of each test for the score


def _line_in(error: BaseException, path: Path) -> int | None:
    """The deepest line of `path` in the error's traceback."""
    line, tb = None, error.__traceback__
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename).resolve() == path.resolve():
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _not_implemented(error: BaseException | None) -> NotImplementedError | None:
    """The NotImplementedError in the error or its chain (an exercise that calls an unfinished one)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, NotImplementedError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _learner_frame(error: BaseException, folder: Path) -> str:
    """'file.py:LINE in function' for the deepest frame of the traceback that is in the answers folder."""
    found, tb = "", error.__traceback__
    while tb is not None:
        path = Path(tb.tb_frame.f_code.co_filename)
        if path.parent.resolve() == folder.resolve() and not path.name.startswith(("test_", "conftest")):
            found = f"{path.name}:{tb.tb_lineno} in {tb.tb_frame.f_code.co_name}()"
        tb = tb.tb_next
    return found


def _short(text: str, max_lines: int = 12) -> str:
    lines = text.strip().splitlines()
    return "\n".join(lines[:max_lines] + (["..."] if len(lines) > max_lines else []))


def describe_failure(exercise: str, error: BaseException, folder: Path, hint: str = "") -> tuple[str, str]:
    """(status, message) for a failed exercise test: what a learner needs, without the traceback.

    An answer that is finished but wrong gets the exercise's hint after what the test found.
    """
    status, message = _describe(exercise, error, folder)
    if status == "failed" and hint:
        message += f"\n  Hint: {hint}"
    return status, message


def _describe(exercise: str, error: BaseException, folder: Path) -> tuple[str, str]:
    missing = _not_implemented(error)
    if missing is not None:
        text = str(missing)
        match = re.match(r"Exercise (\S+?): (.*)", text, re.S)
        if match:
            return "not done", f"Exercise {match[1]} not done yet: {match[2]}"
        return "not done", f"Exercise {exercise} not done yet: {text}"
    if isinstance(error, ExerciseAlreadyTimedOut):
        return "timeout", f"Exercise {exercise}: not run, an earlier test of this exercise timed out"
    if isinstance(error, ExerciseTimeout):
        return "timeout", (
            f"Exercise {exercise} timed out after {error.args[0]:g} s: does every pass of your "
            f"loop get closer to the end? (--exercise-timeout changes the limit)"
        )
    if isinstance(error, AssertionError):
        return "failed", f"Exercise {exercise} failed: {_short(str(error))}"
    if isinstance(error, pytest.fail.Exception):
        return "failed", f"Exercise {exercise}: {_short(str(error))}"
    where = _learner_frame(error, folder)
    if where:
        return "failed", (
            f"Exercise {exercise}: your code raised {type(error).__name__}: {_short(str(error), 6)}\n  at {where}"
        )
    return "failed", (
        f"Exercise {exercise}: {type(error).__name__}: {_short(str(error), 6)} "
        f"(raised outside your answer; --tracebacks shows where)"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    found = exercise_of(item)
    if found is None:
        return
    exercise, points = found
    results = item.config.stash[RESULTS]
    entry = results.setdefault(
        item.nodeid, {"exercise": exercise, "points": points, "status": "not run", "message": ""}
    )
    if report.skipped:
        entry["status"] = "skipped"
    elif report.failed:
        error = call.excinfo.value if call.excinfo is not None else None
        if error is None:
            entry.update(status="failed" if report.when == "call" else "error")
            return
        hint = getattr(getattr(item, "module", None), "HINTS", {}).get(exercise, "")
        status, message = describe_failure(exercise, error, answers_dir(item.config), hint)
        if status == "timeout":
            item.config.stash[TIMED_OUT].add(exercise)
        if report.when != "call" and status == "failed":
            status = "error"  # setup or teardown: e.g. the answers file does not import
        entry.update(status=status, message=message)
        if not item.config.getoption("--tracebacks"):
            report.longrepr = message
    elif report.when == "call" and entry["status"] == "not run":
        entry["status"] = "passed"


# ----------------------------------------------------------------------------------------------------------
# The score


def _exercise_key(exercise: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in exercise.split("."))


def grade(results: dict) -> dict:
    """Per-exercise points earned and possible, tests passed, each test's status and failure message, and the
    totals (what grade.json holds)."""
    exercises: dict[str, dict] = {}
    for nodeid, r in results.items():
        e = exercises.setdefault(
            r["exercise"],
            {
                "earned": 0.0,
                "possible": 0.0,
                "tests_passed": 0,
                "tests": 0,
                "passed": True,
                "results": {},
                "messages": {},
            },
        )
        e["possible"] += r["points"]
        e["tests"] += 1
        e["results"][nodeid] = r["status"]
        if r["message"]:
            e["messages"][nodeid] = r["message"]
        if r["status"] == "passed":
            e["earned"] += r["points"]
            e["tests_passed"] += 1
        else:
            e["passed"] = False
    ordered = {k: exercises[k] for k in sorted(exercises, key=_exercise_key)}
    return {
        "earned": sum(e["earned"] for e in ordered.values()),
        "possible": sum(e["possible"] for e in ordered.values()),
        "exercises": ordered,
    }


def _status_word(e: dict) -> str:
    statuses = set(e["results"].values())
    for word in ("timeout", "error", "not done", "failed", "skipped", "not run"):
        if word in statuses:
            return word if e["tests_passed"] == 0 or word != "failed" else "partly"
    return "passed"


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    results = config.stash.get(RESULTS, {})
    if not results:
        return
    from tabulate import tabulate

    g = grade(results)
    rows = [
        [ex, f"{e['earned']:g}/{e['possible']:g}", f"{e['tests_passed']}/{e['tests']}", _status_word(e)]
        for ex, e in g["exercises"].items()
    ]
    rows.append(["total", f"{g['earned']:g}/{g['possible']:g}", "", ""])
    terminalreporter.section(f"score: {answers_dir(config).name}/")
    terminalreporter.write_line(
        tabulate(rows, headers=["exercise", "points", "tests passed", "status"], tablefmt="simple")
    )


def gradescope_results(results: dict) -> dict:
    """Gradescope's autograder results.json: one entry per test (its exercise is its number), and the total.

    Format: https://gradescope-autograders.readthedocs.io/en/latest/specs/
    """
    tests = []
    for nodeid, r in sorted(results.items(), key=lambda kv: (_exercise_key(kv[1]["exercise"]), kv[0])):
        passed = r["status"] == "passed"
        tests.append(
            {
                "name": f"Exercise {r['exercise']}: {nodeid.split('::')[-1]}",
                "number": r["exercise"],
                "score": r["points"] if passed else 0.0,
                "max_score": r["points"],
                "status": "passed" if passed else "failed",
                "output": r["message"] or r["status"],
                "visibility": "visible",
            }
        )
    g = grade(results)
    return {
        "score": g["earned"],
        "output": f"{g['earned']:g}/{g['possible']:g} points",
        "visibility": "visible",
        "stdout_visibility": "visible",
        "tests": tests,
    }


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    results = session.config.stash.get(RESULTS, {})
    if not results:
        return
    path = Path(session.config.getoption("--grade-json"))
    folder = answers_dir(session.config)
    root = session.config.rootpath
    data = {"answers": str(folder.relative_to(root)) if folder.is_relative_to(root) else str(folder), **grade(results)}
    path.write_text(json.dumps(data, indent=1) + "\n")
    gradescope = session.config.getoption("--gradescope")
    if gradescope:
        Path(gradescope).write_text(json.dumps(gradescope_results(results), indent=1) + "\n")
