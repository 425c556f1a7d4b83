"""Lay out each chapter as lecture slides from rules: every cell's `slideshow` metadata, in the .md and the .ipynb.

A chapter is written as a notebook; a lecture wants 1280x720 slides that each show one idea. Rather than set
500 cells by hand (and redo it whenever the text changes), this script derives the layout from the content:

- the chapter title and every `##` section open a new slide; a `###` heading opens a vertical (sub)slide;
- prose goes into the speaker notes: a markdown cell of prose only becomes a `notes` cell, and
  scripts/make_slides.py moves the long paragraphs of the other cells into the notes when it builds the deck
  (headings, lists, tables, formulas, code blocks, short lines and **Question:** lines stay shown); shown
  text too long for one slide continues on the slide below;
- code before the first `##` section (imports, setup) is skipped, and so is a long cell that prints nothing;
- a long cell whose output is the point (a plot, a table) is tagged `slides-output-only`: the slide shows the
  output, the code stays in the notebook; a plot cell always shows its output alone;
- one figure per slide, and a cell that would push the slide past 720 px (its height estimated from the
  text, the code lines, the printed lines and the PNG sizes) starts a continuation slide below; a cell too
  tall for a slide with its code shows its output only, and printed output longer than a slide is cut there.

A cell tagged `slide-manual` keeps the slide type and tags its author wrote. `make chapters` runs this script
after executing the chapters, so re-executed chapters keep their layout (after `scripts/make_chapters.py NN`,
run it yourself); tests/test_slides.py runs `--check`.

    python scripts/slide_metadata.py                  apply the rules to every chapter (.ipynb and .md)
    python scripts/slide_metadata.py --check          fail, naming the cells, where a chapter's metadata differs
    python scripts/slide_metadata.py --chapters-dir /tmp/copy 03      chapter 03 of a copy of chapters/
"""

from __future__ import annotations

import argparse
import base64
import math
import re
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

import jupytext
import nbformat

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ROOT / "chapters"
TEXT_FORMAT = "md:myst"
MANUAL_TAG = "slide-manual"  # an author's override: this cell's slide type and tags are left as written
OUTPUT_ONLY_TAG = "slides-output-only"  # scripts/make_slides.py removes this cell's input from the deck
ROLE_TAGS = ("setup", "parameters")  # the Colab install cell and the SCALE cell: never lecture material

# Heights in the deck's CSS pixels (scripts/slides_template: 20 px text, 16 px code, a 1280x720 slide), measured
# on the rendered decks by tests/test_slides_browser.py and rounded up so an estimate errs towards a new slide.
SLIDE_HEIGHT_PX = 720
BUDGET_PX = 680  # what a slide may hold by the estimate: the rest is the estimate's margin of error
TEXT_LINE_PX, TEXT_CHARS_PER_LINE = 33, 100
CODE_LINE_PX, CODE_CHARS_PER_LINE = 22, 118  # code cells: a 120-character line (ruff's limit) nearly fits
PRINTED_CHARS_PER_LINE = 112  # printed output sits indented: 1121 px of 16 px monospace, less a margin
HEADING_PX = {1: 100, 2: 80, 3: 66, 4: 56}
CELL_GAP_PX = 14  # padding between two cells
OUTPUT_AREA_PX = 24  # an output area's own padding
IMAGE_WIDTH_PX, IMAGE_MAX_HEIGHT_PX = 1200, 540  # the template caps an image's height (max-height: 540px)
SHORT_PROSE_CHARS = 160  # a paragraph up to this long stays on the slide; longer ones are narrative (notes)
SIGNPOST_CHARS = 320  # ... and up to this long when it opens with a bold label (**Question:** ...)
SHOWN_CODE_LINES = 12  # a cell longer than this shows its output only (or nothing, if it prints nothing)
MIN_PRINTED_FONT_SCALE = 0.6  # the smallest font the deck gives a wide printed table (16 px -> 9.6 px)
MAX_OUTPUT_LINES = 26  # printed lines a slide shows under its heading; the notebook keeps the rest
SHOWN_PLOT_CODE_LINES = 0  # a plot's code is never on its slide: the figure is what the lecture shows

FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+\S")


def markdown_blocks(source: str) -> list[str]:
    """The cell's blocks: paragraphs, lists, tables, headings, and fenced code or $$ math kept whole."""
    blocks, current, fenced = [], [], None
    for line in source.splitlines():
        if fenced:
            current.append(line)
            if line.strip().startswith(fenced):
                fenced = None
            continue
        stripped = line.strip()
        if FENCE.match(stripped) or (stripped.startswith("$$") and stripped.count("$$") == 1):
            fenced = "$$" if stripped.startswith("$$") else stripped[:3]
            current.append(line)
        elif not stripped:
            if current:
                blocks.append("\n".join(current))
            current = []
        elif HEADING.match(stripped):
            if current:
                blocks.append("\n".join(current))
            blocks.append(line)
            current = []
        else:
            current.append(line)
    if current:
        blocks.append("\n".join(current))
    return blocks


def block_kind(block: str) -> str:
    """heading, code, math, table, list, image, html or prose: what a block of markdown is."""
    first = block.lstrip().splitlines()[0] if block.strip() else ""
    if HEADING.match(first):
        return "heading"
    if FENCE.match(first):
        return "code"
    if first.startswith("$$"):
        return "math"
    if first.startswith("|"):
        return "table"
    if re.match(r"^([-*+]|\d+[.)])\s", first):
        return "list"
    if first.startswith("![") or first.startswith("<img"):
        return "image"
    if first.startswith("<"):
        return "html"
    return "prose"


def is_narrative(block: str) -> bool:
    """A paragraph the lecturer says rather than shows: prose longer than a short labelled line."""
    if block_kind(block) != "prose":
        return False
    length = len(" ".join(block.split()))
    if block.startswith("**"):  # a signpost that opens with its label, e.g. **Question:** or **What you will learn**
        return length > SIGNPOST_CHARS
    return length > SHORT_PROSE_CHARS


def is_label(block: str) -> bool:
    """A block that only names what follows it, e.g. **Prerequisites** or a line ending in a colon."""
    line = " ".join(block.split())
    return block_kind(block) == "prose" and (bool(re.fullmatch(r"\*\*[^*]+\*\*:?", line)) or line.endswith(":"))


def shown_and_notes(source: str) -> tuple[str, str]:
    """A markdown cell split into what its slide shows and what goes into the speaker notes.

    Narrative paragraphs go to the notes, and so does a label whose paragraph went there (**Prerequisites**).
    """
    blocks = markdown_blocks(source)
    to_notes = [is_narrative(b) for b in blocks]
    for i in range(len(blocks) - 2, -1, -1):
        to_notes[i] = to_notes[i] or (is_label(blocks[i]) and to_notes[i + 1])
    shown = [b for b, noted in zip(blocks, to_notes) if not noted]
    notes = [b for b, noted in zip(blocks, to_notes) if noted]
    return "\n\n".join(shown), "\n\n".join(notes)


def markdown_chunks(shown: str) -> list[str]:
    """The shown markdown cut into pieces that each fit a slide: between blocks, or between a list's items.

    A label stays with what it names: a piece that would end a slide with **What you will learn** starts the next.
    """
    pieces: list[tuple[str, bool]] = []  # (text, is a list item)
    for block in markdown_blocks(shown):
        if block_kind(block) == "list":
            items = re.split(r"\n(?=(?:[-*+]|\d+[.)])\s)", block)
            pieces += [(item, True) for item in items]
        else:
            pieces.append((block, False))
    slides: list[list[tuple[str, bool]]] = [[]]
    height = 0
    for piece in pieces:
        piece_height = markdown_height(piece[0])
        if slides[-1] and height + piece_height > BUDGET_PX:
            carried = [slides[-1].pop()] if len(slides[-1]) > 1 and is_label(slides[-1][-1][0]) else []
            slides.append(carried)
            height = sum(markdown_height(text) for text, _ in carried)
        slides[-1].append(piece)
        height += piece_height
    return [join_pieces(slide) for slide in slides if slide]


