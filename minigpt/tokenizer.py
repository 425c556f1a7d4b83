"""Text <-> token ids with tiktoken.

The default vocabulary, minigpt-8k, is a byte-level BPE trained on the built-in corpus by
scripts/build_tokenizer.py and shipped in minigpt/assets, so it works offline. It has 8191 BPE tokens plus
<|endoftext|> = 8192, and it splits text into pieces with the GPT-2 regex before merging bytes, exactly
like GPT-2. "gpt2" (50257 tokens) is there too but tiktoken downloads it on first use.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Sequence
from pathlib import Path

import tiktoken

DEFAULT_TOKENIZER = "minigpt-8k"
TOKENIZER_NAMES = (DEFAULT_TOKENIZER, "gpt2")
RANKS_PATH = Path(__file__).parent / "assets" / "minigpt_8k.tiktoken"
ENDOFTEXT = "<|endoftext|>"

# GPT-2's pre-tokenizer (as tiktoken writes it): contractions, words with their leading space, numbers,
# runs of punctuation, and whitespace. BPE merges never cross the boundaries of these pieces.
PAT_STR = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""


def load_ranks(path: str | Path = RANKS_PATH) -> dict[bytes, int]:
    """Read a tiktoken ranks file: one 'base64(token) rank' per line; lower rank = merged earlier."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer ranks file not found: {path} (build it: python scripts/build_tokenizer.py)")
    ranks = {}
    for lineno, line in enumerate(path.read_bytes().splitlines(), start=1):
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except ValueError as err:
            raise ValueError(f"{path}:{lineno}: expected 'base64 rank', got {line[:60]!r} ({err})") from None
    return ranks


def get_tokenizer(name: str = DEFAULT_TOKENIZER) -> tiktoken.Encoding:
    """The tokenizer called `name`: 'minigpt-8k' (shipped, offline) or 'gpt2' (downloaded by tiktoken).

    Loaded once per process; later calls return the same object.
    """
    if not isinstance(name, str):
        raise ValueError(f"tokenizer name must be a string ({', '.join(TOKENIZER_NAMES)}), got {name!r}")
    return _load_tokenizer(name)


@functools.lru_cache  # keyed by the name, so get_tokenizer() and get_tokenizer("minigpt-8k") share one
def _load_tokenizer(name: str) -> tiktoken.Encoding:
    if name == DEFAULT_TOKENIZER:
        ranks = load_ranks(RANKS_PATH)
        return tiktoken.Encoding(
            name=name, pat_str=PAT_STR, mergeable_ranks=ranks, special_tokens={ENDOFTEXT: len(ranks)}
        )
    if name == "gpt2":
        try:
            return tiktoken.get_encoding("gpt2")
        except Exception as err:  # requests, OSError, hash mismatch...: all mean "could not get the files"
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            reason = reason if len(reason) <= 160 else reason[:160] + "..."
            raise RuntimeError(
                f"could not download the gpt2 vocabulary ({reason}). tiktoken fetches it from the internet "
                f"on first use and caches it. Without network, use the offline default tokenizer "
                f"'{DEFAULT_TOKENIZER}' (--tokenizer {DEFAULT_TOKENIZER})."
            ) from None
    raise ValueError(f"unknown tokenizer {name!r}; valid names: {', '.join(TOKENIZER_NAMES)}")


def padded_vocab_size(enc: tiktoken.Encoding, multiple: int = 64) -> int:
    """enc.n_vocab rounded up to a multiple of `multiple` (64): the embedding table size the model uses.

    Matrix shapes that are multiples of 64 run faster on GPUs; the extra rows are never produced by encode.
    """
    if multiple < 1:
        raise ValueError(f"multiple must be >= 1, got {multiple}")
    return -(-enc.n_vocab // multiple) * multiple


def encode(text: str, enc: tiktoken.Encoding | None = None) -> list[int]:
    """Token ids of `text`. Text like '<|endoftext|>' in the text is encoded as plain text."""
    return (enc or get_tokenizer()).encode_ordinary(text)


def decode(ids: Sequence[int], enc: tiktoken.Encoding | None = None) -> str:
    """Text of token ids (a list, numpy array or tensor); bytes that are not valid UTF-8 become U+FFFD."""
    ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    return (enc or get_tokenizer()).decode(ids)


def eot_token(enc: tiktoken.Encoding | None = None) -> int:
    """The id of <|endoftext|>, the separator put between documents."""
    return (enc or get_tokenizer()).eot_token
