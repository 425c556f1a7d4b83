"""What a learner reads: no references to documents they do not have, exercise sections that match exercises/,
and notebooks stored with the kernelspec JupyterLab expects."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}

# Words that point at a document the learner never saw: the notes the course was written from.
STRAY_WORDS = re.compile(
    r"seed ?0\d\d|seed exercise|of[- ]the[- ]source\b|the source's|\bthe book\b|\bbook's|\(book\)"
    r"|this course's sources|another course|the chapter this one grew from",
    re.IGNORECASE,
)


def learner_files(root: Path = ROOT) -> list[Path]:
    """Every file a learner reads: the chapters (text and notebook), exercises/, solutions/ and the README."""
    files = [*(root / "chapters").glob("*.md"), *(root / "chapters").glob("*.ipynb"), root / "README.md"]
    for folder in ("exercises", "solutions"):
        files += [p for p in (root / folder).iterdir() if p.is_file() and p.suffix in {".py", ".ipynb", ".md"}]
    return sorted(files)


def stray_words(path: Path) -> list[str]:
    """'file:line: match' for each stray word in `path`."""
    hits = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        hits += [f"{path.name}:{number}: {m.group()!r}" for m in STRAY_WORDS.finditer(line)]
    return hits


def test_the_learner_files_are_all_scanned():
    names = {p.relative_to(ROOT).as_posix() for p in learner_files()}
    assert "README.md" in names and "exercises/README.md" in names
    chapters = len(list((ROOT / "chapters").glob("[0-9][0-9]_*.md")))
    assert chapters >= 8 and len([n for n in names if n.startswith("chapters/")]) == 2 * chapters  # .md and .ipynb
    assert {"solutions/ch06_checkpointing.py", "exercises/ch06.ipynb", "exercises/test_ch06_checkpointing.py"} <= names


@pytest.mark.parametrize("path", learner_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_learner_file_names_an_unseen_document(path):
    assert not stray_words(path), "rewrite so the fact stands on its own, or cite the published work:\n" + "\n".join(
        stray_words(path)
    )


@pytest.mark.parametrize(
    "text",
    [
        "as seed 004 says",
        "Exercise 3 of the source",
        "(ch06.ipynb#7.-Exercise-3-of-the-source:-is)",
        "the Book's table",
        "(seed exercise 2)",
        "from another course",
    ],
)
def test_the_check_catches_an_injected_reference(tmp_path, text):
    path = tmp_path / "chapter.md"
    path.write_text(f"A clean line.\n{text}, then more.\n", encoding="utf-8")
    assert stray_words(path) and stray_words(path)[0].startswith("chapter.md:2:")


def test_the_check_leaves_ordinary_words_alone(tmp_path):
    path = tmp_path / "chapter.md"
    path.write_text("torch.manual_seed(0), seed=3, a notebook, the textbook loop, the source code\n")
    assert stray_words(path) == []


# Exercise sections: the numbers and titles of exercises/ ------------------------------------------------------

EXERCISE_ITEM = re.compile(r"^\d+\. \*\*Exercise (\d+\.\d+): ([^*]+)\*\*", re.MULTILINE)
NOTEBOOK_HEADING = re.compile(r"^## Exercise (\d+\.\d+): (.+?)\s*$", re.MULTILINE)
STUB = re.compile(r"""raise NotImplementedError\(\s*["']Exercise (\d+\.\d+):""")


def exercises_in_notebook(nn: str) -> list[tuple[str, str]]:
    """(number, title) of each exercise, from the headings of exercises/chNN.ipynb."""
    nb = json.loads((ROOT / "exercises" / f"ch{nn}.ipynb").read_text(encoding="utf-8"))
    text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    return NOTEBOOK_HEADING.findall(text)


def exercises_in_chapter(text: str) -> list[tuple[str, str]]:
    """(number, title) of each numbered item of a chapter's "## Exercises" section."""
    section = re.search(r"^## Exercises\n(.*?)(?=^\+\+\+|^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert section, 'no "## Exercises" section'
    return [(n, title.strip()) for n, title in EXERCISE_ITEM.findall(section.group(1))]


CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.md"))


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_exercise_section_lists_the_exercises_of_exercises_folder(chapter):
    nn = chapter.name[:2]
    module = next((ROOT / "exercises").glob(f"ch{nn}_*.py")).read_text(encoding="utf-8")
    numbers = list(dict.fromkeys(STUB.findall(module)))  # 5.2 has two stubs
    in_notebook = exercises_in_notebook(nn)
    assert [n for n, _ in in_notebook] == numbers, f"exercises/ch{nn}.ipynb and its module number them differently"
    listed = exercises_in_chapter(chapter.read_text(encoding="utf-8"))
    assert listed == in_notebook, (
        f"{chapter.name}'s exercise section lists {listed}; exercises/ has {in_notebook}. "
        'Write each as "N. **Exercise N.M: title** (...)", with the title of its notebook heading.'
    )


def test_exercise_section_check_catches_an_invented_exercise():
    text = "## Exercises\n\n1. **Exercise 1.1: the bits of a float** (`decode_float`)\n2. Write an fp8 cast.\n"
    assert exercises_in_chapter(text) == [("1.1", "the bits of a float")]
    text += "3. **Exercise 1.9: stochastic rounding** (`sr`)\n\n+++\n\n## References\n"
    assert exercises_in_chapter(text)[-1] == ("1.9", "stochastic rounding")


# Notebook metadata ----------------------------------------------------------------------------------------------

NOTEBOOKS = sorted(p for folder in ("chapters", "solutions", "exercises") for p in (ROOT / folder).glob("*.ipynb"))


def test_every_notebook_folder_is_covered():
    assert len(NOTEBOOKS) == 3 * len(CHAPTERS) >= 24  # each chapter, its solutions and its exercises


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_notebook_stores_the_kernelspec_jupyterlab_expects(path):
    metadata = json.loads(path.read_text(encoding="utf-8"))["metadata"]
    assert metadata.get("kernelspec") == KERNELSPEC, "open it in JupyterLab and it is marked unsaved"
    assert metadata.get("language_info", {}).get("name", "python") == "python"


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_text_carries_the_same_kernelspec(md):
    header = md.read_text(encoding="utf-8").split("\n---\n", 1)[0]
    assert "  display_name: Python 3 (ipykernel)\n" in header + "\n"