def join_pieces(pieces: list[tuple[str, bool]]) -> str:
    """Markdown blocks back into one text: a list's items one per line, other blocks a blank line apart."""
    text = ""
    for i, (piece, is_item) in enumerate(pieces):
        joiner = "\n" if is_item and i and pieces[i - 1][1] else "\n\n"
        text = f"{text}{joiner}{piece}" if text else piece
    return text


def wrapped_lines(text: str, chars_per_line: int) -> int:
    """Lines `text` takes when each line wraps at `chars_per_line` characters."""
    return sum(max(1, math.ceil(len(line) / chars_per_line)) for line in text.splitlines() or [""])


def markdown_height(shown: str) -> int:
    """Estimated height in px of the shown part of a markdown cell."""
    height = 0
    for block in markdown_blocks(shown):
        kind = block_kind(block)
        if kind == "heading":
            height += HEADING_PX.get(len(block.lstrip()) - len(block.lstrip().lstrip("#")), 56)
        elif kind in ("code", "math"):
            lines = block.strip().splitlines()
            height += CODE_LINE_PX * max(1, len(lines) - 2) + 30 if kind == "code" else 70
        elif kind == "table":
            height += 36 * len([line for line in block.splitlines() if not re.match(r"^\|[-:| ]+\|$", line)]) + 10
        elif kind == "image":
            height += IMAGE_MAX_HEIGHT_PX
        else:
            height += TEXT_LINE_PX * wrapped_lines(block, TEXT_CHARS_PER_LINE) + 16
    return height


def png_size(encoded: str) -> tuple[int, int]:
    """(width, height) of a base64 PNG, read from its header."""
    header = base64.b64decode(encoded[:64])
    return struct.unpack(">II", header[16:24])


def capped_text(text: str) -> str:
    """Printed text as its slide shows it: what fits MAX_OUTPUT_LINES lines, then a line saying what was cut."""
    lines = text.rstrip("\n").splitlines()
    scale = printed_font_scale(text)  # a smaller font fits more lines, and more characters in each
    chars_per_line, max_lines = int(PRINTED_CHARS_PER_LINE / scale), int(MAX_OUTPUT_LINES / scale)
    if wrapped_lines("\n".join(lines), chars_per_line) <= max_lines:
        return text
    kept, used = [], 0
    for line in lines:
        used += max(1, math.ceil(len(line) / chars_per_line))
        if used > max_lines - 1:
            break
        kept.append(line)
    return "\n".join(kept) + f"\n... ({len(lines) - len(kept)} more lines in the notebook)\n"


def printed_font_scale(text: str) -> float:
    """The font scale the deck gives printed text (the template's script): smaller when rows are too wide."""
    widest = max((len(line) for line in text.splitlines()), default=0)
    return max(MIN_PRINTED_FONT_SCALE, PRINTED_CHARS_PER_LINE / widest) if widest > PRINTED_CHARS_PER_LINE else 1.0


def printed_height(text: str) -> int:
    """Estimated height in px of printed text: its lines, wrapped, at the font scale the deck gives them."""
    text = capped_text(text).rstrip("\n")
    scale = printed_font_scale(text)
    return math.ceil(CODE_LINE_PX * scale * wrapped_lines(text, int(PRINTED_CHARS_PER_LINE / scale))) + OUTPUT_AREA_PX


