"""Grading checks each exercise's whole contract (minigpt/grading/contract.py): the answer and the reference run on
the same inputs, and the value, the arguments after the call, aliasing, errors and (for memory exercises) the peak
are compared.

Here: every promise a stub's docstring makes ("Returns:", "In place:", "Raises:") is checked by a contract case
whose reference outcome keeps it; the stored outcomes (exercises/expected/) are the reference's; each wrong-answer
set (tests/wrong_answers/) is caught at 95% or more; and the two ways of grading, the reference run live and the
stored outcomes (the classroom template's way), give every wrong answer the same grade.
"""

import ast
import textwrap
from pathlib import Path

import pytest
from grading_runs import ROOT, GraderRun
from script_loader import load_script
from tabulate import tabulate
from wrong_answers import SETS

from minigpt.grading.contract import expected_path, load_expected

pytestmark = pytest.mark.timeout(3600)  # every wrong-answer set graded twice: many minutes on a busy 2-core machine
make_expected = load_script("make_expected")
CHAPTERS = sorted(p.stem for p in (ROOT / "solutions").glob("ch*_*.py"))
LABELS = ("Returns:", "In place:", "Raises:")
CAUGHT_AT_LEAST = 0.95  # the bar for each wrong-answer set


def _normal(text: str) -> str:
    return " ".join(text.split())


def promises(docstring: str) -> list[str]:
    """The promises of a docstring: each line that starts with a label, with the lines that continue it (up to a
    blank line or the next label), whitespace made single."""
    found: list[list[str]] = []
    current = None
    for line in docstring.splitlines():
        text = line.strip()
        if text.startswith(LABELS):
            current = [text]
            found.append(current)
        elif current is not None and text:
            current.append(text)
        else:
            current = None
    return [_normal(" ".join(p)) for p in found]


def exercise_functions(chapter: str) -> dict[str, tuple[str, str, str]]:
    """{function: (exercise id, docstring, return annotation)} of the chapter's exercise functions (solutions/)."""
    tree = ast.parse((ROOT / "solutions" / f"{chapter}.py").read_text())
    found = {}
    for node in tree.body:
        doc = ast.get_docstring(node) if isinstance(node, ast.FunctionDef) else None
        if doc and doc.startswith("Exercise "):
            exercise = doc.split(":")[0].split()[1]
            found[node.name] = (exercise, doc, ast.unparse(node.returns) if node.returns else "")
    return found


def _type_keeps(annotation: str, value: object) -> bool:
    """Whether value is of the kind the return annotation names (its outer type)."""
    outer = annotation.split("[")[0].strip()
    kinds = {
        "int": lambda v: type(v) is int,
        "float": lambda v: type(v) in (float, int),
        "bool": lambda v: type(v) is bool,
        "str": lambda v: type(v) is str,
        "None": lambda v: v is None,
        "torch.Tensor": lambda v: type(v).__name__ == "Tensor",
        "tuple": lambda v: isinstance(v, (tuple, list)),
        "list": lambda v: isinstance(v, list),
        "dict": lambda v: isinstance(v, dict),
    }
    return kinds.get(outer, lambda v: True)(value)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_promise_in_a_docstring_has_a_case_that_keeps_it(chapter):
    """Each exercise says what it returns, what it changes in place and what it raises; each such promise is named
    by a contract case (Case.promise), and the reference's stored outcome of that case keeps it."""
    tests = make_expected.test_module(chapter)
    stored = load_expected(expected_path(ROOT / "exercises", chapter))
    cases = [(exercise, case) for exercise, make in getattr(tests, "CONTRACTS", {}).items() for case in make()]
    problems = []
    for function, (_, doc, annotation) in exercise_functions(chapter).items():
        said = promises(doc)
        for label in LABELS:
            if not any(p.startswith(label) for p in said):
                problems.append(f"{function}: its docstring has no '{label}' line")
        for promise in said:
            checking = [
                (e, c) for e, c in cases if c.function == function and promise in {_normal(p) for p in c.promises}
            ]
            if not checking:
                problems.append(f"{function}: no contract case checks {promise!r}")
                continue
            for e, case in checking:
                outcome = stored.get(e, {}).get(case.key())
                if outcome is None:
                    problems.append(f"{function}: no stored outcome for {case.call_text()}")
                    continue
                problem = _kept(promise, outcome, annotation)
                if problem:
                    problems.append(f"{function}: {case.call_text()} does not keep {promise!r}: {problem}")
    assert not problems, "\n".join(problems)


def _kept(promise: str, outcome: dict, annotation: str) -> str | None:
    """Why the reference's outcome breaks the promise, or None."""
    label, _, text = promise.partition(":")
    text = text.strip()
    raised = outcome["raised"]
    if label == "Raises":
        if text.lower().startswith("nothing"):
            return f"it raised {raised['type']}" if raised else None
        name = text.split()[0].rstrip(",.;")
        if raised is None:
            return "it returned"
        return None if name in (raised["builtin"], raised["type"]) else f"it raised {raised['type']}, not {name}"
    if raised is not None:
        return f"it raised {raised['type']}: {raised['message'][:100]}"
    if label == "In place":
        changed = outcome["changed"]
        if text.lower().startswith("nothing"):
            return f"it changed {sorted(changed)}" if changed else None
        return None if changed else "it changed nothing"
    if not _type_keeps(annotation, outcome["result"]):
        return f"it returned a {type(outcome['result']).__name__}, not the annotated {annotation}"
    return None


