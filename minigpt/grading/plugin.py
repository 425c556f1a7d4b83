"""The autograder's pytest face, switched on by exercises/conftest.py: it grades your answers in exercises/ (or
the reference answers with --solutions).

    pytest exercises/                      grade every exercise
    pytest exercises/ -k 4.2               grade one exercise (its id; or -m "exercise(id='4.2')")
    pytest exercises/ --solutions          grade the reference answers in solutions/
    pytest exercises/ --answers-dir DIR    grade the chNN_*.py files in another folder
    pytest exercises/ --gradescope results.json   also write Gradescope's autograder results

Each test belongs to one exercise, `@pytest.mark.exercise("4.2", points=2)`. Your answers never run in this
process: each exercise runs them in a worker process of its own (minigpt.grading.answers), the tests send it
their inputs and check what comes back, and this process alone counts the points and writes the grade.
An exercise you have not done yet fails with one line (its hint); an answer that is done but wrong fails with
the property it got wrong, expected and actual, and the hint (each test file's HINTS). An exercise whose answers
run past the timeout (all its tests together) is stopped, its worker killed, and scores 0; the other exercises
still run.
At the end a score table is printed and written to grade.json (--grade-json PATH to move it); the exit status
is 0 only if every selected test passed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from minigpt.grading.answers import STARTUP_LIMIT_S, Answers, ExerciseAlreadyTimedOut, Workers, warm_up
from minigpt.grading.messages import describe_failure
from minigpt.grading.reference import Contract, Reference
from minigpt.grading.score import grade, gradescope_results, score_rows
from minigpt.grading.watch import count_saved_bytes

DEFAULT_TIMEOUT_S = 60.0  # per exercise; a correct answer takes a few seconds on a 2-core CPU
RESULTS = pytest.StashKey[dict]()  # nodeid -> {"exercise", "points", "status", "message"}
TIMED_OUT = pytest.StashKey[set]()  # exercises one of whose tests timed out: their other tests do not run
WORKERS = pytest.StashKey[Workers]()
REFERENCE = pytest.StashKey[Reference]()

# The exercise models are small: one thread is as fast as several, and unlike several it does not slow
# down 10x or more when other processes share the cores (a CI runner, a classroom server).
if "OMP_NUM_THREADS" not in os.environ:
    torch.set_num_threads(1)


# ----------------------------------------------------------------------------------------------------------
# Options, markers, and the session's workers


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
        help=f"seconds an exercise's answers may run, all its tests together, before they are stopped and the "
        f"exercise scores 0 (default: {DEFAULT_TIMEOUT_S:g})",
    )
    group.addoption(
        "--gradescope",
        metavar="PATH",
        help="also write the grade as Gradescope's autograder results.json to PATH",
    )
    group.addoption(
        "--expected",
        choices=("auto", "reference", "stored"),
        default="auto",
        help="where the reference's outcomes come from: auto (solutions/ where it is here: its stored outcomes "
        "if they were made from exactly this code, else run it; exercises/expected/ where it is not), reference "
        "(always run solutions/) or stored (always read exercises/expected/, as the classroom template does)",
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
        what = "--solutions: solutions/" if session.config.getoption("--solutions") else f"--answers-dir {folder}"
        raise pytest.UsageError(f"{what} is not a folder here")
    timeout = session.config.getoption("--exercise-timeout")
    if not timeout > 0:
        raise pytest.UsageError(f"--exercise-timeout must be a positive number of seconds, not {timeout:g}")
    session.config.stash[WORKERS] = Workers(folder, timeout)
    mode = session.config.getoption("--expected")
    session.config.stash[REFERENCE] = Reference(session.config.rootpath, exercises_dir(session.config), mode)
    warm_up()  # the server the workers are forked from imports torch while pytest collects


def _stop_workers(config: pytest.Config) -> None:
    workers = config.stash.get(WORKERS, None)
    if workers is not None:
        workers.stop()
    reference = config.stash.get(REFERENCE, None)
    if reference is not None:
        reference.stop()


def pytest_unconfigure(config: pytest.Config) -> None:
    _stop_workers(config)


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
    """Every test must name its exercise; `-k 4.2` selects an exercise."""
    timeout = config.getoption("--exercise-timeout")
    for item in items:
        if not item.path.is_relative_to(exercises_dir(config)):
            continue
        found = exercise_of(item)
        if found is None:
            raise pytest.UsageError(f"{item.nodeid} has no @pytest.mark.exercise(id, points=...) marker")
        item.extra_keyword_matches.add(found[0])  # so that `-k 4.2` selects it
        item.add_marker(pytest.mark.exercise(id=found[0]))  # and `-m "exercise(id='4.2')"` (pytest >= 8.3)
        if config.pluginmanager.hasplugin("timeout"):  # a backstop for the grader's own code: never reached
            item.add_marker(pytest.mark.timeout(2 * timeout + STARTUP_LIMIT_S + 60))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A hang costs one timeout per exercise: once a test of it timed out, its other tests do not run."""
    found = exercise_of(item)
    if found is not None and found[0] in item.config.stash[TIMED_OUT]:
        raise ExerciseAlreadyTimedOut(found[0])


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """An exercise's worker ends with its last test, before the next exercise's tests begin."""
    found = exercise_of(item)
    following = exercise_of(nextitem) if nextitem is not None else None
    if found is not None and (following is None or following[0] != found[0]):
        item.config.stash[WORKERS].stop_current()
        if item.config.stash[REFERENCE].workers is not None:
            item.config.stash[REFERENCE].workers.stop_current()


