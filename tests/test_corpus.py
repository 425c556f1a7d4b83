import hashlib
import os
import re

import pytest

from minigpt import corpus, files
from minigpt.corpus import DEFAULT_CORPUS_CHARS, builtin_corpus_path, generate_corpus
from minigpt.corpus.words import FEMALE_NAMES, MALE_NAMES

# sha256 of the stories text, taken before stories.py was split into grammar.py, sentences.py and stories.py.
# Chapter notebooks and token caches depend on this exact text: a change must bump CORPUS_VERSION.
PINNED_STORIES = {
    (20_000, 3): "561c67750a5fa84bc901e0e35602587ed4c654e8e17f2c6e271a47904e1e413a",
    (250_000, 0): "04fa3943ee48b6e3829970a8b4519cf6ee51c8677e5a0a6cf80e791fb2ff3cd0",
    (DEFAULT_CORPUS_CHARS, 0): "9b8d5b1471b5de1e9c23a4e920b0aa66d3f5574bab703780e2ccd34ad2836831",
}


@pytest.mark.parametrize("num_chars, seed", list(PINNED_STORIES))
def test_stories_text_is_unchanged(num_chars, seed):
    text = generate_corpus(num_chars, seed)
    assert hashlib.sha256(text.encode("ascii")).hexdigest() == PINNED_STORIES[num_chars, seed]
    assert text == generate_corpus(num_chars, seed, kind="stories")


def test_old_import_paths_still_work():
    from minigpt.corpus.stories import Character, StoryTeller, check_num_chars
    from minigpt.corpus.stories import generate_corpus as stories_generate_corpus

    assert stories_generate_corpus(3_000, 2) == generate_corpus(3_000, 2)
    assert StoryTeller and Character
    with pytest.raises(ValueError, match="num_chars"):
        check_num_chars(-1)
    assert corpus.CORPUS_VERSION == corpus.CORPUS_VERSIONS["stories"]


def test_unknown_corpus_kind_is_a_clear_error(tmp_path):
    for call in (
        lambda: generate_corpus(100, kind="poems"),
        lambda: builtin_corpus_path(100, cache_dir=tmp_path, kind="poems"),
    ):
        with pytest.raises(ValueError, match="stories, recipes"):
            call()


def test_same_seed_gives_same_text_and_other_seed_other_text():
    text = generate_corpus(20_000, seed=1)
    assert text == generate_corpus(20_000, seed=1)
    assert text != generate_corpus(20_000, seed=2)


@pytest.mark.parametrize("n", [0, 1, 17, 4_999, 33_333])
def test_length_is_exactly_num_chars(n):
    assert len(generate_corpus(n)) == n


def test_shorter_corpus_is_a_prefix_of_a_longer_one():
    long = generate_corpus(60_000, seed=3)
    for n in (1, 999, 12_345, 59_999):
        assert long.startswith(generate_corpus(n, seed=3))


def test_bad_num_chars_is_a_clear_error():
    for bad in (-1, 2.5, "100"):
        with pytest.raises(ValueError, match="num_chars"):
            generate_corpus(bad)


def test_vocabulary_is_large_even_in_a_modest_sample():
    words = set(re.findall(r"[A-Za-z]+", generate_corpus(200_000)))
    assert len(words) > 1000


def test_stories_are_ascii_separated_by_blank_lines_and_have_dialogue():
    text = generate_corpus(100_000)
    assert text.isascii()  # builtin_corpus_path relies on 1 byte per char
    stories = text.split("\n\n")
    assert len(stories) > 20
    assert re.search(r'"[A-Z][^"]*\?" (asked|wondered|inquired) [A-Z][a-z]+\.', text)  # a question turn
    with_dialogue = sum('"' in story for story in stories[:-1])  # the last one may be cut short
    assert with_dialogue / (len(stories) - 1) > 0.8  # every arc has at least two turns; a few stories don't


def test_grammar_agreement():
    text = generate_corpus(300_000, seed=4)
    # was/were agrees with the count: "there was one cup", "there were three cups"
    counts = re.findall(r"there (was|were) ([a-z-]+) ", text)
    assert len(counts) > 20
    assert all((verb == "was") == (number == "one") for verb, number in counts)
    # a/an follows the sound of the next word
    assert not re.search(r"\ban [bcdfgjklmnpqrstvwxyz]", text)
    assert not re.search(r"\ba [aeio]", text)
    # possessive pronouns agree with the subject pronoun in the same clause
    for subject, possessive in re.findall(r"Every \w+, (he|she) visited (his|her) friend", text):
        assert (subject, possessive) in (("he", "his"), ("she", "her"))


def test_pronouns_stay_with_the_character():
    text = generate_corpus(300_000, seed=5)
    opening = r"\b([A-Z][a-z]+) was an? [a-z -]+ who lived in [^.]+\. Every \w+, (he|she) visited"
    pairs = re.findall(opening, text)
    assert len(pairs) > 20
    for name, pronoun in pairs:
        assert pronoun == ("she" if name in FEMALE_NAMES else "he"), (name, pronoun)
        assert name in FEMALE_NAMES or name in MALE_NAMES


def test_cache_file_is_written_once_then_reused(tmp_path, monkeypatch):
    path = builtin_corpus_path(10_000, seed=0, cache_dir=tmp_path)
    assert path.parent == tmp_path
    assert path.read_text() == generate_corpus(10_000, seed=0)

    def must_not_generate(*args, **kwargs):
        raise AssertionError("the cached file should have been reused")

    monkeypatch.setattr(corpus, "generate_corpus", must_not_generate)
    assert builtin_corpus_path(10_000, seed=0, cache_dir=tmp_path) == path
    assert list(tmp_path.iterdir()) == [path]  # no temp files left around


def test_each_corpus_has_its_own_cache_file_and_stories_keep_their_name(tmp_path):
    stories = builtin_corpus_path(2_000, seed=1, cache_dir=tmp_path)
    recipes = builtin_corpus_path(2_000, seed=1, cache_dir=tmp_path, kind="recipes")
    assert stories.name == f"builtin-v{corpus.CORPUS_VERSION}-seed1-2000.txt"  # token caches are keyed on it
    assert recipes.name == f"builtin-recipes-v{corpus.CORPUS_VERSIONS['recipes']}-seed1-2000.txt"
    assert recipes.read_text() == generate_corpus(2_000, seed=1, kind="recipes") != stories.read_text()


def test_cache_dir_defaults_to_minigpt_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIGPT_CACHE", str(tmp_path / "cache"))
    assert builtin_corpus_path(1_000).parent == tmp_path / "cache"


def test_a_truncated_cache_file_is_regenerated(tmp_path):
    path = builtin_corpus_path(5_000, cache_dir=tmp_path)
    path.write_text("half a story")
    assert builtin_corpus_path(5_000, cache_dir=tmp_path).read_text() == generate_corpus(5_000)


class _DiskFullOs:
    """`os` for minigpt.files whose files fail half way through a write, like a full disk."""

    def __getattr__(self, name):
        return getattr(os, name)

    @staticmethod
    def fdopen(fd, *args, **kwargs):
        f = os.fdopen(fd, *args, **kwargs)

        class HalfWrite:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                f.close()

            def write(self, text):
                f.write(text[: len(text) // 2])
                f.flush()
                raise OSError(28, "No space left on device")

        return HalfWrite()


def test_failed_write_leaves_no_partial_file(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "os", _DiskFullOs())  # the corpus is written by minigpt.files
    with pytest.raises(OSError, match="the disk holding .* is full"):
        builtin_corpus_path(10_000, cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []  # neither the final file nor the temp file
