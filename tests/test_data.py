import numpy as np
import pytest
import torch

from minigpt.data import TokenData, load_tokens, tokenize_to_cache


def test_builtin_corpus_loads_splits_and_batches():
    data = load_tokens()
    assert len(data.train) > 9 * len(data.val) * 0.99  # 90/10 split
    x, y = data.get_batch("train", 4, 32, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 32) and x.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])  # y is x shifted by one token
    x2, _ = data.get_batch("train", 4, 32, torch.Generator().manual_seed(0))
    assert torch.equal(x, x2)  # seeded batches repeat


def test_any_text_file_is_a_corpus_and_is_cached(tmp_path):
    corpus = tmp_path / "poem.txt"
    corpus.write_text("Ünïcödé text, emoji 🙂, and 漢字. " * 200, encoding="utf-8")
    first = tokenize_to_cache(corpus, cache=tmp_path / "cache")
    mtime = first.stat().st_mtime_ns
    again = tokenize_to_cache(corpus, cache=tmp_path / "cache")
    assert again == first and again.stat().st_mtime_ns == mtime  # tokenized once, then reused
    data = load_tokens(corpus, cache=tmp_path / "cache")
    assert data.n_tokens == first.stat().st_size // 2
    corpus.write_text("different text " * 300, encoding="utf-8")
    assert tokenize_to_cache(corpus, cache=tmp_path / "cache") != first  # the key follows the content


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="corpus file not found"):
        load_tokens(tmp_path / "nope.txt", cache=tmp_path)


def test_empty_file(tmp_path):
    (tmp_path / "empty.txt").write_text("  \n")
    with pytest.raises(ValueError, match="empty"):
        load_tokens(tmp_path / "empty.txt", cache=tmp_path)


def test_not_utf8(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("café crème".encode("latin-1"))
    with pytest.raises(ValueError, match="not UTF-8.*offset 3"):
        load_tokens(tmp_path / "latin1.txt", cache=tmp_path)
    assert not list(tmp_path.glob("tokens/*")), "nothing half-written for a bad file"


def test_too_few_tokens_for_ctx(tmp_path):
    (tmp_path / "short.txt").write_text("A short story about a cat. " * 20)
    data = load_tokens(tmp_path / "short.txt", cache=tmp_path)
    with pytest.raises(ValueError, match="needs at least 257"):
        data.get_batch("train", 1, 256)


def test_vocabulary_larger_than_uint16_is_refused(tmp_path, monkeypatch):
    class HugeVocab:
        n_vocab = 100_000

    monkeypatch.setattr("minigpt.data.get_tokenizer", lambda name: HugeVocab())
    (tmp_path / "t.txt").write_text("hello world")
    with pytest.raises(ValueError, match="uint16"):
        tokenize_to_cache(tmp_path / "t.txt", cache=tmp_path)
    assert not list(tmp_path.glob("tokens/*"))


def test_crash_while_caching_leaves_no_partial_token_file(tmp_path, monkeypatch):
    (tmp_path / "t.txt").write_text("hello world " * 100)

    def dies(*args):
        raise KeyboardInterrupt  # killed after writing the temp file, before the rename

    monkeypatch.setattr("minigpt.files.os.replace", dies)
    with pytest.raises(KeyboardInterrupt):
        tokenize_to_cache(tmp_path / "t.txt", cache=tmp_path)
    monkeypatch.undo()
    assert not list((tmp_path / "tokens").glob("*"))
    assert tokenize_to_cache(tmp_path / "t.txt", cache=tmp_path).exists()  # and the next try works


def test_token_data_from_arrays():
    data = TokenData(np.arange(100, dtype=np.uint16), np.arange(20, dtype=np.uint16), "minigpt-8k", "test")
    x, y = data.get_batch("val", 2, 19)
    assert x.shape == (2, 19) and torch.equal(y, x + 1)
