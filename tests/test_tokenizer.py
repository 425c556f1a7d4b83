import base64
import importlib.util
import os
import random
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tiktoken
import tiktoken.load
import tiktoken.registry

from minigpt import tokenizer
from minigpt.corpus import generate_corpus
from minigpt.tokenizer import (
    DEFAULT_TOKENIZER,
    PAT_STR,
    RANKS_PATH,
    decode,
    encode,
    eot_token,
    get_tokenizer,
    load_ranks,
    padded_vocab_size,
)

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "build_tokenizer.py"


def _build_script():
    spec = importlib.util.spec_from_file_location("build_tokenizer", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = _build_script()

TRICKY_TEXTS = [
    "",
    " ",
    "\n\n\n",
    "Hello, world!",
    "\"Where is the lantern?\" asked Mira. It's 12 o'clock; they'll come.",
    "emoji 😀👍🏽 👨‍👩‍👧‍👦 🇯🇵 and a heart ❤️",
    "CJK 東京は晴れです。 한국어 텍스트 中文字符",
    "combining: e\u0301 a\u0308 n\u0303 \u0915\u094d\u0937 Z\u0351\u0352\u0353",
    "control: \x00\x01\x02\t\r\n\x0b\x0c\x1b[0m\x7f\x85",
    "<|endoftext|>",
    "before <|endoftext|> after <|endoftext|><|endoftext|>",
    "   leading and trailing spaces   ",
    "tabs\tand\u00a0nbsp\u2028line sep\u3000ideographic space",
    "Ω≈ç√∫ ½ ² ⅷ ① ١٢٣ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \U0010fffd \ufeff",
    "a" * 1000 + " " + "ab" * 500,
]


@pytest.mark.parametrize("text", TRICKY_TEXTS)
def test_round_trip_on_tricky_unicode(text):
    ids = encode(text)
    assert decode(ids) == text
    assert all(0 <= i < eot_token() for i in ids)  # plain text never yields the special token


def test_round_trip_on_random_code_points():
    rng = random.Random(0)
    ranges = [(0, 0x7F), (0x80, 0x7FF), (0x800, 0xD7FF), (0xE000, 0xFFFF), (0x10000, 0x10FFFF)]
    for _ in range(300):
        chars = []
        for _ in range(rng.randint(0, 40)):
            lo, hi = rng.choice(ranges)  # every UTF-8 length; surrogates are not text
            chars.append(chr(rng.randint(lo, hi)))
        text = "".join(chars)
        assert decode(encode(text)) == text


def test_endoftext_in_user_text_is_plain_text():
    enc = get_tokenizer()
    ids = encode("a <|endoftext|> b")
    assert eot_token(enc) not in ids
    assert decode(ids) == "a <|endoftext|> b"
    assert decode([eot_token(enc)]) == "<|endoftext|>"


def test_decode_takes_arrays():
    ids = encode("Mira found the lantern.")
    assert decode(np.array(ids, dtype=np.uint16)) == "Mira found the lantern."


def test_vocab_size_and_padding():
    enc = get_tokenizer()
    assert enc.n_vocab == 8192
    assert eot_token(enc) == 8191 == enc.max_token_value
    assert padded_vocab_size(enc) % 64 == 0
    assert enc.n_vocab <= padded_vocab_size(enc) < enc.n_vocab + 64
    assert padded_vocab_size(SimpleNamespace(n_vocab=50257)) == 50304  # gpt2's size, padded
    assert padded_vocab_size(SimpleNamespace(n_vocab=100), multiple=8) == 104
    with pytest.raises(ValueError, match="multiple"):
        padded_vocab_size(enc, multiple=0)


def test_get_tokenizer_is_cached():
    assert get_tokenizer() is get_tokenizer(DEFAULT_TOKENIZER)


def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(ValueError, match="minigpt-8k.*gpt2"):
        get_tokenizer("gpt-3")


def _no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("this test must not touch the network or tiktoken's downloader")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    return refuse


def test_default_tokenizer_loads_offline(monkeypatch):
    refuse = _no_network(monkeypatch)
    for name in ("read_file", "read_file_cached", "load_tiktoken_bpe", "data_gym_to_mergeable_bpe_ranks"):
        monkeypatch.setattr(tiktoken.load, name, refuse)
    monkeypatch.setattr(tiktoken, "get_encoding", refuse)
    monkeypatch.setattr(tiktoken.registry, "get_encoding", refuse)
    tokenizer._load_tokenizer.cache_clear()
    try:
        enc = get_tokenizer()
        assert enc.n_vocab == 8192
        assert decode(encode("offline is fine", enc), enc) == "offline is fine"
    finally:
        tokenizer._load_tokenizer.cache_clear()


def test_gpt2_without_network_says_what_to_do(monkeypatch, tmp_path):
    _no_network(monkeypatch)

    def unreachable(url):
        raise ConnectionError(f"Max retries exceeded with url: {url} (Failed to establish a new connection)")

    monkeypatch.setattr(tiktoken.load, "read_file", unreachable)  # where tiktoken downloads
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # an empty cache: nothing downloaded before
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})  # nor loaded earlier in this process
    tokenizer._load_tokenizer.cache_clear()
    try:
        with pytest.raises(RuntimeError) as info:
            get_tokenizer("gpt2")
    finally:
        tokenizer._load_tokenizer.cache_clear()
    message = str(info.value)
    assert "could not download the gpt2 vocabulary" in message
    assert "minigpt-8k" in message
    assert info.value.__cause__ is None and info.value.__suppress_context__  # no network traceback


