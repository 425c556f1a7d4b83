"""Where the grader gets the reference's outcome of a case: the reference answers in solutions/, run in workers of
their own like the learner's (the instructor's copy of the course), or exercises/expected/chNN_*.pt, written by
scripts/make_expected.py from those same runs (the classroom template, which ships no solutions).

    pytest exercises/                        solutions/ there: run the reference; not there: the stored outcomes
    pytest exercises/ --expected stored      the stored outcomes even where solutions/ is there
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from minigpt.grading.answers import Answers, Workers
from minigpt.grading.contract import Case, compare, expected_path, fresh, load_expected, observe

REFERENCE_TIMEOUT_S = 600.0  # the reference's cases of one exercise: seconds on a 2-core CPU; this only stops a hang


class ReferenceMissing(Exception):
    """Neither the reference answers nor a stored outcome of a case is here: the course copy is incomplete."""


class Reference:
    """The reference's outcomes, from solutions/ (live) or exercises/expected/ (stored), one chapter at a time."""

    def __init__(self, root: Path, exercises: Path, mode: str) -> None:
        self.exercises, self.mode = exercises, mode
        self.solutions = root / "solutions"
        self.workers: Workers | None = None
        self.stored: dict[str, dict] = {}

    def live(self, chapter: str) -> bool:
        """Whether this chapter's reference runs here (its solutions file is here, and stored was not asked)."""
        return self.mode != "stored" and (self.solutions / f"{chapter}.py").is_file()

    def outcome(self, exercise: str, chapter: str, tests: ModuleType, case: Case) -> dict:
        if self.live(chapter):
            if self.workers is None:
                self.workers = Workers(self.solutions, REFERENCE_TIMEOUT_S)
            return self.workers.call(exercise, chapter, tests, observe, (fresh(case),), {})
        if chapter not in self.stored:
            path = expected_path(self.exercises, chapter)
            if not path.is_file():
                raise ReferenceMissing(
                    f"neither solutions/{chapter}.py nor {path.relative_to(self.exercises.parent)} is here: "
                    f"the grader has nothing to compare with (scripts/make_expected.py writes the second)"
                )
            self.stored[chapter] = load_expected(path)
        found = self.stored[chapter].get(exercise, {}).get(case.key())
        if found is None:
            raise ReferenceMissing(
                f"{expected_path(self.exercises, chapter).name} holds no outcome for {case.call_text()}: the stored "
                f"outcomes are older than the tests (scripts/make_expected.py rewrites them)"
            )
        return found

    def stop(self) -> None:
        if self.workers is not None:
            self.workers.stop()
            self.workers = None


class Contract:
    """A test's view of the differential check: contract.check(answers, cases) runs each case on the answer and
    on the reference and fails with the first difference."""

    def __init__(self, reference: Reference, exercise: str, chapter: str, tests: ModuleType) -> None:
        self.reference, self.exercise, self.chapter, self.tests = reference, exercise, chapter, tests

    def check(self, answers: Answers, cases: list[Case]) -> None:
        for case in cases:
            want = self.reference.outcome(self.exercise, self.chapter, self.tests, case)
            got = answers.run(observe, fresh(case))
            problem = compare(got, want, case)
            if problem:
                raise AssertionError(f"{case.call_text()} {problem}")
