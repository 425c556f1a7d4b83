"""Build the lecture decks and the instructor page: `make slides` writes a self-contained folder slides/.

Each executed chapter (chapters/NN_name.ipynb) becomes a reveal.js deck, slides/NN_name.slides.html, laid out by
the cells' `slideshow` metadata (set from rules by scripts/slide_metadata.py): 1280x720 slides, the prose in
speaker notes (press S), cells tagged `slides-output-only` shown by their output alone. Every script, style sheet
and font a deck loads is copied from vendor/slides/ into slides/assets/ and linked by a relative URL, so the
folder presents from a USB stick with no network. slides/index.html lists each deck with its chapter, its lecture
demo (`minigpt demo NAME`) and that demo's runtime, measured here by running it.

    python scripts/make_slides.py                       every chapter, each demo timed at its lecture size
    python scripts/make_slides.py --demos quick         demos timed at their tiny test sizes (seconds)
    python scripts/make_slides.py --demos none 01 03    chapters 01 and 03 only, no demo timing
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
from nbconvert import SlidesExporter
from slide_metadata import (
    MIN_PRINTED_FONT_SCALE,
    OUTPUT_ONLY_TAG,
    PRINTED_CHARS_PER_LINE,
    capped_text,
    markdown_chunks,
    shown_and_notes,
)
from traitlets.config import Config

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ROOT / "chapters"
VENDORED = ROOT / "vendor" / "slides"  # reveal.js, require.js, jQuery, KaTeX: pinned versions in its README
TEMPLATES = Path(__file__).resolve().parent / "slides_template"
COLAB_BADGE = re.compile(r"^\[!\[Open In Colab\]\(https://[^)]*\)\]\(https://[^)]*\)\s*$", re.MULTILINE)
WIDGET = "application/vnd.jupyter.widget-view+json"
WIDGET_NOTE = "*An interactive widget: run this cell of the notebook in JupyterLab to use it.*"
SLIDE_WIDTH, SLIDE_HEIGHT = 1280, 720  # one 720p projector screen; reveal.js scales the slide to the window
# The lecture demo of each chapter (minigpt/demos/__init__.py lists them); `train` opens the course.
DEMO_OF_CHAPTER = {
    "01": ["train", "formats"],
    "02": ["memory"],
    "03": ["autocast"],
    "04": ["scaler"],
    "05": ["accumulation"],
    "06": ["checkpointing"],
    "07": ["plan"],
    "08": ["sharding"],
    "10": ["lora"],
    "09": ["toolbox", "largest"],
}


def exporter() -> SlidesExporter:
    """nbconvert's slides exporter on the course template, every URL pointing into assets/, prompts left out."""
    c = Config()
    c.SlidesExporter.extra_template_basedirs = [str(TEMPLATES)]
    c.SlidesExporter.template_name = "minigpt_reveal"
    c.SlidesExporter.reveal_url_prefix = "assets/reveal.js"
    c.SlidesExporter.require_js_url = "assets/requirejs/require.js"
    c.SlidesExporter.jquery_url = "assets/jquery/jquery.min.js"
    c.SlidesExporter.mathjax_url = ""  # the template typesets with KaTeX from assets/katex/
    c.SlidesExporter.reveal_width = str(SLIDE_WIDTH)
    c.SlidesExporter.reveal_height = str(SLIDE_HEIGHT)
    c.SlidesExporter.reveal_number = "c/t"
    c.SlidesExporter.reveal_theme = "white"  # the only theme vendored ("simple", the default, loads web fonts)
    c.SlidesExporter.exclude_input_prompt = True  # "In [3]:" costs 110 px of every code line
    c.SlidesExporter.exclude_output_prompt = True
    c.TagRemovePreprocessor.enabled = True
    c.TagRemovePreprocessor.remove_input_tags = {OUTPUT_ONLY_TAG}
    return SlidesExporter(config=c)


def capped_output(output: dict) -> dict:
    """An output as its slide shows it: printed text cut to what fits (slide_metadata.capped_text), and a widget
    (sliders need a live kernel) replaced by a line saying where it runs."""
    if WIDGET in output.get("data", {}):
        return nbformat.v4.new_output("display_data", data={"text/markdown": WIDGET_NOTE})
    if output.get("output_type") == "stream":
        output["text"] = capped_text(output["text"])
    elif "text/plain" in output.get("data", {}) and len(output["data"]) == 1:
        output["data"]["text/plain"] = capped_text(output["data"]["text/plain"])
    return output