def test_gpt2_offline_fails_fast_without_calling_the_downloader(monkeypatch, tmp_path):
    """No network: the connect check fails and tiktoken's downloader (no timeout of its own) is never called."""
    import time

    def no_route(*args, **kwargs):
        raise OSError("Network is unreachable")

    def must_not_download(*args, **kwargs):
        raise AssertionError("tiktoken must not be asked to download when the server is unreachable")

    monkeypatch.setattr(socket, "create_connection", no_route)
    monkeypatch.setattr(tiktoken, "get_encoding", must_not_download)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # an empty cache: a download would be needed
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    tokenizer._load_tokenizer.cache_clear()
    t0 = time.perf_counter()
    try:
        with pytest.raises(tokenizer.TokenizerDownloadError, match="could not reach .* no network.*minigpt-8k"):
            get_tokenizer("gpt2")
    finally:
        tokenizer._load_tokenizer.cache_clear()
    assert time.perf_counter() - t0 < 1.0  # refused at once: no retries, no waiting


def test_can_connect_gives_up_on_a_hanging_name_lookup(monkeypatch):
    """A DNS lookup that hangs (a laptop with no network) is not covered by the socket timeout; the thread is."""
    import threading
    import time

    release = threading.Event()

    def hangs(*args, **kwargs):
        release.wait(10)  # stands in for getaddrinfo stuck for many seconds
        raise OSError("Temporary failure in name resolution")

    monkeypatch.setattr(socket, "create_connection", hangs)
    t0 = time.perf_counter()
    try:
        assert tokenizer.can_connect("example.invalid", 443, timeout=0.2) is False
        elapsed = time.perf_counter() - t0
    finally:
        release.set()
    assert 0.2 <= elapsed < 2.0  # waited the timeout, not the lookup's 10 s (2 s: slack for a loaded CI machine)


def test_shipped_ranks_file_is_a_valid_bpe():
    assert RANKS_PATH.stat().st_size < 400_000  # a few hundred KB at most
    ranks = load_ranks()
    assert sorted(ranks.values()) == list(range(8191))
    by_rank = sorted(ranks, key=ranks.get)
    assert by_rank[:256] == [bytes([i]) for i in range(256)]
    for rank, token in enumerate(by_rank[256:], start=256):
        # each merged token is two earlier tokens joined: tiktoken can only reach tokens built this way
        assert any(
            ranks.get(token[:cut], rank) < rank and ranks.get(token[cut:], rank) < rank for cut in range(1, len(token))
        ), token


