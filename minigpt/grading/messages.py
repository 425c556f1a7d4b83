"""One message per failed test: what a learner needs to fix it (the property, expected and actual, the hint),
without a traceback, and its status for the score: "not done", "failed", "timeout" or "error".
"""

from __future__ import annotations

import re

import pytest

from minigpt.grading.answers import (
    AnswerRaised,
    ExerciseAlreadyTimedOut,
    ExerciseTimeout,
    ImportFailed,
    WorkerFailed,
)


def short(text: str, max_lines: int = 12) -> str:
    """At most max_lines lines of text, "..." for the rest."""
    lines = text.strip().splitlines()
    return "\n".join(lines[:max_lines] + (["..."] if len(lines) > max_lines else []))


def _not_implemented(error: BaseException | None) -> NotImplementedError | None:
    """The NotImplementedError in the error or its chain (a stub, or an exercise that calls an unfinished one)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, NotImplementedError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def describe_failure(exercise: str, error: BaseException, hint: str = "") -> tuple[str, str]:
    """(status, message) for a failed exercise test. An answer that is finished but wrong gets the exercise's
    hint after what the test found."""
    status, message = _describe(exercise, error)
    if status == "failed" and hint:
        message += f"\n  Hint: {hint}"
    return status, message


def _describe(exercise: str, error: BaseException) -> tuple[str, str]:
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
        where = f" while importing {error.importing}" if error.importing else ""
        return "timeout", (
            f"Exercise {exercise} timed out after {error.seconds:g} s{where}: your code was stopped, and the "
            f"exercise scores 0. Does every pass of your loop get closer to the end? (--exercise-timeout "
            f"changes the limit)"
        )
    if isinstance(error, ImportFailed):
        return "error", f"Exercise {exercise}: {short(str(error), 8)}"
    if isinstance(error, WorkerFailed):
        return "failed", f"Exercise {exercise}: {short(str(error), 8)}"
    if isinstance(error, AnswerRaised):
        where = f"\n  at {error.where}" if error.where else ""
        return "failed", f"Exercise {exercise}: your code raised {error.kind}: {short(error.message, 6)}{where}"
    if isinstance(error, AssertionError):
        return "failed", f"Exercise {exercise} failed: {short(str(error))}"
    if isinstance(error, pytest.fail.Exception):
        return "failed", f"Exercise {exercise}: {short(str(error))}"
    return "failed", (
        f"Exercise {exercise}: {type(error).__name__}: {short(str(error), 6)} "
        f"(raised in the test, outside your answer; --tracebacks shows where)"
    )