def output_height(output: dict) -> int:
    """Estimated height in px of one output of a code cell."""
    data = output.get("data", {})
    if output.get("output_type") == "stream":
        if output.get("name") == "stderr":
            return 0  # warnings: scripts/make_slides.py leaves stderr out of the deck
        return printed_height(output.get("text", ""))
    if "application/vnd.jupyter.widget-view+json" in data:
        return TEXT_LINE_PX + OUTPUT_AREA_PX  # the deck shows one line in its place (scripts/make_slides.py)
    if "image/png" in data:
        width, height = png_size(data["image/png"])
        shown = height * min(1.0, IMAGE_WIDTH_PX / width)
        return int(min(shown, IMAGE_MAX_HEIGHT_PX)) + 2 * OUTPUT_AREA_PX
    if "text/html" in data:
        html = data["text/html"]
        rows = html.count("<tr")
        return (36 * rows if rows else TEXT_LINE_PX * max(1, html.count("<br") + html.count("<p"))) + OUTPUT_AREA_PX
    if "text/markdown" in data:
        return markdown_height(data["text/markdown"]) + OUTPUT_AREA_PX
    if "text/plain" in data:
        return printed_height(data["text/plain"])
    return 0


def has_plot(cell: dict) -> bool:
    return any("image/png" in o.get("data", {}) for o in cell.get("outputs", []))


def code_lines(cell: dict) -> int:
    return len(cell.source.strip().splitlines())


@dataclass
class Layout:
    """What the rules chose for one cell: its slide type and whether its slide shows only its output."""

    slide_type: str
    output_only: bool = False


def code_layout(cell: dict, before_first_section: bool) -> tuple[Layout, int]:
    """A code cell's layout ignoring its neighbours, and the height in px it would take on a slide."""
    tags = cell.metadata.get("tags", [])
    outputs = [o for o in cell.get("outputs", []) if output_height(o)]
    if before_first_section or any(tag in ROLE_TAGS for tag in tags) or not cell.source.strip():
        return Layout("skip"), 0
    limit = SHOWN_PLOT_CODE_LINES if has_plot(cell) else SHOWN_CODE_LINES
    output_only = code_lines(cell) > limit
    if output_only and not outputs:
        return Layout("skip"), 0  # a long definition that prints nothing: the notebook has it
    printed = sum(output_height(o) for o in outputs) + CELL_GAP_PX
    code = CODE_LINE_PX * wrapped_lines(cell.source, CODE_CHARS_PER_LINE) + 30
    if not output_only and outputs and code + printed > BUDGET_PX:
        output_only = True  # code and output together overflow a slide: the output is what the lecture shows
    return Layout("-", output_only), printed + (0 if output_only else code)


def plan(cells: list[dict]) -> list[Layout]:
    """Every cell's layout, in order: the rules of this module's docstring."""
    layouts: list[Layout] = []
    used, plots_on_slide, seen_section = SLIDE_HEIGHT_PX, 0, False  # "used" starts full: the first cell opens
    for index, cell in enumerate(cells):
        if cell.cell_type == "markdown":
            shown, _ = shown_and_notes(cell.source)
            first = markdown_blocks(cell.source)[0] if cell.source.strip() else ""
            level = len(first) - len(first.lstrip("#")) if block_kind(first) == "heading" else 0
            seen_section = seen_section or level == 2
            chunks = markdown_chunks(shown) if shown.strip() else []
            height = markdown_height(chunks[-1]) + CELL_GAP_PX if chunks else 0  # the slide its last piece is on
            if len(chunks) > 1:
                height = BUDGET_PX  # cut over several slides: the next cell starts a new one
            if index == 0 or level in (1, 2):
                layout = Layout("slide")
            elif level >= 3:
                layout = Layout("subslide")
            elif not shown.strip():
                layout = Layout("notes")
            else:
                fits = len(chunks) == 1 and used + height <= BUDGET_PX
                layout = Layout("fragment" if fits else "subslide")
            if layout.slide_type in ("slide", "subslide"):
                used, plots_on_slide = 0, 0
            used += height
        elif cell.cell_type == "code":
            layout, height = code_layout(cell, before_first_section=not seen_section)
            if layout.slide_type != "skip":
                new_plot = has_plot(cell)
                if used + height > BUDGET_PX or (new_plot and plots_on_slide):
                    layout.slide_type = "subslide"
                    used, plots_on_slide = 0, 0
                used += height
                plots_on_slide += new_plot
        else:
            layout = Layout("skip")
        layouts.append(layout)
    return layouts