def test_shipped_vocabulary_compresses_the_corpus():
    text = generate_corpus(300_000, seed=11)  # a seed the tokenizer was not trained on
    ids = encode(text)
    assert decode(ids) == text
    # Raw bytes would be 1 token per char; GPT-2 on English prose is about 0.25. A vocabulary trained on
    # these stories should do at least as well as 0.35, or it was not trained on them.
    assert len(ids) / len(text) < 0.35


def test_one_megabyte_of_corpus_round_trips():
    text = generate_corpus(1_000_000, seed=5)
    assert decode(encode(text)) == text


def test_load_ranks_errors_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="build_tokenizer.py"):
        load_ranks(tmp_path / "missing.tiktoken")
    bad = tmp_path / "bad.tiktoken"
    bad.write_bytes(base64.b64encode(b"a") + b" 0\nnot-a-line\n")
    with pytest.raises(ValueError, match=r"bad.tiktoken:2"):
        load_ranks(bad)


# --- the trainer in scripts/build_tokenizer.py ---------------------------------------------------------


def test_trainer_pieces_are_the_ones_tiktoken_splits():
    # An encoding whose vocabulary holds every piece whole: tiktoken then returns exactly its regex pieces.
    text = generate_corpus(50_000, seed=2) + " Don't stop!  Well...\n\n  ok 123abc _x_ naïve café — 東京 😀\n"
    pieces = build.PIECE_RE.findall(text)
    ranks = {bytes([i]): i for i in range(256)}
    for piece in dict.fromkeys(p.encode() for p in pieces):
        ranks.setdefault(piece, len(ranks))
    enc = tiktoken.Encoding(name="pieces", pat_str=PAT_STR, mergeable_ranks=ranks, special_tokens={})
    assert enc.decode_tokens_bytes(enc.encode_ordinary(text)) == [p.encode() for p in pieces]


def test_trainer_merges_the_most_frequent_pair_first():
    # The classic example: "ug" is the most frequent pair (20), then "un" (16), then "hug" (15).
    ranks = build.train_bpe({"hug": 10, "pug": 5, "pun": 12, "bun": 4, "hugs": 5}, 259)
    merged = [token for token, rank in sorted(ranks.items(), key=lambda kv: kv[1])[256:]]
    assert merged == [b"ug", b"un", b"hug"]


def test_trainer_stops_when_every_piece_is_one_token():
    ranks = build.train_bpe({"abc": 3, " abc": 2}, 1000)
    assert len(ranks) == 256 + 3  # ab, abc, then " abc": nothing left to merge
    assert {b"abc", b" abc"} <= set(ranks)


def test_trainer_output_round_trips_and_compresses(tmp_path):
    text = generate_corpus(100_000, seed=6)
    ranks = build.train_bpe(build.count_pieces(text), 600)
    assert len(ranks) == 600
    build.write_ranks(ranks, tmp_path / "small.tiktoken")
    assert load_ranks(tmp_path / "small.tiktoken") == ranks
    enc = tiktoken.Encoding(name="small", pat_str=PAT_STR, mergeable_ranks=ranks, special_tokens={})
    ids = enc.encode_ordinary(text)
    assert enc.decode(ids) == text
    assert len(ids) < 0.5 * len(text.encode())  # 344 merges at least halve the bytes on the text they saw


def test_build_script_is_reproducible(tmp_path):
    outputs = []
    for hash_seed in ("1", "2"):  # also different str hashing: nothing may depend on set/dict order of str
        out = tmp_path / f"run{hash_seed}.tiktoken"
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        args = ["--chars", "200000", "--seed", "3", "--tokens", "700", "--out", str(out)]
        subprocess.run([sys.executable, str(SCRIPT), *args], check=True, env=env, capture_output=True)
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]
    assert len(outputs[0].splitlines()) == 700


def test_module_constants_agree():
    assert tokenizer.TOKENIZER_NAMES[0] == DEFAULT_TOKENIZER == "minigpt-8k"
    assert build.N_MERGEABLE + 1 == get_tokenizer().n_vocab