# ----------------------------------------------------------------------------------------------------------
# Fixtures: the answers, and shared test inputs


@pytest.fixture
def answers(request: pytest.FixtureRequest) -> Answers:
    """The answers under grading for this test's exercise (the test file's CHAPTER, from exercises/, solutions/
    or --answers-dir): `answers.f(...)` runs f in the exercise's worker process."""
    exercise = exercise_of(request.node)
    if exercise is None:
        raise pytest.UsageError(f"{request.node.nodeid} uses `answers` without an exercise marker")
    return Answers(request.config.stash[WORKERS], exercise[0], request.module.CHAPTER, request.module)


@pytest.fixture
def contract(request: pytest.FixtureRequest) -> Contract:
    """The differential check of this test's exercise: contract.check(answers, cases) runs each case on the
    answer and on the reference (minigpt.grading.contract) and fails with the first difference."""
    exercise = exercise_of(request.node)
    if exercise is None:
        raise pytest.UsageError(f"{request.node.nodeid} uses `contract` without an exercise marker")
    return Contract(request.config.stash[REFERENCE], exercise[0], request.module.CHAPTER, request.module)


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


@pytest.fixture
def saved_bytes():
    """count_saved_bytes(module, run): what a forward pass keeps for backward, measured on real tensors."""
    return count_saved_bytes


# ----------------------------------------------------------------------------------------------------------
# Reports: one message per failure, and the status of each test for the score


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
        status, message = describe_failure(exercise, error, hint)
        if status == "timeout":
            item.config.stash[TIMED_OUT].add(exercise)
        if report.when != "call" and status == "failed":
            status = "error"  # in setup or teardown
        entry.update(status=status, message=message)
        if not item.config.getoption("--tracebacks"):
            report.longrepr = message
        elif getattr(error, "traceback", ""):
            report.sections.append(("the traceback in your code's process", error.traceback))
    elif report.when == "call" and entry["status"] == "not run":
        entry["status"] = "passed"


# ----------------------------------------------------------------------------------------------------------
# The score: a table, grade.json, Gradescope's results.json, and an exit status that follows them


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    results = config.stash.get(RESULTS, {})
    if not results:
        return
    from tabulate import tabulate

    g = grade(results)
    terminalreporter.section(f"score: {answers_dir(config).name}/")
    terminalreporter.write_line(
        tabulate(score_rows(g), headers=["exercise", "points", "tests passed", "status"], tablefmt="simple")
    )
    failing = sum(r["status"] != "passed" for r in results.values())
    verdict = "every selected test passed" if not failing else f"{failing} of {len(results)} tests did not pass"
    terminalreporter.write_line(f"grade: {g['earned']:g}/{g['possible']:g} points, {verdict}")


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    _stop_workers(session.config)
    results = session.config.stash.get(RESULTS, {})
    if not results:
        return
    if any(r["status"] != "passed" for r in results.values()) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    path = Path(session.config.getoption("--grade-json"))
    folder = answers_dir(session.config)
    root = session.config.rootpath
    data = {"answers": str(folder.relative_to(root)) if folder.is_relative_to(root) else str(folder), **grade(results)}
    path.write_text(json.dumps(data, indent=1) + "\n")
    gradescope = session.config.getoption("--gradescope")
    if gradescope:
        Path(gradescope).write_text(json.dumps(gradescope_results(results), indent=1) + "\n")
