"""benchmarks/RESULTS.md as the chapters quote it: one section, and when and where it was measured.

`run_all --merge` re-measures some sections and keeps the others from an earlier run; the header's
"sections kept from an earlier run" row gives each kept section its own date, so a quote carries that one.
"""

from __future__ import annotations

import re
from pathlib import Path

RESULTS_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "RESULTS.md"  # in a clone; not pip-installed
CUDA_RESULTS_PATH = RESULTS_PATH.parent / "cuda" / "RESULTS.md"  # the sections run with --device cuda
KEPT_ROW = "sections kept from an earlier run"


def header_value(text: str, what: str) -> str | None:
    """A value of RESULTS.md's header table (`| date | 2026-11-24 12:06 UTC |`), or None."""
    match = re.search(rf"^\| {re.escape(what)} +\|(.*)\|\s*$", text, re.MULTILINE)
    return match.group(1).strip() if match else None


def measured_when(text: str, number: str) -> str:
    """When and where section `number` ("12", "9b") was measured: a kept section's own date, else the run's."""
    for group in (header_value(text, KEPT_ROW) or "").split("; "):
        numbers, _, when = group.partition(": measured ")
        if number in [n.strip() for n in numbers.split(",")]:
            return when.strip()
    return " on ".join(v for v in (header_value(text, "date"), header_value(text, "device")) if v)


def results_section(title_word: str, path: Path = RESULTS_PATH) -> tuple[str, str] | None:
    """(when and where it was measured, its text) of the first numbered section whose title holds `title_word`.

    None when there is no RESULTS.md (a pip install has none) or no such section in it yet.
    """
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    pattern = rf"^## (\d+[a-z]?)\. [^\n]*{re.escape(title_word)}[^\n]*\n.*?(?=^## |\Z)"
    section = re.search(pattern, text, re.MULTILINE | re.DOTALL)
    return (measured_when(text, section.group(1)), section.group(0)) if section else None