def lecture_cells(cells: list) -> list:
    """The cells as the deck shows them: long paragraphs moved to the speaker notes, warnings left out.

    A markdown cell keeps on its slide what slide_metadata.shown_and_notes shows (headings, lists, tables, code,
    formulas, short labelled lines) and the rest follows it as a `notes` cell; shown text too long for one slide
    continues on slides below, and long printed output is cut (slide_metadata.markdown_chunks, capped_text).
    The "Open in Colab" badge (an image on the web) and stderr output (warnings) are for the notebook.
    """
    shown_cells = []
    for cell in cells:
        slide_type = cell.metadata.get("slideshow", {}).get("slide_type", "-")
        if cell.cell_type == "code":
            cell.outputs = [capped_output(o) for o in cell.get("outputs", []) if o.get("name") != "stderr"]
        if cell.cell_type != "markdown" or slide_type in ("skip", "notes"):
            shown_cells.append(cell)
            continue
        shown, notes = shown_and_notes(COLAB_BADGE.sub("", cell.source))
        chunks = markdown_chunks(shown) or [""]
        cell.source = chunks[0]
        shown_cells.append(cell)
        if notes:
            shown_cells.append(nbformat.v4.new_markdown_cell(notes, metadata={"slideshow": {"slide_type": "notes"}}))
        for chunk in chunks[1:]:  # too long for one slide: the rest continues on slides below
            shown_cells.append(nbformat.v4.new_markdown_cell(chunk, metadata={"slideshow": {"slide_type": "subslide"}}))
    return shown_cells


def deck_sections(cells: list) -> list[dict]:
    """Each `##` section of a deck: its title, its first slide's number (deck.html#/N) and how many slides it has."""
    sections, horizontal = [], -1
    for cell in cells:
        slide_type = cell.metadata.get("slideshow", {}).get("slide_type", "-")
        horizontal += slide_type == "slide"
        first_line = cell.source.strip().split("\n", 1)[0]
        heading = re.match(r"##\s+(.+)", first_line) if cell.cell_type == "markdown" else None
        if heading and slide_type == "slide":
            sections.append({"title": heading.group(1).strip(), "slide": horizontal, "slides": 0})
        if sections and slide_type in ("slide", "subslide"):
            sections[-1]["slides"] += 1
    return sections


def build_deck(notebook: Path, out: Path, slides_exporter: SlidesExporter) -> tuple[Path, list[dict]]:
    """Render one executed chapter as out/NN_name.slides.html; return its path and its sections."""
    nb = nbformat.read(notebook, as_version=4)
    nb.metadata.pop("widgets", None)  # widget state would load a widget manager from the network
    nb.cells = lecture_cells(nb.cells)
    rules = {"printed_chars_per_line": PRINTED_CHARS_PER_LINE, "min_font_scale": MIN_PRINTED_FONT_SCALE}
    resources = {"metadata": {"name": notebook.stem}, "slide_rules": rules}  # the template sizes printed text
    body, _ = slides_exporter.from_notebook_node(nb, resources=resources)
    deck = out / f"{notebook.stem}.slides.html"
    deck.write_text(body, encoding="utf-8")
    return deck, deck_sections(nb.cells)


def chapter_title(notebook: Path) -> str:
    """The chapter's first heading, e.g. 'Chapter 1: Number Formats'."""
    for cell in nbformat.read(notebook, as_version=4).cells:
        heading = re.search(r"^#\s+(.+)$", cell.source, re.MULTILINE) if cell.cell_type == "markdown" else None
        if heading:
            return heading.group(1).strip()
    return notebook.stem


def time_demo(name: str, quick: bool, scratch: Path) -> float:
    """Seconds `minigpt demo NAME` takes from start to exit, run here in a fresh process (its figures go to scratch)."""
    command = [sys.executable, "-m", "minigpt.cli", "demo", name, "--out", str(scratch)] + (
        ["--quick"] if quick else []
    )
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"`minigpt demo {name}` failed:\n{done.stderr[-2000:]}")
    return seconds


def machine_line() -> str:
    """The machine the demo times were measured on, as each chapter names its own (minigpt.device.executed_on)."""
    from minigpt.device import executed_on

    return executed_on().removeprefix("Executed on ")


