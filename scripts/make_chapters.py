"""Execute the chapters from their text sources, then the solution notebooks: `make chapters`.

Each chapter is authored as MyST markdown (chapters/NN_name.md, paired by jupytext with the .ipynb that
stores the outputs). For every chapter this script copies the text's cells into the notebook (jupytext
--update keeps the stored outputs of unchanged cells), runs it top to bottom in a fresh kernel with one
torch thread, and writes the executed notebook back, printing each chapter's wall time. Then it runs every
solution notebook (solutions/chNN.ipynb, stored with outputs too) the same way, so that every stored output
comes from one pass on one machine. (The exercise notebooks store no outputs: learners fill them in.)
Each executed notebook records in its metadata ("minigpt", "package_files") a hash of every file of the
package its kernel had imported when it finished: tests/test_chapters.py names the notebooks whose stored
outputs came from code that has changed since.

    python scripts/make_chapters.py                 every chapter
    python scripts/make_chapters.py 03 06           chapters 03 and 06 and their solution notebooks
    python scripts/make_chapters.py --check         only check that every pair is in sync and which notebooks'
                                                    outputs came from package files changed since (no execution)
"""

from __future__ import annotations

import argparse
import hashlib
import json
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


# Run after the notebook's last cell, in its kernel: the package's files it imported (then the cell is dropped)
IMPORTED_PROBE = """
import json as _json, sys as _sys
from pathlib import Path as _Path
import minigpt as _minigpt
_root = _Path(_minigpt.__file__).resolve().parent
_files = {_Path(m.__file__).resolve() for m in list(_sys.modules.values()) if getattr(m, "__file__", None)}
print(_json.dumps(sorted(str(f.relative_to(_root.parent)) for f in _files if f.is_relative_to(_root))))
"""


def file_hash(path: Path) -> str:
    """A short content hash: enough to tell that a file changed."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def package_file_hashes(files: list[str]) -> dict[str, str]:
    """{path relative to the repository: hash} of these package files as they are now."""
    return {name: file_hash(ROOT / name) for name in files}


def stale_because(notebook: Path) -> str | None:
    """Why the notebook's stored outputs may no longer be what the package prints, or None when they are current."""
    recorded = nbformat.read(notebook, as_version=4).metadata.get("minigpt", {}).get("package_files")
    if recorded is None:
        return f"{notebook.name} records no package files: it was not run by `make chapters`"
    changed = sorted(
        name for name, digest in recorded.items() if not (ROOT / name).exists() or file_hash(ROOT / name) != digest
    )
    if changed:
        return f"{notebook.name} was run before {', '.join(changed)} changed"
    return None


def run_notebook(nb: nbformat.NotebookNode, folder: Path) -> float:
    """Run `nb` top to bottom in a fresh kernel whose working folder is `folder`; return seconds taken.

    Its metadata then records the package files the kernel imported, with their hashes (package_file_hashes).
    """
    start = time.perf_counter()
    nb.cells.append(nbformat.v4.new_code_cell(IMPORTED_PROBE))
    NotebookClient(
        nb, timeout=TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(folder)}}, record_timing=True
    ).execute()
    probe = nb.cells.pop()
    imported = json.loads("".join(o.get("text", "") for o in probe.outputs if o.get("name") == "stdout"))
    nb.metadata["minigpt"] = {"package_files": package_file_hashes(imported)}
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
        notebooks = [nb for _, nb in chosen] + solution_notebooks([prefix[:2] for prefix in args.chapters])
        problems = [why for why in (out_of_sync(*p) for p in chosen) if why]
        problems += [why for why in map(stale_because, notebooks) if why]
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
