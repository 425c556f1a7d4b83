"""A second built-in corpus in a form the story model has never seen: recipes, for fine-tuning.

Every recipe has the same layout, one item per line:

    Recipe: sticky plum tart
    From the kitchen of Aunt Rosa in Ashford. Serves 4.
    Ingredients:
    - 6 plums
    - 2 cups of flour
    ...
    Steps:
    1. Heat the oven to 180 degrees.
    2. Wash the plums and cut them in half.
    ...
    Tip: Rosa says it tastes even better the next day.

The words are mostly the stories' own (fruit, names, towns), so the story tokenizer covers them, but the
form is new: headings, "- " lists, numbered steps, quantities in digits. It is quick to learn because it
is regular: the sections always come in this order, the steps count up from 1, every ingredient listed is
used in the steps in the same order (a model can copy it down from the list), one apple is "it" and three
are "them", and how the dish is cooked (oven, pot, pan or chilled) decides which steps it gets. What is
left to predict is which fruit, which numbers, which cook. Like the stories, the text comes from
`random.Random(seed).random()` alone, so the same seed gives the same recipes everywhere.
"""

from __future__ import annotations

import random

from minigpt.corpus.grammar import Character, Teller, cap, check_num_chars, join_pieces
from minigpt.corpus.recipe_words import (
    BOWLS,
    COOK_TITLES,
    CUT,
    DONE,
    EGGS,
    FRUIT,
    FRUITS_PL,
    KEEP_IN,
    METHODS,
    PANS,
    POTS,
    SAVOURY_BASES,
    SAVOURY_DISHES,
    SAVOURY_EXTRAS,
    SERVE_WITH,
    STIRRING,
    SWEET_BASES,
    SWEET_DISHES,
    SWEET_EXTRAS,
    TASTES,
    TINS,
    UNITS,
    VEGETABLE,
    VEGETABLES_PL,
    WASH,
)
from minigpt.corpus.words import RELATIVES, TOWN_ENDS, TOWN_STARTS

__all__ = ["RecipeWriter", "generate_recipes"]


class Produce:
    """Fruit or vegetables counted in a recipe: "1 plum" is "the plum" and "it", "3 plums" "the plums" and "them"."""

    def __init__(self, count: int, singular: str, plural: str):
        self.count = count
        self.name = singular if count == 1 else plural
        self.it = "it" if count == 1 else "them"


def _listed(names: list[str]) -> str:
    """['flour', 'milk', 'eggs'] -> 'the flour, the milk and the eggs'."""
    the = [f"the {name}" for name in names]
    return the[0] if len(the) == 1 else ", ".join(the[:-1]) + " and " + the[-1]