def test_the_stored_outcomes_are_the_references():
    """exercises/expected/ is what the reference answers give now: the template grades as the course does."""
    assert make_expected.main(["--check"]) == 0, "run python scripts/make_expected.py"


def test_each_chapter_has_ten_new_wrong_answers_of_its_own():
    for chapter in range(1, 11):
        mistakes = SETS.get(f"ch{chapter:02d}", {})
        assert len(mistakes) >= 10, f"tests/wrong_answers/ch{chapter:02d}.py: {len(mistakes)} wrong answers, 10 asked"
        others = {name for name, m in mistakes.items() if int(m.exercise.split(".")[0]) != chapter}
        assert not others, f"ch{chapter:02d}: {others} belong to other chapters"


def _caught(grade: dict, exercise: str) -> bool:
    result = grade["exercises"].get(exercise)
    return result is not None and result["earned"] < result["possible"]


@pytest.fixture(scope="module")
def grades(wrong_answer_runs) -> dict[str, dict[str, dict]]:
    """{set: {mistake: {"stored": grade.json[, "live": grade.json]}}}, waiting for every run (conftest's
    wrong_answer_runs: the first rounds are graded live as well)."""
    return {
        set_name: {name: {mode: run.result()[1] for mode, run in runs.items()} for name, runs in mistakes.items()}
        for set_name, mistakes in wrong_answer_runs.items()
    }


def test_each_wrong_answer_set_is_caught(grades, capsys):
    rows, low = [], {}
    for set_name, mistakes in SETS.items():
        caught = [name for name, m in mistakes.items() if _caught(grades[set_name][name]["stored"], m.exercise)]
        rate = len(caught) / len(mistakes)
        rows.append([set_name, len(mistakes), len(caught), f"{rate:.1%}"])
        if rate < CAUGHT_AT_LEAST:
            low[set_name] = sorted(set(mistakes) - set(caught))
    with capsys.disabled():
        print("\n\nWrong answers caught by pytest exercises/, per set\n")
        print(tabulate(rows, headers=["set", "wrong answers", "caught", "rate"], tablefmt="simple"))
    assert not low, f"sets caught below {CAUGHT_AT_LEAST:.0%}; the ones that passed: {low}"


def test_the_template_way_and_the_instructors_way_give_the_same_grade(grades):
    differ, compared = [], set()
    for set_name, mistakes in SETS.items():
        for name, m in mistakes.items():
            if "live" not in grades[set_name][name]:
                continue
            compared.add(m.exercise)
            live, stored = (grades[set_name][name][mode]["exercises"].get(m.exercise) for mode in ("live", "stored"))
            if (
                live is None
                or stored is None
                or (live["earned"], live["results"])
                != (
                    stored["earned"],
                    stored["results"],
                )
            ):
                differ.append(
                    f"{set_name}: {name}: live {live and live['results']}, stored {stored and stored['results']}"
                )
    assert not differ, "\n".join(differ)
    every = {m.exercise for mistakes in SETS.values() for m in mistakes.values()}
    assert compared == every, f"exercises never graded both ways: {sorted(every - compared)}"


def test_the_new_sets_list_what_caught_each(grades, capsys):
    """The table a maintainer reads: each new wrong answer and the first message that caught it."""
    rows = []
    for set_name, mistakes in SETS.items():
        if set_name == "classic":
            continue
        for name, m in mistakes.items():
            result = grades[set_name][name]["stored"]["exercises"][m.exercise]
            message = next((msg for msg in result["messages"].values() if msg), "(passed)")
            rows.append([m.exercise, name[:50], textwrap.shorten(message.split("\n")[0], 100)])
    with capsys.disabled():
        print("\n\nThe new wrong answers, and what caught each\n")
        print(tabulate(rows, headers=["exercise", "wrong answer", "first message"], tablefmt="simple"))
    assert rows


def test_the_solutions_pass_against_the_stored_outcomes(grader_limiter, tmp_path):
    run = GraderRun(grader_limiter, tmp_path, "--solutions", "--expected", "stored")
    output, grade = run.result()
    assert grade["earned"] == grade["possible"] > 0, output[-4000:]


def test_a_missing_stored_outcome_is_an_error_that_says_what_to_run(tmp_path):
    from minigpt.grading.contract import Case
    from minigpt.grading.reference import Reference, ReferenceMissing

    reference = Reference(tmp_path, tmp_path / "exercises", "stored")
    with pytest.raises(ReferenceMissing, match="make_expected.py"):
        reference.outcome("9.3", "ch09_toolbox", None, Case("state_bytes", (1,)))
    assert Path(expected_path(tmp_path / "exercises", "ch09_toolbox")).name == "ch09_toolbox.pt"
