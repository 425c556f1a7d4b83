"""Train the minigpt-8k byte-level BPE tokenizer on the built-in corpus and write its tiktoken ranks file.

    python scripts/build_tokenizer.py            # -> minigpt/assets/minigpt_8k.tiktoken

Byte-level BPE in three steps:
1. Split the text into pieces with the GPT-2 regex (" cat", "'s", ".\"", "\\n") and count each distinct piece.
2. Start with the 256 single bytes as tokens. Repeatedly find the most frequent adjacent pair of tokens
   inside the pieces, make it a new token, and replace the pair everywhere. Only the pieces that contain
   the pair change, so pair counts are updated incrementally instead of recounted.
3. Write each token with its rank (the order it was made in). tiktoken encodes by applying merges in rank
   order, which replays this training on new text.

Everything is deterministic (fixed corpus seed, ties broken by token ids), so two runs write the same file.
"""

from __future__ import annotations

import argparse
import base64
import heapq
import re
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run from a checkout without installing the package

from minigpt.corpus import DEFAULT_CORPUS_CHARS, generate_corpus  # noqa: E402
from minigpt.tokenizer import RANKS_PATH  # noqa: E402

N_MERGEABLE = 8191  # 256 bytes + 7935 merges; <|endoftext|> takes id 8191, for 8192 in all

# tokenizer.PAT_STR written for Python's `re` (which has no \p{L}): [^\W\d_] is "letters", \d "digits".
# On the built-in corpus (ASCII) the pieces are identical to tiktoken's; tests/test_tokenizer.py checks it.
PIECE_RE = re.compile(r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")


def count_pieces(text: str) -> Counter[str]:
    """How often each pre-tokenized piece occurs in `text`: BPE trains on these counts, not on the text."""
    return Counter(PIECE_RE.findall(text))


def _pairs(word: list[int]):
    return zip(word[:-1], word[1:], strict=True)  # adjacent pairs: [a, b, c] -> (a, b), (b, c)


def _merge(word: list[int], a: int, b: int, new: int) -> list[int]:
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
            out.append(new)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out


def train_bpe(piece_counts: dict[str, int], n_tokens: int = N_MERGEABLE) -> dict[bytes, int]:
    """Byte-level BPE: the 256 bytes, then merged tokens, until there are `n_tokens` (token bytes -> rank).

    Stops early if every piece is already a single token (then there is nothing left to merge).
    """
    if n_tokens < 256:
        raise ValueError(f"n_tokens must be at least 256 (the single bytes), got {n_tokens}")
    vocab = [bytes([i]) for i in range(256)]  # token id -> its bytes; the id is also its rank
    id_of = {token: i for i, token in enumerate(vocab)}
    words = [list(piece.encode("utf-8")) for piece in piece_counts]  # each piece as token ids
    counts = list(piece_counts.values())

    pair_count: dict[tuple[int, int], int] = defaultdict(int)  # how often each adjacent pair occurs
    where: dict[tuple[int, int], set[int]] = defaultdict(set)  # which words (may be stale) contain it
    for w, (word, n) in enumerate(zip(words, counts, strict=True)):
        for pair in _pairs(word):
            pair_count[pair] += n
            where[pair].add(w)
    # A max-heap of (-count, a, b). Entries go stale when counts change; a popped entry is used only if its
    # count is still current. Ties go to the smallest ids, which makes the result deterministic.
    heap = [(-n, a, b) for (a, b), n in pair_count.items()]
    heapq.heapify(heap)

    while len(vocab) < n_tokens and heap:
        neg, a, b = heapq.heappop(heap)
        if pair_count.get((a, b), 0) != -neg:
            continue
        merged = vocab[a] + vocab[b]
        new = id_of.get(merged)  # the same bytes can (rarely) be reached from two different pairs
        if new is None:
            new = len(vocab)
            vocab.append(merged)
            id_of[merged] = new
        delta: dict[tuple[int, int], int] = defaultdict(int)
        for w in where.pop((a, b)):  # the order does not matter: the count changes just add up
            word, n = words[w], counts[w]
            merged_word = _merge(word, a, b, new)
            if len(merged_word) == len(word):
                continue  # stale: this word no longer contains the pair
            for pair in _pairs(word):
                delta[pair] -= n
            for pair in _pairs(merged_word):
                delta[pair] += n
                where[pair].add(w)
            words[w] = merged_word
        for pair, d in delta.items():
            if d:
                pair_count[pair] += d
                if pair_count[pair] > 0:
                    heapq.heappush(heap, (-pair_count[pair], *pair))
                else:
                    del pair_count[pair]
    return {token: rank for rank, token in enumerate(vocab)}


def write_ranks(ranks: dict[bytes, int], path: Path) -> None:
    """Write ranks in tiktoken's format: 'base64(token) rank' per line, in rank order."""
    by_rank = sorted(ranks.items(), key=lambda item: item[1])
    lines = [base64.b64encode(token) + b" " + str(rank).encode() for token, rank in by_rank]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\n".join(lines) + b"\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chars", type=int, default=DEFAULT_CORPUS_CHARS, help="corpus characters to train on")
    p.add_argument("--seed", type=int, default=0, help="corpus seed")
    p.add_argument("--tokens", type=int, default=N_MERGEABLE, help="mergeable tokens (256 bytes + merges)")
    p.add_argument("--out", type=Path, default=RANKS_PATH, help="ranks file to write")
    args = p.parse_args(argv)

    t0 = time.perf_counter()
    text = generate_corpus(args.chars, args.seed)
    pieces = count_pieces(text)
    t1 = time.perf_counter()
    ranks = train_bpe(pieces, args.tokens)
    t2 = time.perf_counter()
    write_ranks(ranks, args.out)
    print(f"corpus: {len(text):,} chars, {len(pieces):,} distinct pieces ({t1 - t0:.1f} s)")
    print(f"trained {len(ranks)} tokens ({len(ranks) - 256} merges) in {t2 - t1:.1f} s")
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KiB)")
    if len(ranks) < args.tokens:
        print(
            f"WARNING: merges ran out at {len(ranks)} < {args.tokens} tokens: every piece of the corpus is "
            f"already one token. Give the corpus more distinct words.",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