class RecipeWriter(Teller):
    """Writes recipes from one random stream: `recipe()` returns one, one line per heading, ingredient or step."""

    def recipe(self) -> str:
        cook = self.character()
        sweet = self.chance(0.5)
        method = self.pick(METHODS)
        dish = self.pick((SWEET_DISHES if sweet else SAVOURY_DISHES)[method])
        singular, plural = (FRUIT, FRUITS_PL) if sweet else (VEGETABLE, VEGETABLES_PL)
        main = self.common(range(len(singular)))
        produce = [self.produce(singular, plural, main)]
        if self.chance(0.4):
            other = self.pick(range(len(singular)))
            if other != main:
                produce.append(self.produce(singular, plural, other))
        measured = list((SWEET_BASES if sweet else SAVOURY_BASES)[method])
        n_bases = len(measured)
        extras = SWEET_EXTRAS if sweet else SAVOURY_EXTRAS
        for _ in range(self.between(1, 2)):
            extra = self.common(extras)
            if extra.split(":")[0] not in [m.split(":")[0] for m in measured]:
                measured.append(extra)
        eggs = self.between(*EGGS[method]) if method in EGGS else 0

        taste = f"{self.pick(TASTES[sweet])} " if self.chance(0.5) else ""
        who = f"{self.pick(COOK_TITLES[cook.he == 'she'])} {cook.name}" if self.chance(0.5) else self.full_name(cook)
        town = self.pick(TOWN_STARTS) + self.pick(TOWN_ENDS)
        lines = [
            f"Recipe: {taste}{singular[main]} {dish}",
            f"From the kitchen of {who} in {town}. Serves {self.between(2, 8)}.",
            "Ingredients:",
        ]
        lines += [f"- {p.count} {p.name}" for p in produce]
        names = []
        for i, entry in enumerate(measured):
            if i == n_bases and eggs:  # eggs come after the base ingredients, before the extras
                lines.append(f"- {eggs} {'egg' if eggs == 1 else 'eggs'}")
            name, unit = entry.split(":")
            name = name.replace("-", " ")
            names.append(name)
            n = self.between(1, 2) if unit == "pinch" else self.between(1, 4)
            lines.append(f"- {n} {unit if n == 1 else UNITS[unit]} of {name}")
        lines.append("Steps:")
        egg_name = "egg" if eggs == 1 else "eggs"
        steps = getattr(self, method)(produce, names, egg_name, sweet)
        lines += [f"{i}. {step}" for i, step in enumerate(steps, 1)]
        if self.chance(0.6):
            lines.append(f"Tip: {self.tip(cook, produce[0], names[-1], town, sweet)}")
        return "\n".join(lines)

    def produce(self, singular: tuple[str, ...], plural: tuple[str, ...], i: int) -> Produce:
        return Produce(self.between(1, 12), singular[i], plural[i])

    # -- steps shared by every method ------------------------------------------------------------------
    def prepare(self, produce: list[Produce]) -> list[str]:
        """One step per fruit or vegetable: 'Wash the plums and cut them in half.'"""
        steps = []
        for p in produce:
            cut = self.pick(CUT).replace("#", p.it)
            steps.append(f"{cap(self.pick(WASH))} the {p.name} and {cut}.")
        return steps

    def serve(self, sweet: bool, cold: bool) -> str:
        r = self.random()
        if r < 0.6:
            return f"Serve {'cold' if cold else self.pick(['warm', 'hot'])} with {self.pick(SERVE_WITH[sweet])}."
        if r < 0.8 and not cold:
            return f"Let it cool for {self.between(2, 12)} minutes, then serve."
        return "Serve at once."

    def tip(self, cook: Character, main: Produce, last: str, town: str, sweet: bool) -> str:
        r = self.random()
        if r < 0.25:
            return f"{cook.name} says it tastes even better the next day."
        if r < 0.5:
            return f"{cook.name} always adds a little more {last} than {cook.he} says."
        if r < 0.7:
            return f"It keeps for {self.between(2, 9)} days in a cool {self.pick(KEEP_IN)}."
        if r < 0.85:
            return f"{cook.He} learned this recipe from {cook.his} {self.common(RELATIVES)} in {town}."
        return f"Use the {'ripest' if sweet else 'freshest'} {main.name} you can find."

    # -- the steps of each method: every listed ingredient is used, in the order of the list ------------
    def oven(self, produce: list[Produce], names: list[str], eggs: str, sweet: bool) -> list[str]:
        steps = [f"Heat the oven to {10 * self.between(16, 22)} degrees."]
        steps += self.prepare(produce)
        steps.append(f"Mix {_listed(names[:3])} in a {self.pick(BOWLS)}.")
        steps.append(f"Beat the {eggs} and stir {'it' if eggs == 'egg' else 'them'} in.")
        steps.append(f"Add {_listed([p.name for p in produce] + names[3:])} and stir {self.pick(STIRRING)}.")
        steps.append(f"Put everything in a {self.pick(TINS)}.")
        steps.append(f"Bake for {5 * self.between(4, 12)} minutes, until {self.pick(DONE)}.")
        steps.append(self.serve(sweet, cold=False))
        return steps

    def pot(self, produce: list[Produce], names: list[str], eggs: str, sweet: bool) -> list[str]:
        steps = self.prepare(produce)
        steps.append(f"Put {_listed([p.name for p in produce])} in a {self.pick(POTS)} with the {names[0]}.")
        steps.append(f"Bring it to the boil, then let it simmer for {5 * self.between(2, 12)} minutes.")
        steps.append(f"Stir in {_listed(names[1:])} and cook for {self.between(2, 10)} minutes more.")
        steps.append(self.serve(sweet, cold=False))
        return steps

    def pan(self, produce: list[Produce], names: list[str], eggs: str, sweet: bool) -> list[str]:
        steps = self.prepare(produce)
        steps.append(f"Melt the {names[0]} in a {self.pick(PANS)}.")
        steps.append(f"Mix {_listed(names[1:3] + [eggs])} in a {self.pick(BOWLS)} to make a batter.")
        steps.append(f"Stir in {_listed([p.name for p in produce] + names[3:])}.")
        steps.append(f"Fry spoonfuls of the batter for {self.between(2, 6)} minutes on each side, until golden.")
        steps.append(self.serve(sweet, cold=False))
        return steps

    def cold(self, produce: list[Produce], names: list[str], eggs: str, sweet: bool) -> list[str]:
        steps = self.prepare(produce)
        steps.append(f"Mix {_listed(names)} in a {self.pick(BOWLS)}.")
        steps.append(f"Add {_listed([p.name for p in produce])} and stir {self.pick(STIRRING)}.")
        hours = self.between(1, 8)
        steps.append(f"Chill for {hours} {'hour' if hours == 1 else 'hours'}.")
        steps.append(self.serve(sweet, cold=True))
        return steps


def generate_recipes(num_chars: int, seed: int = 0) -> str:
    """Return exactly `num_chars` characters of generated recipes (ASCII), separated by blank lines.

    The output depends only on (num_chars, seed), and a shorter corpus is a prefix of a longer one.
    """
    check_num_chars(num_chars)
    return join_pieces(num_chars, RecipeWriter(random.Random(seed)).recipe)
