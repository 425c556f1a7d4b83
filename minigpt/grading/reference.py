"""Where the grader gets the reference's outcome of a case: the reference answers in solutions/, run in workers of
their own like the learner's (the instructor's copy of the course), or exercises/expected/chNN_*.pt, written by
scripts/make_expected.py from those same runs (the classroom template, which ships no solutions).

    pytest exercises/                        solutions/ there: the reference's outcomes; not there: the stored ones
    pytest exercises/ --expected reference   run the reference for every case, even where a stored outcome is current
    pytest exercises/ --expected stored      the stored outcomes even where solutions/ is there

A stored file records a fingerprint of everything its outcomes follow from (the chapter's solutions and tests, the
package's code, torch's version). Where solutions/ is here and the fingerprint still matches, the stored outcomes
are the reference's outcomes on these very inputs, so `auto` reads them instead of running the reference again;
after any change to that code it runs the reference.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch

from minigpt.grading.answers import Answers, Workers
from minigpt.grading.contract import Case, compare, expected_path, fresh, load_expected, observe

REFERENCE_TIMEOUT_S = 600.0  # the reference's cases of one exercise: seconds on a 2-core CPU; this only stops a hang


FINGERPRINT = "__made_from__"  # the stored file's key for source_fingerprint()


def source_fingerprint(root: Path, chapter: str) -> str:
    """A hash of what a chapter's outcomes follow from: its solutions and tests, every module of the package, and
    torch's version."""
    digest = hashlib.sha256(torch.__version__.encode())
    files = [root / "solutions" / f"{chapter}.py", root / "exercises" / f"test_{chapter}.py"]
    files += sorted((root / "minigpt").rglob("*.py"))
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"(missing)")
    return digest.hexdigest()


class ReferenceMissing(Exception):
    """Neither the reference answers nor a stored outcome of a case is here: the course copy is incomplete."""


class Reference:
    """The reference's outcomes, from solutions/ (live) or exercises/expected/ (stored), one chapter at a time."""

    def __init__(self, root: Path, exercises: Path, mode: str) -> None:
        self.exercises, self.mode = exercises, mode
        self.solutions = root / "solutions"
        self.workers: Workers | None = None
        self.stored: dict[str, dict] = {}
        self.current: dict[str, bool] = {}  # chapter -> its stored outcomes were made from exactly this code

    def live(self, chapter: str) -> bool:
        """Whether this chapter's reference runs here: its solutions file is here, stored was not asked, and (in
        auto) no stored file was made from exactly this code."""
        if self.mode == "stored" or not (self.solutions / f"{chapter}.py").is_file():
            return False
        if self.mode == "reference":
            return True
        if chapter not in self.current:  # decided once per chapter and session
            stored = self._stored(chapter, missing_ok=True)
            made_from = None if stored is None else stored.get(FINGERPRINT)
            self.current[chapter] = made_from == source_fingerprint(self.solutions.parent, chapter)
        return not self.current[chapter]

    def _stored(self, chapter: str, missing_ok: bool = False) -> dict | None:
        if chapter not in self.stored:
            path = expected_path(self.exercises, chapter)
            if not path.is_file():
                if missing_ok:
                    return None
                raise ReferenceMissing(
                    f"neither solutions/{chapter}.py nor {path.relative_to(self.exercises.parent)} is here: "
                    f"the grader has nothing to compare with (scripts/make_expected.py writes the second)"
                )
            self.stored[chapter] = load_expected(path)
        return self.stored[chapter]

    def outcome(self, exercise: str, chapter: str, tests: ModuleType, case: Case) -> dict:
        if self.live(chapter):
            if self.workers is None:
                self.workers = Workers(self.solutions, REFERENCE_TIMEOUT_S)
            return self.workers.call(exercise, chapter, tests, observe, (fresh(case),), {})
        found = self._stored(chapter).get(exercise, {}).get(case.key())
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
            self.run(answers, case)

    def run(self, answers: Answers, case: Case, check: Callable[[object], None] | None = None) -> object:
        """Check one case and return what the answer returned: a test that checks more of that value (a property
        of an experiment's result) calls the answer once, not once for the contract and once for itself.
        check(result), if given, runs first: its messages say what to fix, the comparison covers the rest."""
        got = answers.run(observe, fresh(case))
        if check is not None and got["raised"] is None:
            check(got["result"])
        want = self.reference.outcome(self.exercise, self.chapter, self.tests, case)
        problem = compare(got, want, case)
        if problem:
            raise AssertionError(f"{case.call_text()} {problem}")
        return got["result"]
