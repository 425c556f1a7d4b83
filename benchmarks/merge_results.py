"""Keep the sections of an earlier RESULTS.md that a `run_all --only ... --merge` run did not measure again.

A full `make bench` takes well over an hour on 2 cores. After a change that touches a few benchmarks, `--merge`
re-runs only those and keeps every other section as it was, word for word, with its targets; the header then
says which sections come from the earlier run and when that run was made, so no number loses its date.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from minigpt.results import measured_when

SECTION_START = re.compile(r"^## (?!Targets:)(.+)$", re.MULTILINE)
NUMBER = re.compile(r"^(\d+)([a-z]?)\.")


@dataclass
class KeptSection:
    """An earlier run's section: its markdown, as written then, and its rows of the targets table."""

    title: str
    markdown: str
    target_rows: list[list[str]]  # benchmark, target, measured, result
    measured: str  # when and where: the earlier run's date and device (or its own earlier source's)


def order_key(title: str) -> tuple[int, str]:
    """'9b. 8-bit AdamW' -> (9, 'b'): sections sort by their number; an unnumbered one goes last."""
    match = NUMBER.match(title)
    return (int(match.group(1)), match.group(2)) if match else (10**6, title)


def _cells(line: str) -> list[str]:
    """The cells of one markdown table row, with the escaped pipes (\\|) inside cells restored."""
    parts = re.split(r"(?<!\\)\|", line.strip())[1:-1]
    return [p.strip().replace("\\|", "|") for p in parts]


def section_number(title: str) -> str:
    """'9b. 8-bit AdamW' -> '9b' (the title itself when it has no number)."""
    match = NUMBER.match(title)
    return match.group(1) + match.group(2) if match else title


def earlier_sections(text: str) -> list[KeptSection]:
    """Every benchmark section of an earlier RESULTS.md, with its rows of the targets table and its date."""
    rows: dict[str, list[list[str]]] = {}
    targets = re.search(r"^## Targets:.*?\n\n(.*?)(?=\n\n|\Z)", text, re.MULTILINE | re.DOTALL)
    for line in targets.group(1).splitlines()[2:] if targets else []:  # past the header and |---| lines
        cells = _cells(line)
        if len(cells) == 4:
            rows.setdefault(cells[0], []).append(cells)
    starts = list(SECTION_START.finditer(text))
    sections = []
    for k, start in enumerate(starts):
        end = starts[k + 1].start() if k + 1 < len(starts) else len(text)
        title = start.group(1).strip()
        # a section that file had itself kept from a still earlier run keeps that run's date
        measured = measured_when(text, section_number(title))
        sections.append(KeptSection(title, text[start.start() : end].strip(), rows.get(title, []), measured))
    return sections


def kept_sections(text: str, measured_titles: set[str]) -> list[KeptSection]:
    """The earlier sections that this run did not measure again."""
    return [s for s in earlier_sections(text) if s.title not in measured_titles]
