"""`make slides`: a chapter renders as a reveal.js deck that is a lecture, not a scroll of every cell."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "chapters" / "01_number_formats.ipynb"


def slide_type(cell: dict) -> str:
    return cell.get("metadata", {}).get("slideshow", {}).get("slide_type", "-")


def test_chapter_renders_as_a_deck_of_slides(tmp_path):
    pytest.importorskip("nbconvert", reason="slides need jupyter nbconvert (pip install -e '.[course]')")
    done = subprocess.run(
        [sys.executable, "-m", "nbconvert", "--to", "slides", str(CHAPTER), "--output-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    deck = (tmp_path / f"{CHAPTER.stem}.slides.html").read_text(encoding="utf-8")
    cells = json.loads(CHAPTER.read_text(encoding="utf-8"))["cells"]
    shown = [c for c in cells if slide_type(c) != "skip"]
    new_slides = sum(slide_type(c) == "slide" for c in cells)

    assert deck.count("<section") > 1
    assert deck.count("<section") >= new_slides  # every "slide" cell opens a slide of its own
    # The setup and plumbing cells marked "skip" are left out of the deck; every other cell is in it.
    assert len(shown) < len(cells)
    assert deck.count('class="jp-Cell ') == len(shown)
    # A lecture groups cells (fragments, "-" continuations): fewer slides than cells shown.
    assert deck.count("<section") < len(shown)
