"""What every built-in corpus shares: English phrase helpers, a cast member, and a random stream to pick from.

`Teller` draws every choice from `random.Random(seed).random()` alone: Python guarantees that sequence across
versions (it does not guarantee `choice` or `shuffle`), so the same seed gives the same text everywhere.
`join_pieces` turns a writer of stories or recipes into a corpus of an exact length.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TypeVar

from minigpt.corpus.words import FEMALE_NAMES, MALE_NAMES, NUMBERS, ROLE, SURNAMES, TENS, TRAITS

T = TypeVar("T")


# ---------------------------------------------------------------------------------------------------------
# Phrase helpers: a/an, numbers in words, a capital first letter.
# ---------------------------------------------------------------------------------------------------------


def with_article(phrase: str) -> str:
    """Prefix 'a' or 'an' by the sound of the first word: an apple, a unicorn, an hour, a one-eyed cat."""
    lower = phrase.lower()
    if lower.startswith(("hour", "honest", "honor", "heir")):
        return "an " + phrase
    if lower[0] in "aeiou" and not lower.startswith(("uni", "use", "usu", "eu", "one", "once")):
        return "an " + phrase
    return "a " + phrase


def in_words(n: int) -> str:
    """1 -> 'one', 42 -> 'forty-two' (0 <= n < 100)."""
    if n < 20:
        return NUMBERS[n]
    tens, ones = divmod(n, 10)
    return TENS[tens] + ("-" + NUMBERS[ones] if ones else "")


def cap(sentence: str) -> str:
    """The sentence with its first letter in upper case: 'three cats' -> 'Three cats'."""
    return sentence[0].upper() + sentence[1:]


class Character:
    """A person (or pet) in one story: the name and pronouns stay fixed until the story ends."""

    __slots__ = ("name", "he", "him", "his", "He", "His", "role", "trait")

    def __init__(self, name: str, female: bool, role: str, trait: str):
        self.name, self.role, self.trait = name, role, trait
        self.he, self.him, self.his = ("she", "her", "her") if female else ("he", "him", "his")
        self.He, self.His = self.he.capitalize(), self.his.capitalize()


class Teller:
    """Random choices from one stream, and the cast members every corpus draws (a story's hero, a recipe's cook)."""

    def __init__(self, rng: random.Random):
        self.random = rng.random

    # -- random choices ------------------------------------------------------------------------------
    def pick(self, items: Sequence[T]) -> T:
        """Any item of the list, all equally likely."""
        return items[int(self.random() * len(items))]

    def common(self, items: Sequence[T]) -> T:
        """An item of the list, front items more often: P(index < k) = sqrt(k / len)."""
        return items[int(len(items) * self.random() ** 2)]

    def chance(self, p: float) -> bool:
        """True with probability p."""
        return self.random() < p

    def between(self, lo: int, hi: int) -> int:
        """A whole number from lo to hi, both included, all equally likely."""
        return lo + int(self.random() * (hi - lo + 1))

    # -- people ---------------------------------------------------------------------------------------
    def character(self, *avoid: Character) -> Character:
        """A new character whose name differs from those in `avoid` (the cast so far)."""
        female = self.chance(0.5)
        name, taken = "", {c.name for c in avoid}
        while not name or name in taken:
            name = self.pick(FEMALE_NAMES if female else MALE_NAMES)
        return Character(name, female, self.common(ROLE), self.common(TRAITS))

    def full_name(self, c: Character) -> str:  # "Mira" or "Mira Pemberton", for a first mention
        return f"{c.name} {self.pick(SURNAMES)}" if self.chance(0.5) else c.name


def check_num_chars(num_chars: int) -> None:
    """Raise ValueError unless num_chars is a whole number >= 0 (a bool or a float is refused)."""
    if not isinstance(num_chars, int) or isinstance(num_chars, bool) or num_chars < 0:
        raise ValueError(f"num_chars must be a non-negative int, got {num_chars!r}")


def join_pieces(num_chars: int, next_piece: Callable[[], str]) -> str:
    """Call `next_piece()` until the pieces, separated by blank lines, fill `num_chars`; cut there.

    A shorter corpus is therefore a prefix of a longer one made from the same stream.
    """
    check_num_chars(num_chars)
    pieces: list[str] = []
    total = 0
    while total < num_chars:
        piece = next_piece()
        total += len(piece) + (2 if pieces else 0)  # 2 = the "\n\n" between pieces
        pieces.append(piece)
    return "\n\n".join(pieces)[:num_chars]
