"""`make slides`: each chapter a lecture deck that fits 1280x720 and needs no network (the fast checks).

The layout rules (scripts/slide_metadata.py) on tiny notebooks, the chapters' metadata against those rules
(`--check`), and one deck built by scripts/make_slides.py: every script and style sheet it loads is in the
folder. tests/test_slides_browser.py opens every deck in a real browser.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
slide_metadata = pytest.importorskip("slide_metadata", reason="needs jupytext (pip install -e '.[dev]')")
nbformat = pytest.importorskip("nbformat")
VENDORED = ROOT / "vendor" / "slides"


def markdown(text: str) -> dict:
    return nbformat.v4.new_markdown_cell(text)


def code(source: str, printed: str = "", png: tuple[int, int] | None = None) -> dict:
    """A code cell with a printed output and/or a PNG of the given size (only its header: that is what is read)."""
    outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed)] if printed else []
    if png:
        import base64
        import struct

        header = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", *png) + b"\x08\x06\0\0\0"
        data = {"image/png": base64.b64encode(header).decode()}
        outputs.append(nbformat.v4.new_output("display_data", data=data))
    return nbformat.v4.new_code_cell(source, outputs=outputs)


PROSE = "A long paragraph of narrative that a lecturer says aloud rather than shows. " * 4
CHAPTER = [
    markdown("# Chapter 9: Tiny\n\n" + PROSE + "\n\n**What you will learn**\n\n- one\n- two"),
    code("import torch"),  # setup, before the first section
    markdown("## 1. First section\n\n**Question:** what happens?"),
    code("x = 1\nprint(x)", printed="1\n"),
    markdown(PROSE),
    code("\n".join(f"plot_line_{i} = {i}" for i in range(20)), png=(1200, 400)),
    code("plt.show()", png=(1200, 400)),
    markdown("### A subsection\n\nShort line."),
    code("print(table)", printed="row\n" * 60),
    code("\n".join(f"row_{i} = {i}" for i in range(12)), printed="row\n" * 20),
]


def test_the_rules_lay_out_a_tiny_chapter():
    layouts = slide_metadata.plan([nbformat.from_dict(c) for c in CHAPTER])
    kinds = [(layout.slide_type, layout.output_only) for layout in layouts]
    assert kinds[0] == ("slide", False)  # the title
    assert kinds[1] == ("skip", False)  # code before the first section
    assert kinds[2] == ("slide", False)  # a ## section
    assert kinds[3] == ("-", False)  # short code and its output, under the question
    assert kinds[4] == ("notes", False)  # prose only: the speaker notes
    assert kinds[5][1] and kinds[6][1]  # a plot shows its figure, not its code
    assert kinds[6][0] == "subslide"  # one figure per slide
    assert kinds[7] == ("subslide", False)  # a ### heading
    assert kinds[8] == ("subslide", False)  # 60 printed lines, cut to a slide's worth: a slide of their own
    assert kinds[9][1]  # 12 lines of code over 20 printed lines: taller than a slide, so the output alone


def test_prose_goes_to_the_notes_and_long_text_is_cut_to_fit():
    shown, notes = slide_metadata.shown_and_notes(CHAPTER[0].source)
    assert shown.startswith("# Chapter 9") and "- one\n- two" in shown and "narrative" not in shown
    assert notes.strip() == PROSE.strip()
    long_list = "## Many\n\n" + "\n".join(f"- item {i}: " + "words " * 15 for i in range(40))
    chunks = slide_metadata.markdown_chunks(long_list)
    assert len(chunks) > 1 and all(slide_metadata.markdown_height(c) <= slide_metadata.BUDGET_PX for c in chunks)
    assert sum(c.count("- item") for c in chunks) == 40  # cut between items, none lost
    capped = slide_metadata.capped_text("row\n" * 60)
    assert capped.count("\n") == slide_metadata.MAX_OUTPUT_LINES and "more lines in the notebook" in capped


def test_a_manual_cell_keeps_its_own_layout():
    cells = [nbformat.from_dict(c) for c in CHAPTER]
    cells[4].metadata.update({"tags": ["slide-manual"], "slideshow": {"slide_type": "fragment"}})
    changes = slide_metadata.apply_layouts(cells, slide_metadata.plan(cells))
    assert cells[4].metadata["slideshow"]["slide_type"] == "fragment"
    assert cells[5].metadata["tags"] == ["slides-output-only"] and changes


def test_chapters_follow_the_slide_rules():
    # Fails when a chapter was edited or re-executed without the rules applied: the message names the cells.
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "slide_metadata.py"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def test_vendored_assets_are_pinned_small_and_licensed():
    files = [p for p in VENDORED.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 5 * 2**20  # a deck's folder fits anywhere
    for licence in ("reveal.js/LICENSE", "jquery/LICENSE.txt", "katex/LICENSE"):
        assert (VENDORED / licence).exists(), licence
    assert "@license RequireJS" in (VENDORED / "requirejs" / "require.js").read_text()[:300]
    versions = (VENDORED / "README.md").read_text()
    for pinned in ("reveal.js@4.6.1", "requirejs@2.3.7", "jquery@3.7.1", "katex@0.16.22"):
        assert pinned in versions


def test_a_deck_loads_only_files_from_its_folder(tmp_path):
    pytest.importorskip("nbconvert", reason="slides need jupyter nbconvert (pip install -e '.[course]')")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_slides.py"), "01", "--demos", "none", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=1800,  # a guard against hangs only
    )
    assert done.returncode == 0, done.stderr[-3000:]
    deck = next(tmp_path.glob("01_*.slides.html")).read_text(encoding="utf-8")
    loaded = re.findall(r'<(?:script|img|link)[^>]*?(?:src|href)="([^"]+)"', deck)
    loaded += re.findall(r'"(assets/[^"]+\.js)"', deck)  # what require.js loads: reveal.js and its notes plugin
    assert loaded
    for url in loaded:
        assert not re.match(r"^(https?:)?//", url), f"the deck loads {url} from the network"
        assert url.startswith("data:") or (tmp_path / url).is_file(), f"{url} is not in the slides folder"
    assert '<aside class="notes">' in deck  # the narrative went to the speaker notes
    index = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert "01_number_formats.slides.html" in index and "minigpt demo formats" in index
    assert '01_number_formats.slides.html#/1">1. ' in index  # each section links to its first slide


def test_readme_teaching_plan_names_real_sections_and_demos():
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("## Teaching with this course")[1]
    section = section.split("\n## ")[0]
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| (\d\d) \|.*$", section, re.MULTILINE)}
    chapters = {p.name[:2]: p for p in (ROOT / "chapters").glob("[0-9][0-9]_*.md")}
    assert set(rows) == set(chapters)  # one plan per chapter
    for number, row in rows.items():
        headings = set(re.findall(r"^## (\d+)\. ", chapters[number].read_text(encoding="utf-8"), re.MULTILINE))
        for first, last in re.findall(r"§(\d+)(?:-(\d+))?", row):
            for n in range(int(first), int(last or first) + 1):
                assert str(n) in headings, f"README plan for chapter {number} names section {n}, which it lacks"
    from minigpt.demos import DEMOS

    for name in re.findall(r"`minigpt demo (\w+)", section):
        assert name in DEMOS, name
