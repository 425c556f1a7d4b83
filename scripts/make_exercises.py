"""Generate the learner's files in exercises/ from the reference answers in solutions/ (the one source).

In solutions/chNN_slug.py each answer sits between two marker lines inside a function body:

    # BEGIN SOLUTION 4.2: the hint a learner sees
    ...the answer...
    # END SOLUTION

exercises/chNN_slug.py gets the same file with each region replaced by
    raise NotImplementedError(
        "Exercise 4.2: the hint a learner sees"
        " - see chapters/04_slug.ipynb"
    )
and exercises/chNN.ipynb is solutions/chNN.ipynb with the same regions stubbed in code cells, markdown cells
tagged "solution" replaced by an answer prompt, the Colab links pointed at exercises/, and outputs cleared.

    python scripts/make_exercises.py            write exercises/
    python scripts/make_exercises.py --check    exit 1 if exercises/ is out of date with solutions/
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEGIN = re.compile(r"^(?P<indent>\s*)# BEGIN SOLUTION (?P<id>\d+\.\d+): (?P<hint>.+?)\s*$")
END = re.compile(r"^\s*# END SOLUTION\s*$")
MODULE = re.compile(r"^ch(?P<nn>\d\d)_(?P<slug>\w+)\.py$")
NOTEBOOK = re.compile(r"^ch(?P<nn>\d\d)\.ipynb$")
MAX_HINT = 95  # characters: the hint is one line of the stub
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}  # as JupyterLab's
ANSWER_PROMPT = "**Your answer:** *(write it here, then compare with the solutions notebook)*"
HEADER = """\
# Chapter {n} exercises, generated from solutions/{name} by scripts/make_exercises.py.
# Learners: replace each `raise NotImplementedError(...)` with your answer, then grade it:
#     pytest exercises/ -k {first}      (one exercise)        pytest exercises/      (all of them)
# ruff: noqa: F401  (the imports are the ones your answers will need)
"""


def chapter_notebook(nn: str, root: Path = ROOT) -> str:
    """chapters/NN_slug.ipynb for chapter NN, from the solutions module that has that number."""
    for path in sorted((root / "solutions").glob(f"ch{nn}_*.py")):
        return f"chapters/{nn}_{MODULE.match(path.name)['slug']}.ipynb"
    raise FileNotFoundError(f"no solutions/ch{nn}_*.py: every chapter needs its module")


def _quoted(text: str) -> str:
    return f'"{text}"' if '"' not in text and "\\" not in text else repr(text)


def stub_line(indent: str, exercise: str, hint: str, chapter: str) -> str:
    """The raise that replaces a solution region; its message is "Exercise N.M: hint - see chapter"."""
    return (
        f"{indent}raise NotImplementedError(\n"
        f"{indent}    {_quoted(f'Exercise {exercise}: {hint}')}\n"
        f"{indent}    {_quoted(f' - see {chapter}')}\n"
        f"{indent})\n"
    )


def stub_code(source: str, chapter: str, where: str = "<source>") -> tuple[str, list[str]]:
    """`source` with each solution region replaced by its NotImplementedError; also the exercise ids."""
    out, ids, region = [], [], None
    for number, line in enumerate(source.splitlines(keepends=True), start=1):
        begin, end = BEGIN.match(line), END.match(line)
        if region is None and begin:
            if not begin["indent"]:
                raise ValueError(f"{where}:{number}: a solution region must be inside a function body")
            if len(begin["hint"]) > MAX_HINT:
                raise ValueError(f"{where}:{number}: shorten this hint to {MAX_HINT} characters (one line of the stub)")
            region = begin
            ids.append(begin["id"])
            out.append(stub_line(begin["indent"], begin["id"], begin["hint"], chapter))
        elif region is None and (end or "SOLUTION" in line and line.lstrip().startswith("# BEGIN")):
            raise ValueError(f"{where}:{number}: {line.strip()!r} without a matching '# BEGIN SOLUTION N.M: hint'")
        elif region is not None and begin:
            raise ValueError(f"{where}:{number}: a solution region starts inside another one")
        elif region is not None and end:
            region = None
        elif region is None:
            out.append(line)
    if region is not None:
        raise ValueError(f"{where}: '# BEGIN SOLUTION {region['id']}' has no '# END SOLUTION'")
    return "".join(out), ids


def exercise_module(path: Path, root: Path = ROOT) -> str:
    """The text of exercises/<name> generated from solutions/<name>."""
    match = MODULE.match(path.name)
    chapter = chapter_notebook(match["nn"], root)
    body, ids = stub_code(path.read_text(), chapter, f"solutions/{path.name}")
    if not ids:
        raise ValueError(f"solutions/{path.name} has no '# BEGIN SOLUTION N.M: hint' region")
    return HEADER.format(n=int(match["nn"]), name=path.name, first=ids[0]) + body


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def exercise_notebook(path: Path, root: Path = ROOT) -> dict:
    """exercises/chNN.ipynb generated from solutions/chNN.ipynb (a notebook as a JSON dict)."""
    nb = json.loads(path.read_text())
    nb["metadata"]["kernelspec"] = dict(KERNELSPEC)  # the one JupyterLab expects, so the notebook opens unmodified
    nb["metadata"].pop("minigpt", None)  # which package files the solutions' run imported: no outputs here to date
    chapter = chapter_notebook(NOTEBOOK.match(path.name)["nn"], root)
    for i, cell in enumerate(nb["cells"]):
        text = _source(cell)
        tags = cell.get("metadata", {}).get("tags", [])
        text = text.replace("/blob/main/solutions/", "/blob/main/exercises/")  # Colab badge
        text = text.replace("minigpt-course/solutions", "minigpt-course/exercises")  # Colab setup cell
        if cell["cell_type"] == "markdown" and "solution" in tags:
            text = ANSWER_PROMPT
        elif cell["cell_type"] == "code":
            text, _ = stub_code(text, chapter, f"solutions/{path.name} cell {i}")
            text = text.rstrip("\n")
            cell["outputs"], cell["execution_count"] = [], None
            cell["metadata"].pop("execution", None)
        cell["source"] = text.splitlines(keepends=True)
    return nb


def notebook_text(nb: dict) -> str:
    """How the notebooks of this repo are written (as nbformat and scripts/badges.py write them)."""
    return json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


def expected_files(root: Path = ROOT) -> dict[Path, str]:
    """Every generated file in exercises/ and the text it should have."""
    files = {}
    for path in sorted((root / "solutions").glob("ch*_*.py")):
        if MODULE.match(path.name):
            files[root / "exercises" / path.name] = exercise_module(path, root)
    for path in sorted((root / "solutions").glob("ch*.ipynb")):
        if NOTEBOOK.match(path.name):
            files[root / "exercises" / path.name] = notebook_text(exercise_notebook(path, root))
    return files


def _same(path: Path, text: str) -> bool:
    if not path.is_file():
        return False
    if path.suffix == ".ipynb":  # compare the content, not the JSON layout
        return json.loads(path.read_text()) == json.loads(text)
    return path.read_text() == text


def out_of_date(root: Path = ROOT) -> list[str]:
    """What --check complains about: missing or changed generated files, and stale ones with no solution."""
    expected = expected_files(root)
    problems = [f"{p.relative_to(root)} is out of date" for p, t in expected.items() if not _same(p, t)]
    generated = [p for p in (root / "exercises").glob("ch*") if MODULE.match(p.name) or NOTEBOOK.match(p.name)]
    problems += [f"{p.relative_to(root)} has no counterpart in solutions/" for p in generated if p not in expected]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if exercises/ is out of date")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this one)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    try:
        if args.check:
            problems = out_of_date(root)
            for problem in problems:
                print(problem, file=sys.stderr)
            if problems:
                print("run: python scripts/make_exercises.py", file=sys.stderr)
            return 1 if problems else 0
        for path, text in expected_files(root).items():
            if not _same(path, text):
                path.write_text(text)
                print(f"wrote {path.relative_to(root)}")
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
