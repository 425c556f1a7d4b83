"""Restamp the "Open in Colab" badges and Colab setup cells of every notebook with the course's repo slug.

The slug lives in one place, pyproject.toml [tool.minigpt-course] repo. `make badges REPO=owner/name`
writes the new slug there and restamps chapters/, exercises/ and solutions/ notebooks.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIRS = ("chapters", "exercises", "solutions")
SLUG = r"[A-Za-z0-9_.\-]+/[A-Za-z0-9_.\-]+"
PATTERNS = [  # (regex, replacement with {slug})
    (re.compile(rf"colab\.research\.google\.com/github/{SLUG}/"), "colab.research.google.com/github/{slug}/"),
    (re.compile(rf"git\+https://github\.com/{SLUG}"), "git+https://github.com/{slug}"),
]


def current_slug() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["minigpt-course"]["repo"]


def set_slug(slug: str) -> None:
    path = ROOT / "pyproject.toml"
    text = re.sub(r'(\[tool\.minigpt-course\][^\[]*?repo = ")[^"]*(")', rf"\g<1>{slug}\g<2>", path.read_text())
    path.write_text(text)


def notebooks() -> list[Path]:
    return sorted(p for d in NOTEBOOK_DIRS for p in (ROOT / d).glob("*.ipynb"))


def stamp(text: str, slug: str) -> str:
    for pattern, replacement in PATTERNS:
        text = pattern.sub(replacement.format(slug=slug), text)
    return text


def restamp(slug: str) -> list[Path]:
    """Rewrite every notebook's badge and setup-cell URLs to `slug`; return the files that changed."""
    changed = []
    for path in notebooks():
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            src = cell["source"]  # a list of lines in files nbformat wrote; URLs never span lines
            cell["source"] = [stamp(line, slug) for line in src] if isinstance(src, list) else stamp(src, slug)
        new = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
        if new != path.read_text():
            path.write_text(new)
            changed.append(path)
    return changed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repo", help="owner/name on GitHub (default: the slug in pyproject.toml)")
    args = parser.parse_args()
    slug = args.repo or current_slug()
    if not re.fullmatch(SLUG, slug):
        print(f"error: --repo must look like owner/name, got {slug!r}", file=sys.stderr)
        return 2
    set_slug(slug)
    for path in restamp(slug):
        print(f"restamped {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
