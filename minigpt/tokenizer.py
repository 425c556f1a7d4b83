"""Text <-> token ids with tiktoken.

The default vocabulary, minigpt-8k, is a byte-level BPE trained on the built-in corpus by
scripts/build_tokenizer.py and shipped in minigpt/assets, so it works offline. It has 8191 BPE tokens plus
<|endoftext|> = 8192, and it splits text into pieces with the GPT-2 regex before merging bytes, exactly
like GPT-2. "gpt2" (50257 tokens) is there too but tiktoken downloads it on first use: without network
that fails within a few seconds (CONNECT_TIMEOUT_S), with a message naming the offline tokenizer.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import os
import socket
import tempfile
import threading
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import tiktoken

DEFAULT_TOKENIZER = "minigpt-8k"
TOKENIZER_NAMES = (DEFAULT_TOKENIZER, "gpt2")
RANKS_PATH = Path(__file__).parent / "assets" / "minigpt_8k.tiktoken"
ENDOFTEXT = "<|endoftext|>"
GPT2_URLS = (  # what tiktoken downloads for "gpt2" (tiktoken_ext/openai_public.py)
    "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe",
    "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json",
)
CONNECT_TIMEOUT_S = 3.0  # how long we wait for the download server before saying "no network"


class TokenizerDownloadError(RuntimeError):
    """A tokenizer's files could not be downloaded (no network, a proxy, a server down)."""


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
        if not _gpt2_is_cached():  # a download is needed: see first, quickly, whether the server answers
            server = _download_server(GPT2_URLS[0])
            if not can_connect(*server):
                raise TokenizerDownloadError(
                    _download_advice(f"could not reach {server[0]} within {CONNECT_TIMEOUT_S:g} s: no network?")
                ) from None  # nothing to chain: a short message is the whole story
        try:
            return tiktoken.get_encoding("gpt2")
        except Exception as err:  # requests, OSError, hash mismatch...: all mean "could not get the files"
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            reason = reason if len(reason) <= 160 else reason[:160].rsplit(" ", 1)[0] + " ..."
            raise TokenizerDownloadError(_download_advice(reason)) from None
    raise ValueError(f"unknown tokenizer {name!r}; valid names: {', '.join(TOKENIZER_NAMES)}")


def _download_advice(reason: str) -> str:
    return (
        f"could not download the gpt2 vocabulary ({reason}). tiktoken fetches it from the internet on first "
        f"use and caches it. Without network, use the offline default tokenizer '{DEFAULT_TOKENIZER}' "
        f"(--tokenizer {DEFAULT_TOKENIZER})."
    )


def _gpt2_is_cached() -> bool:
    """Whether tiktoken can load gpt2 without the network: loaded already, or both files in its cache."""
    if "gpt2" in getattr(tiktoken.registry, "ENCODINGS", {}):
        return True
    # tiktoken.load.read_file_cached's cache: $TIKTOKEN_CACHE_DIR, $DATA_GYM_CACHE_DIR or a temp folder; "" = off
    cache = os.environ.get("TIKTOKEN_CACHE_DIR", os.environ.get("DATA_GYM_CACHE_DIR"))
    cache = os.path.join(tempfile.gettempdir(), "data-gym-cache") if cache is None else cache
    keys = [hashlib.sha1(url.encode()).hexdigest() for url in GPT2_URLS]
    return bool(cache) and all(os.path.exists(os.path.join(cache, key)) for key in keys)


def _download_server(url: str) -> tuple[str, int]:
    """(host, port) a download of `url` connects to first: the HTTPS proxy if one is set, else the server."""
    proxy = urllib.request.getproxies().get("https")
    parts = urllib.parse.urlsplit(proxy if proxy else url)
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)


def can_connect(host: str, port: int, timeout: float = CONNECT_TIMEOUT_S) -> bool:
    """Whether a TCP connection to host:port opens within `timeout` seconds, name lookup included.

    The timeout of socket.create_connection does not cover the DNS lookup, which can hang far longer on a
    laptop without network; so the attempt runs in a helper thread, and we wait for it at most `timeout`.
    """
    opened: list[bool] = []

    def attempt() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            opened.append(True)
        except Exception:  # OSError, socket.gaierror, a timeout: all mean "not reachable"
            opened.append(False)

    thread = threading.Thread(target=attempt, daemon=True)  # daemon: a hung lookup never blocks the exit
    thread.start()
    thread.join(timeout)
    return bool(opened) and opened[0]


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