def apply_layouts(cells: list[dict], layouts: list[Layout]) -> list[str]:
    """Write the layouts into the cells' metadata (a `slide-manual` cell keeps its own); return what changed."""
    changes = []
    for index, (cell, layout) in enumerate(zip(cells, layouts)):
        tags = list(cell.metadata.get("tags", []))
        if MANUAL_TAG in tags:
            continue
        before = (cell.metadata.get("slideshow", {}).get("slide_type"), OUTPUT_ONLY_TAG in tags)
        if before == (layout.slide_type, layout.output_only):
            continue
        cell.metadata["slideshow"] = {**cell.metadata.get("slideshow", {}), "slide_type": layout.slide_type}
        tags = [t for t in tags if t != OUTPUT_ONLY_TAG] + ([OUTPUT_ONLY_TAG] if layout.output_only else [])
        if tags:
            cell.metadata["tags"] = tags
        else:
            cell.metadata.pop("tags", None)
        for key in sorted(cell.metadata):  # keys in the order the .ipynb stores them, so .md and .ipynb agree
            cell.metadata[key] = cell.metadata.pop(key)
        first_line = cell.source.strip().splitlines()[0][:50] if cell.source.strip() else ""
        changes.append(f"cell {index} ({first_line!r}): {before} -> {(layout.slide_type, layout.output_only)}")
    return changes


def update_pair(source: Path, notebook: Path, check: bool = False) -> list[str]:
    """Apply the rules to a chapter's executed notebook and its MyST text; return what changed (or would)."""
    if not notebook.exists():
        raise ValueError(f"{notebook.name} is missing: run `make chapters` to execute {source.name} first")
    nb = nbformat.read(notebook, as_version=4)
    text = jupytext.read(source, fmt=TEXT_FORMAT)
    if [c.source for c in nb.cells] != [c.source for c in text.cells]:
        raise ValueError(
            f"{notebook.name} and {source.name} hold different cells: run `make chapters` "
            f"(or `jupytext --to ipynb --update chapters/{source.name}`) first, then this script"
        )
    layouts = plan(nb.cells)  # from the notebook: its outputs (plots, printed lines) decide the heights
    changes = apply_layouts(nb.cells, layouts)
    text_changes = apply_layouts(text.cells, layouts)
    if not check:
        if changes:
            nbformat.write(nb, notebook)
        if text_changes:
            jupytext.write(text, source, fmt=TEXT_FORMAT)
    return [f"{notebook.name} {c}" for c in changes] + [f"{source.name} {c}" for c in text_changes]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*", help="chapter number prefixes (default: all)")
    parser.add_argument("--check", action="store_true", help="change nothing; fail where the metadata differs")
    parser.add_argument("--chapters-dir", type=Path, default=CHAPTERS, help="default: chapters/")
    args = parser.parse_args(argv)
    sources = sorted(args.chapters_dir.glob("[0-9][0-9]_*.md"))
    sources = [s for s in sources if not args.chapters or s.name.startswith(tuple(args.chapters))]
    changes, problems = [], []
    for source in sources:
        try:
            changes += update_pair(source, source.with_suffix(".ipynb"), check=args.check)
        except ValueError as error:
            problems.append(str(error))
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    if args.check and changes:
        print(
            "\n".join(changes[:40]) + f"\n{len(changes)} cells differ from the slide rules: "
            "run `python scripts/slide_metadata.py` (or tag a cell slide-manual to keep its own)"
        )
        return 1
    print("\n".join(changes) if changes else "", end="\n" if changes else "")
    print(f"{len(sources)} chapters: slide metadata {'checked' if args.check else 'set'} ({len(changes)} changes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
