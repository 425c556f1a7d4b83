"""The built-in corpora, generated from small English grammars, so training needs no download.

"stories" (the default) are short stories to pretrain on; "recipes" are recipes in a layout the story
model has never seen, to fine-tune on. grammar.py holds what both share, words.py and recipe_words.py the
word lists, stories.py (with sentences.py) and recipes.py the writers; this file picks one by name and
caches its text on disk.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from minigpt.corpus.grammar import check_num_chars
from minigpt.corpus.recipes import generate_recipes
from minigpt.corpus.stories import generate_stories
from minigpt.files import write_atomically

__all__ = [
    "CORPORA",
    "CORPUS_VERSION",
    "CORPUS_VERSIONS",
    "DEFAULT_CORPUS",
    "DEFAULT_CORPUS_CHARS",
    "builtin_corpus_path",
    "default_cache_dir",
    "generate_corpus",
]

# Each built-in corpus by name: a function (num_chars, seed) -> exactly num_chars characters of ASCII text.
CORPORA: dict[str, Callable[[int, int], str]] = {"stories": generate_stories, "recipes": generate_recipes}
DEFAULT_CORPUS = "stories"
DEFAULT_CORPUS_CHARS = 5_000_000
# Bump a corpus's version when its generated text changes: the cache file name carries it.
CORPUS_VERSIONS = {"stories": 2, "recipes": 1}
CORPUS_VERSION = CORPUS_VERSIONS["stories"]


def _check_kind(kind: str) -> None:
    if kind not in CORPORA:
        raise ValueError(f"unknown built-in corpus {kind!r}; choose one of {', '.join(CORPORA)}")


def generate_corpus(num_chars: int, seed: int = 0, kind: str = DEFAULT_CORPUS) -> str:
    """Exactly `num_chars` characters of the built-in corpus `kind` ("stories" or "recipes").

    The text depends only on (num_chars, seed, kind), and a shorter corpus is a prefix of a longer one.
    """
    _check_kind(kind)
    return CORPORA[kind](num_chars, seed)


def default_cache_dir() -> Path:
    """Where generated files are kept: $MINIGPT_CACHE if set, else ~/.cache/minigpt."""
    return Path(os.environ.get("MINIGPT_CACHE") or Path.home() / ".cache" / "minigpt")


def builtin_corpus_path(
    num_chars: int = DEFAULT_CORPUS_CHARS, seed: int = 0, cache_dir: Path | None = None, kind: str = DEFAULT_CORPUS
) -> Path:
    """Write the generated corpus `kind` to a cache file once (atomically) and return its path.

    A file already there is reused; it is written to a temp file first and renamed, so no reader ever
    sees half a file.
    """
    check_num_chars(num_chars)
    _check_kind(kind)
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    name = "builtin" if kind == "stories" else f"builtin-{kind}"  # the stories keep their old file name
    path = cache_dir / f"{name}-v{CORPUS_VERSIONS[kind]}-seed{seed}-{num_chars}.txt"
    if path.is_file() and path.stat().st_size == num_chars:  # ASCII: one byte per char
        return path
    text = generate_corpus(num_chars, seed, kind)
    return write_atomically(path, lambda f: f.write(text.encode("ascii")))
