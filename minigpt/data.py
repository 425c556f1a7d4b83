"""Text -> tokens -> batches.

A corpus (the built-in generated stories, or any UTF-8 text file) is tokenized once and cached as a
flat uint16 array on disk (a memmap) next to a small JSON file saying which corpus and tokenizer made
it. Training then draws random windows of ctx + 1 tokens: x is the first ctx, y the same shifted by one.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from minigpt.corpus import DEFAULT_CORPUS, builtin_corpus_path, default_cache_dir
from minigpt.files import write_atomically
from minigpt.tokenizer import DEFAULT_TOKENIZER, get_tokenizer

CACHE_VERSION = 1
VAL_FRACTION = 0.1  # the last 10% of the tokens are held out for validation
_CHUNK_CHARS = 1 << 20  # tokenize in ~1 MB pieces, cut after a newline


def read_corpus_text(path: str | Path) -> str:
    """Read a UTF-8 text file, with clear errors for a missing, empty or non-UTF-8 file."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"--corpus {path} is a folder; pass a UTF-8 text file (join a folder's files into one)")
    if not path.is_file():
        raise FileNotFoundError(f"corpus file not found: {path} (pass --corpus PATH to a UTF-8 text file)")
    raw = path.read_bytes()
    if not raw.strip():
        raise ValueError(f"corpus file {path} is empty; give it some text to train on")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"corpus file {path} is not UTF-8 text (bad byte at offset {err.start}); "
            f"convert it first, e.g. `iconv -f latin1 -t utf-8 {path.name} > {path.stem}.utf8.txt`"
        ) from None


def _chunks(text: str):
    start = 0
    while start < len(text):
        end = text.find("\n", start + _CHUNK_CHARS)
        end = len(text) if end < 0 else end + 1
        yield text[start:end]
        start = end


def tokenize_to_cache(corpus: str | Path, tokenizer: str = DEFAULT_TOKENIZER, cache: Path | None = None) -> Path:
    """Tokenize a corpus file once; return the path of its cached uint16 token file."""
    corpus = Path(corpus)
    text = read_corpus_text(corpus)
    enc = get_tokenizer(tokenizer)
    if enc.n_vocab > np.iinfo(np.uint16).max + 1:
        raise ValueError(
            f"tokenizer {tokenizer!r} has {enc.n_vocab} tokens, more than a uint16 token cache holds (65536)"
        )
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    base = (cache or default_cache_dir()) / "tokens" / f"{corpus.stem}-{digest}-{tokenizer}"
    bin_path, meta_path = base.with_suffix(".bin"), base.with_suffix(".json")
    if meta_path.exists() and bin_path.exists():
        try:
            meta = json.loads(meta_path.read_text())
            complete = meta.get("version") == CACHE_VERSION and bin_path.stat().st_size == 2 * meta["n_tokens"]
        except (ValueError, KeyError, TypeError, AttributeError) as err:  # not JSON, not UTF-8, not our fields
            print(f"warning: the token cache {meta_path} is unreadable ({err}); rebuilding it", file=sys.stderr)
            complete = False
        if complete:
            return bin_path
    ids = np.concatenate([np.asarray(c, dtype=np.uint16) for c in enc.encode_ordinary_batch(list(_chunks(text)))])
    write_atomically(bin_path, lambda f: f.write(ids.tobytes()))
    meta = {
        "version": CACHE_VERSION,
        "corpus": str(corpus.resolve()),
        "corpus_sha256_16": digest,
        "tokenizer": tokenizer,
        "n_vocab": enc.n_vocab,
        "n_tokens": int(ids.size),
        "dtype": "uint16",
    }
    # The metadata is written last: its presence says the token file is complete.
    write_atomically(meta_path, lambda f: f.write(json.dumps(meta, indent=1).encode()))
    return bin_path


@dataclass
class TokenData:
    """A tokenized corpus split into train and val token arrays (read-only memmaps)."""

    train: np.ndarray
    val: np.ndarray
    tokenizer: str
    source: str

    @property
    def n_tokens(self) -> int:
        return len(self.train) + len(self.val)

    def check_ctx(self, ctx: int) -> None:
        """Both splits must hold at least ctx + 1 tokens (one window and its shifted targets)."""
        shortest = min(len(self.train), len(self.val))
        if shortest < ctx + 1:
            raise ValueError(
                f"corpus {self.source} has {self.n_tokens} tokens ({len(self.train)} train, {len(self.val)} "
                f"val), but ctx={ctx} needs at least {ctx + 1} in each split; use a longer text or a smaller --ctx"
            )

    def get_batch(
        self, split: str, batch_size: int, ctx: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Random windows: x (B, ctx) and y = x shifted left by one token, as int64 tensors."""
        return self.batch_at(split, self.draw_starts(split, batch_size, ctx, generator), ctx)

    def draw_starts(self, split: str, n: int, ctx: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Where `n` random windows of ctx + 1 tokens start: the only random draw a batch makes."""
        self.check_ctx(ctx)
        return torch.randint(len(self._split(split)) - ctx, (n,), generator=generator)

    def batch_at(self, split: str, starts: torch.Tensor, ctx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The windows starting at `starts`: x (len(starts), ctx) and y, x shifted left by one, as int64."""
        data = self._split(split)
        window = torch.from_numpy(np.stack([data[s : s + ctx + 1] for s in starts.tolist()]).astype(np.int64))
        return window[:, :-1], window[:, 1:]

    def _split(self, split: str) -> np.ndarray:
        return {"train": self.train, "val": self.val}[split]


def load_tokens(
    corpus: str | Path | None = None,
    tokenizer: str = DEFAULT_TOKENIZER,
    cache: Path | None = None,
    builtin: str = DEFAULT_CORPUS,
) -> TokenData:
    """Tokenized train/val splits of `corpus` (None: the built-in corpus `builtin`, "stories" or "recipes").

    Each built-in corpus has its own text file, and so its own token cache.
    """
    if corpus is None:
        path = builtin_corpus_path(cache_dir=cache or default_cache_dir(), kind=builtin)
    else:
        path = Path(corpus)
    tokens = np.memmap(tokenize_to_cache(path, tokenizer, cache), dtype=np.uint16, mode="r")
    n_val = int(len(tokens) * VAL_FRACTION)
    return TokenData(tokens[: len(tokens) - n_val], tokens[len(tokens) - n_val :], tokenizer, str(path))
