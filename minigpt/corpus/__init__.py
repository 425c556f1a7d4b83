"""A built-in corpus: short stories generated from a small English grammar, so training needs no download.

words.py holds the word lists, stories.py the story generator; this file caches the generated text on disk.
"""

from __future__ import annotations

import os
from pathlib import Path

from minigpt.corpus.stories import check_num_chars, generate_corpus
from minigpt.files import write_atomically

__all__ = ["CORPUS_VERSION", "DEFAULT_CORPUS_CHARS", "builtin_corpus_path", "default_cache_dir", "generate_corpus"]

DEFAULT_CORPUS_CHARS = 5_000_000
CORPUS_VERSION = 2  # bump when the generated text changes: the cache file name carries it


def default_cache_dir() -> Path:
    """Where generated files are kept: $MINIGPT_CACHE if set, else ~/.cache/minigpt."""
    return Path(os.environ.get("MINIGPT_CACHE") or Path.home() / ".cache" / "minigpt")


def builtin_corpus_path(num_chars: int = DEFAULT_CORPUS_CHARS, seed: int = 0, cache_dir: Path | None = None) -> Path:
    """Write the generated corpus to a cache file once (atomically) and return its path.

    A file already there is reused; it is written to a temp file first and renamed, so no reader ever
    sees half a file.
    """
    check_num_chars(num_chars)
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path = cache_dir / f"builtin-v{CORPUS_VERSION}-seed{seed}-{num_chars}.txt"
    if path.is_file() and path.stat().st_size == num_chars:  # ASCII: one byte per char
        return path
    text = generate_corpus(num_chars, seed)
    return write_atomically(path, lambda f: f.write(text.encode("ascii")))
