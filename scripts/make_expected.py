"""Write exercises/expected/chNN_slug.pt: the reference answers' outcome of every contract case, for graders that
run without solutions/ (the classroom template). The outcomes come from the grader's own live path (the reference
in a worker process, through minigpt.grading.reference), so the stored grade and the live grade are the same.

    python scripts/make_expected.py                 every chapter
    python scripts/make_expected.py ch09_toolbox    one chapter (its module name)
    python scripts/make_expected.py --check         exit 1 if a stored outcome differs from the reference's now
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = ROOT / "exercises"


def test_module(chapter: str):
    """exercises/test_<chapter>.py, imported under the name pytest gives it (so its functions pickle the same)."""
    name = f"test_{chapter}"
    if name in sys.modules:
        return sys.modules[name]
    sys.path.insert(0, str(EXERCISES))
    spec = importlib.util.spec_from_file_location(name, EXERCISES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def chapters() -> list[str]:
    return sorted(p.stem for p in (ROOT / "solutions").glob("ch*_*.py"))


def reference_outcomes(chapter: str) -> tuple[dict, dict]:
    """({exercise: {case key: outcome}}, {exercise: {case key: case}}) from the reference answers, run live."""
    from minigpt.grading.reference import Reference

    tests = test_module(chapter)
    reference = Reference(ROOT, EXERCISES, "reference")
    outcomes: dict[str, dict] = {}
    cases: dict[str, dict] = {}
    try:
        for exercise, make_cases in getattr(tests, "CONTRACTS", {}).items():
            for case in make_cases():
                key = case.key()
                if key in cases.setdefault(exercise, {}):
                    raise SystemExit(f"{chapter} {exercise}: two cases with the same inputs ({case.call_text()})")
                cases[exercise][key] = case
                outcomes.setdefault(exercise, {})[key] = reference.outcome(exercise, chapter, tests, case)
            if reference.workers is not None:
                reference.workers.stop_current()
    finally:
        reference.stop()
    return outcomes, cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*", help="chapter modules (default: all)")
    parser.add_argument("--check", action="store_true", help="compare with the stored outcomes; write nothing")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # as the grader runs
    from minigpt.grading.contract import compare, expected_path, load_expected, save_expected
    from minigpt.grading.reference import FINGERPRINT, source_fingerprint

    stale = []
    for chapter in args.chapters or chapters():
        outcomes, cases = reference_outcomes(chapter)
        path = expected_path(EXERCISES, chapter)
        if not args.check:
            save_expected(path, {FINGERPRINT: source_fingerprint(ROOT, chapter), **outcomes})
            print(f"wrote {path.relative_to(ROOT)}: {sum(map(len, outcomes.values()))} outcomes")
            continue
        stored = load_expected(path) if path.is_file() else {}
        for exercise, by_key in outcomes.items():
            for key, want in by_key.items():
                have = stored.get(exercise, {}).get(key)
                case = cases[exercise][key]
                problem = "missing" if have is None else compare(have, want, case)
                if problem:
                    stale.append(f"{chapter} {exercise} {case.call_text()}: stored outcome {problem}")
        stored.pop(FINGERPRINT, None)
        extra = {(e, k) for e, by in stored.items() for k in by} - {(e, k) for e, by in outcomes.items() for k in by}
        stale += [f"{chapter} {e}: a stored outcome no case makes ({k})" for e, k in sorted(extra)]
    if stale:
        print("exercises/expected/ is out of date: run python scripts/make_expected.py\n" + "\n".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
