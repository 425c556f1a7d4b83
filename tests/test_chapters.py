"""Chapters are authored as text: every chapters/NN_name.ipynb has a MyST markdown twin that holds its cells."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
make_chapters = pytest.importorskip("make_chapters", reason="needs jupytext (pip install -e '.[dev]')")


def test_every_notebook_has_a_text_source():
    notebooks = {p.stem for p in (ROOT / "chapters").glob("*.ipynb")}
    sources = {md.stem for md, _ in make_chapters.pairs()}
    assert notebooks and notebooks == sources


@pytest.mark.parametrize("source, notebook", make_chapters.pairs(), ids=lambda p: p.stem)
def test_text_source_and_notebook_agree(source, notebook):
    assert make_chapters.out_of_sync(source, notebook) is None


def test_an_edit_to_the_text_alone_is_caught(tmp_path):
    source, notebook = make_chapters.pairs()[0]
    edited = tmp_path / source.name
    edited.write_text(source.read_text(encoding="utf-8").replace("# Chapter 1", "# Chapter One", 1), encoding="utf-8")
    assert "differ" in make_chapters.out_of_sync(edited, notebook)


MAX_CELL_LINES = 15  # a cell shows one idea; longer drawing or setup code belongs in minigpt/figures or the package


@pytest.mark.parametrize("source, notebook", make_chapters.pairs(), ids=lambda p: p.stem)
def test_every_code_cell_fits_on_a_screen(source, notebook):
    import json

    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    too_long = {
        i: n
        for i, cell in enumerate(cells)
        if cell["cell_type"] == "code"
        and (n := sum(bool(line.strip()) for line in "".join(cell["source"]).splitlines())) > MAX_CELL_LINES
    }
    assert not too_long, f"{notebook.name}: code cells longer than {MAX_CELL_LINES} non-blank lines: {too_long}"


def test_a_run_records_the_package_files_it_imported_and_a_change_makes_it_stale(tmp_path):
    """make chapters stores, in each notebook, a hash of every package file its kernel imported; a notebook
    whose files changed since is named, so that stored outputs never silently come from older code."""
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("from minigpt.formats import format_rows")])
    make_chapters.run_notebook(nb, tmp_path)
    recorded = nb.metadata["minigpt"]["package_files"]
    assert {"minigpt/__init__.py", "minigpt/formats.py"} <= set(recorded)
    assert "minigpt/train.py" not in recorded  # only what the notebook's code imported
    assert [c.source for c in nb.cells] == ["from minigpt.formats import format_rows"]  # the probe cell is gone
    path = tmp_path / "run.ipynb"
    nbformat.write(nb, path)
    assert make_chapters.stale_because(path) is None
    nb.metadata["minigpt"]["package_files"]["minigpt/formats.py"] = "0" * 16  # as if formats.py changed since
    nbformat.write(nb, path)
    assert make_chapters.stale_because(path) == "run.ipynb was run before minigpt/formats.py changed"
    del nb.metadata["minigpt"]
    nbformat.write(nb, path)
    assert "not run by `make chapters`" in make_chapters.stale_because(path)


def test_no_stored_outputs_come_from_package_code_that_has_changed_since():
    """Every chapter and solution notebook was executed by `make chapters` after the last change to any package
    file its kernel imported: its stored outputs are what the package prints today."""
    notebooks = [notebook for _, notebook in make_chapters.pairs()] + make_chapters.solution_notebooks([])
    stale = [why for why in map(make_chapters.stale_because, notebooks) if why]
    assert not stale, "re-run these with `make chapters` (or scripts/make_chapters.py NN):\n" + "\n".join(stale)