def index_page(rows: list[dict], demo_mode: str, machine: str) -> str:
    """slides/index.html: each deck, its chapter, its demo commands and their measured runtimes."""
    lines = []
    for row in rows:
        demos = "<br>".join(
            f"<code>minigpt demo {d}</code>" + (f" ({row['times'][d]:.0f} s)" if d in row["times"] else "")
            for d in row["demos"]
        )
        sections = " &middot; ".join(
            f'<a href="{html.escape(row["deck"])}#/{section["slide"]}">{html.escape(section["title"])}</a> '
            f"({section['slides']})"
            for section in row["sections"]
        )
        lines.append(
            f'<tr><td><a href="{html.escape(row["deck"])}"><b>{html.escape(row["title"])}</b></a>'
            f"<br><small>{sections}</small></td><td>{row['slides']}</td><td>{demos or '-'}</td></tr>"
        )
    timing = (
        f"Demo runtimes measured by <code>scripts/make_slides.py</code> when it built this folder "
        f"({'lecture sizes' if demo_mode == 'full' else 'the tiny --quick sizes'}), on {html.escape(machine)}."
        if demo_mode != "none"
        else "Demo runtimes were not measured for this build (<code>--demos none</code>)."
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>minigpt-course: lecture slides</title>
<style>body {{ font-family: sans-serif; max-width: 60em; margin: 2em auto; }}
td, th {{ padding: 0.4em 1em; text-align: left; vertical-align: top; border-bottom: 1px solid #ccc; }}</style>
</head><body>
<h1>minigpt-course: lecture slides</h1>
<p>Open a deck and present it: arrow keys move (down for a slide's continuation), <b>S</b> opens the speaker
view with the notes, <b>F</b> goes full screen, <b>Esc</b> shows every slide. Everything it needs is in this
folder: no network.</p>
<p>Run each demo live from a terminal in the course folder (<code>make demo</code> sets it up).</p>
<table><tr><th>deck, and its sections (slides in each)</th><th>slides</th><th>lecture demo (measured runtime)</th></tr>
{chr(10).join(lines)}
</table>
<p>{timing}</p>
</body></html>
"""


def count_slides(deck: Path) -> int:
    """Slides in a rendered deck: its innermost <section> elements."""
    text = deck.read_text(encoding="utf-8")
    return len(re.findall(r"<section(?![^>]*>\s*<section)", text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*", help="chapter number prefixes (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "slides", help="the folder to write (default: slides/)")
    parser.add_argument(
        "--demos", choices=["full", "quick", "none"], default="full", help="how to time the demos (default: full)"
    )
    parser.add_argument(
        "--chapters-dir", type=Path, default=CHAPTERS, help="where the notebooks are (default: chapters/)"
    )
    args = parser.parse_args(argv)
    notebooks = sorted(args.chapters_dir.glob("[0-9][0-9]_*.ipynb"))
    notebooks = [nb for nb in notebooks if not args.chapters or nb.name.startswith(tuple(args.chapters))]
    if not notebooks:
        raise SystemExit(f"make_slides: no chapter notebook matches {args.chapters} in {CHAPTERS}")
    args.out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(args.out / "assets", ignore_errors=True)
    shutil.copytree(VENDORED, args.out / "assets", ignore=shutil.ignore_patterns("README.md"))
    slides_exporter = exporter()
    rows = []
    scratch = args.out / ".demo_out"
    for notebook in notebooks:
        deck, sections = build_deck(notebook, args.out, slides_exporter)
        demos = DEMO_OF_CHAPTER.get(notebook.name[:2], [])
        if args.demos != "none":
            from minigpt.demos import DEMOS  # only to time them: a deck builds without importing torch

            demos = [d for d in demos if d in DEMOS]
        times = {} if args.demos == "none" else {d: time_demo(d, args.demos == "quick", scratch) for d in demos}
        rows.append(
            {"deck": deck.name, "title": chapter_title(notebook), "slides": count_slides(deck), "demos": demos}
            | {"times": times, "sections": sections}
        )
        print(f"{deck.relative_to(args.out.parent)}: {rows[-1]['slides']} slides; demos {times or demos}", flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    machine = machine_line() if args.demos != "none" else ""
    (args.out / "index.html").write_text(index_page(rows, args.demos, machine), encoding="utf-8")
    (args.out / "demo_times.json").write_text(json.dumps({"mode": args.demos, "machine": machine, "decks": rows}))
    print(f"{args.out}/index.html: {len(rows)} decks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
