import os
import tempfile

import numpy as np
import pytest
import torch

# Every test run gets its own cache (generated corpus, token files) so no test depends on a user's ~/.cache.
# Set at import time, before any minigpt module reads it; shared by the whole session so it is built once.
os.environ.setdefault("MINIGPT_CACHE", tempfile.mkdtemp(prefix="minigpt-test-cache-"))
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture
def tiny_cfg():
    """A model small enough to train in a second, with a small vocabulary."""
    from minigpt.model import ModelConfig

    return ModelConfig(n_layer=2, n_head=2, n_embd=32, ctx=16, vocab_size=64)


def markov_tokens(n: int, vocab: int = 256, seed: int = 0) -> np.ndarray:
    """A learnable token stream: each token has 4 likely successors (a sparse Markov chain)."""

    rng = np.random.default_rng(seed)
    successors = rng.integers(0, vocab, size=(vocab, 4))
    out = np.empty(n, dtype=np.uint16)
    out[0] = 0
    choices = rng.integers(0, 4, size=n)
    for i in range(1, n):
        out[i] = successors[out[i - 1], choices[i]]
    return out


@pytest.fixture(scope="session")
def markov_data():
    """TokenData over a synthetic Markov stream: loop tests run without building the corpus."""
    from minigpt.data import TokenData

    tokens = markov_tokens(60_000)
    return TokenData(train=tokens[:50_000], val=tokens[50_000:], tokenizer="minigpt-8k", source="markov")
