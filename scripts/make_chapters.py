"""Execute the chapters from their text sources, then the solution notebooks: `make chapters`.

Each chapter is authored as MyST markdown (chapters/NN_name.md, paired by jupytext with the .ipynb that
stores the outputs). For every chapter this script copies the text's cells into the notebook (jupytext
--update keeps the stored outputs of unchanged cells), runs it top to bottom in a fresh kernel with one
torch thread, and writes the executed notebook back, printing each chapter's wall time. Then it runs every
solution notebook (solutions/chNN.ipynb, stored with outputs too) the same way, so that every stored output
comes from one pass on one machine. (The exercise notebooks store no outputs: learners fill them in.)

    python scripts/make_chapters.py                 every chapter
    python scripts/make_chapters.py 03 06           chapters 03 and 06 and their solution notebooks
    python scripts/make_chapters.py --check         only check that every pair is in sync (no execution)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ROOT / "chapters"
SOLUTIONS = ROOT / "solutions"
TEXT_FORMAT = "md:myst"
TIMEOUT_S = 900  # per cell: the longest chapter cell takes about a minute on a 2-core CPU
# The kernelspec JupyterLab's installed ipykernel reports: any other display name marks a notebook unsaved on open.
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def pairs() -> list[tuple[Path, Path]]:
    """(text source, notebook) of every chapter, in chapter order."""
    return [(md, md.with_suffix(".ipynb")) for md in sorted(CHAPTERS.glob("[0-9][0-9]_*.md"))]


def out_of_sync(source: Path, notebook: Path) -> str | None:
    """Why the notebook's cells differ from its text source, or None when they agree."""
    if not notebook.exists():
        return f"{notebook.name} is missing: run `make chapters` to build it from {source.name}"
    as_text = jupytext.writes(jupytext.read(notebook), fmt=TEXT_FORMAT)
    strip = lambda text: [line for line in text.splitlines() if "jupytext_version" not in line]  # noqa: E731
    if strip(as_text) != strip(source.read_text(encoding="utf-8")):
        return (
            f"{notebook.name} and {source.name} differ: edit the .md, then run "
            f"`jupytext --to ipynb --update chapters/{source.name}` (or `make chapters`)"
        )
    return None


def solution_notebooks(prefixes: list[str]) -> list[Path]:
    """solutions/chNN.ipynb for the chapters chosen by their number prefixes (all when none are given)."""
    return [p for p in sorted(SOLUTIONS.glob("ch[0-9][0-9].ipynb")) if not prefixes or p.stem[2:4] in prefixes]


def run_notebook(nb: nbformat.NotebookNode, folder: Path) -> float:
    """Run `nb` top to bottom in a fresh kernel whose working folder is `folder`; return seconds taken."""
    start = time.perf_counter()
    NotebookClient(
        nb, timeout=TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(folder)}}, record_timing=True
    ).execute()
    return time.perf_counter() - start


def execute(source: Path, notebook: Path) -> float:
    """Update the notebook's cells from the text, run it in a fresh kernel, save it; return seconds taken."""
    nb = jupytext.read(source)
    if notebook.exists():  # keep the notebook-level metadata (kernelspec, widgets) the .md does not hold
        old = nbformat.read(notebook, as_version=4)
        nb.metadata = {**old.metadata, **nb.metadata}
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    seconds = run_notebook(nb, CHAPTERS)
    nbformat.write(nb, notebook)
    return seconds


def execute_solution(notebook: Path) -> float:
    """Run a solution notebook in a fresh kernel and store its outputs; return seconds taken."""
    nb = nbformat.read(notebook, as_version=4)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    seconds = run_notebook(nb, SOLUTIONS)
    nbformat.write(nb, notebook)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*", help="chapter number prefixes (default: all)")
    parser.add_argument("--check", action="store_true", help="only check that each .md and .ipynb agree")
    args = parser.parse_args(argv)
    chosen = [p for p in pairs() if not args.chapters or p[0].name.startswith(tuple(args.chapters))]
    if args.check:
        problems = [why for why in (out_of_sync(*p) for p in chosen) if why]
        print("\n".join(problems) or f"{len(chosen)} chapters: text and notebook agree")
        return 1 if problems else 0
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # the kernel inherits it: the same threads every pass
    for source, notebook in chosen:
        print(f"{notebook.name}: {execute(source, notebook):.0f} s", flush=True)
    for notebook in solution_notebooks([prefix[:2] for prefix in args.chapters]):
        print(f"solutions/{notebook.name}: {execute_solution(notebook):.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
