"""The sentences a story is made of: phrases (a thing, a count, a time, a line of dialogue) and single events.

`StorySentences` is the part of `StoryTeller` (stories.py) that writes one sentence at a time; stories.py
holds the plot that strings them together. The events vary the middle of a story: the weather, an animal,
a feeling, a short chat, each filled with words from minigpt/corpus/words.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from minigpt.corpus.grammar import Character, Teller, cap, in_words, with_article
from minigpt.corpus.words import (
    ADVERBS,
    ALONG,
    ANIMAL,
    ANIMAL_ADJECTIVES,
    ANIMALS_PL,
    ASK_VERBS,
    AT,
    BASE,
    BLOOMS,
    CLOTHES,
    COLORS,
    COOK,
    DAYS,
    DO,
    EMOTIONS,
    FLOWER,
    FLOWERS_PL,
    FOOD,
    FOOD_MASS,
    FOODS_PL,
    FURN,
    HANDLE,
    ING,
    INTERJECTIONS,
    MATERIALS,
    MONTHS,
    OBJ,
    OBJECT_ADJECTIVES,
    OBJS,
    ON_FURNITURE,
    OTHER_ADVERBS,
    PARTICIPLE,
    PARTS_OF_DAY,
    PAST,
    PEOPLE_PARTS,
    PLACE,
    PLACE_ADJECTIVES,
    QUALITIES,
    RELATIVES,
    ROLE,
    ROLES_PL,
    SAY_VERBS,
    SEASONS,
    SHOUT_VERBS,
    SIZES,
    SKY,
    TEND,
    THIRD,
    TRAVEL,
    TREES,
    VEHICLE,
    WEATHER,
    WHEN,
    WIND,
)


class StorySentences(Teller):
    """Phrases and one-sentence events about the story's cast; `StoryTeller.story()` sets the cast first."""

    h: Character  # the hero
    f: Character  # the hero's friend
    pet: Character | None
    town: str
    obj: str  # the story's key object

    # -- phrases --------------------------------------------------------------------------------------
    def thing(self) -> str:  # "the brass key" / "the key"
        i = int(len(OBJ) * self.random() ** 2)
        return OBJ[i] if self.chance(0.5) else f"{self.common(OBJECT_ADJECTIVES)} {OBJ[i]}"

    def some(self, singular: Sequence[str], plural: Sequence[str], lo: int = 2, hi: int = 12) -> str:
        """A count in words and the noun agreeing with it: "three apples", "one apple"."""
        i, n = int(len(singular) * self.random() ** 2), self.between(lo, hi)
        return f"{in_words(n)} {singular[i] if n == 1 else plural[i]}"

    def who(self, c: Character) -> str:  # the name or the pronoun, as a sentence subject
        return c.name if self.chance(0.6) else c.He

    def when(self) -> str:
        r = self.random()
        if r < 0.5:
            return self.common(WHEN)
        if r < 0.65:
            return f"On {self.pick(DAYS)} {self.pick(PARTS_OF_DAY[:4])}"
        if r < 0.8:
            return f"One {self.pick(WEATHER)} {self.pick(SEASONS)} {self.pick(PARTS_OF_DAY[:4])}"
        if r < 0.9:
            return f"In the middle of {self.pick(MONTHS)}"
        return f"In the {self.pick(SEASONS)} of {self.between(1700, 1999)}"

    def place(self) -> str:
        return self.common(PLACE)

    def line(self, c: Character, text: str, mark: str = ".") -> str:
        """One turn of dialogue: '"Where is the lantern?" asked Mira.' and its variants."""
        verbs = ASK_VERBS if mark == "?" else SHOUT_VERBS if mark == "!" else SAY_VERBS
        verb, inner, r = self.common(verbs), text + ("," if mark == "." else mark), self.random()
        if r < 0.35:
            return f'"{inner}" {verb} {c.name}.'
        if r < 0.6:
            return f'"{inner}" {c.name} {verb}.'
        if r < 0.75:
            return f'"{inner}" {c.he} {verb}.'
        if r < 0.87:
            return f'{c.name} {verb}, "{text}{mark}"'
        return f'"{inner}" {verb} {c.name} {self.common(ADVERBS)}.'

    # Single event sentences vary the middle of a story; `StoryTeller.events` lists them, in a fixed order.
    # -- events in the setting: weather, sky, smells, the people of the town ---------------------------
    def e_weather(self) -> str:
        r = self.random()
        if r < 0.25:
            return f"Outside, the rain {self.pick(['fell', 'stopped', 'kept falling', 'turned to snow'])}."
        if r < 0.5:
            return f"The wind {self.pick(WIND)} over the {self.place()}."
        if r < 0.75:
            return f"It was {with_article(self.pick(WEATHER))} {self.pick(PARTS_OF_DAY)} in {self.town}."
        return f"The sun {self.pick(['shone', 'set', 'rose', 'came out'])} over the {self.place()}."

    def e_sky(self) -> str:
        return (
            f"That {self.pick(PARTS_OF_DAY)}, the {self.common(SKY)} over {self.town} looked {self.common(QUALITIES)}."
        )

    def e_smell(self) -> str:
        return f"The {self.place()} smelled of {self.common(FOOD_MASS)} and {self.common(MATERIALS)}."

    def e_time(self) -> str:
        return (
            f"At {in_words(self.between(1, 12))} o'clock, the {self.common(ROLE)} "
            f"{self.common(HANDLE)[PAST]} the {self.common(OBJS)}."
        )

    def e_crowd(self) -> str:
        return f"{cap(self.some(ROLE, ROLES_PL, 2, 9))} were {self.common(DO)[ING]} in the {self.place()}."

    # -- events with animals and plants ----------------------------------------------------------------
    def e_animal(self) -> str:
        verbs = TRAVEL if self.chance(0.5) else DO
        return f"The {self.common(ANIMAL)} {self.common(verbs)[PAST]} {self.common(ADVERBS)}."

    def e_creature(self) -> str:
        return (
            f"{cap(with_article(self.common(ANIMAL_ADJECTIVES)))} {self.common(ANIMAL)} was "
            f"{self.common(DO)[ING]} near the {self.place()}."
        )

    def e_tend(self) -> str:
        c = self.h if self.chance(0.6) else self.f
        return f"{self.who(c)} {self.common(TEND)[PAST]} the {self.common(ANIMAL)} {self.common(ADVERBS)}."

    def e_could(self) -> str:
        c = self.h if self.chance(0.5) else self.f
        return f"From the {self.place()}, {c.name} could see {self.some(ANIMAL, ANIMALS_PL, 1, 30)}."

    def e_garden(self) -> str:
        i = int(len(FLOWER) * self.random() ** 2)
        if self.chance(0.5):
            return f"The {FLOWERS_PL[i]} by the {self.place()} were {self.common(COLORS)} and {self.pick(BLOOMS)}."
        c = self.h if self.chance(0.6) else self.f
        flowers = self.some(FLOWER, FLOWERS_PL, 1, 12)
        return f"{self.who(c)} picked {flowers} for {c.his} {self.common(RELATIVES)}."

    def e_tree(self) -> str:
        c = self.h if self.chance(0.6) else self.f
        return (
            f"{self.who(c)} {self.common(DO)[PAST]} under the {self.common(SIZES)} {self.common(TREES)} "
            f"tree near the {self.place()}."
        )

    # -- events where the hero or the friend goes somewhere, feels or does something -------------------
    def e_walk(self) -> str:
        c = self.h if self.chance(0.6) else self.f
        return f"{self.who(c)} {self.common(TRAVEL)[PAST]} {self.common(ADVERBS)} to the {self.place()}."

    def e_where(self) -> str:
        c = self.h if self.chance(0.6) else self.f
        if self.chance(0.5):
            return f"{self.who(c)} {self.common(TRAVEL)[PAST]} {self.pick(ALONG)} the {self.place()}."
        return f"{self.who(c)} {self.common(DO)[PAST]} {self.pick(AT)} the {self.place()} for a while."

    def e_ride(self) -> str:
        return f"{self.h.name} and {self.f.name} took the {self.common(VEHICLE)} to the {self.place()} and back."

    def e_together(self) -> str:
        return f"{self.h.name} and {self.f.name} {self.common(DO)[PAST]} together until {self.pick(PARTS_OF_DAY)}."

    def e_while(self) -> str:
        a, b = (self.h, self.f) if self.chance(0.5) else (self.f, self.h)
        b = self.pet or b
        return (
            f"While {a.name} was {self.common(COOK)[ING]} the {self.common(FOODS_PL)}, {b.name} "
            f"{self.common(DO)[PAST]} {self.common(ADVERBS)}."
        )

    def e_busy(self) -> str:
        c = self.pet or self.f
        return f"{c.name} was busy {self.common(DO)[ING]} in the {self.place()}."

    def e_feeling(self) -> str:
        c = self.h if self.chance(0.6) else self.f
        return f"{self.who(c)} felt {self.common(EMOTIONS)} and a little {self.common(EMOTIONS)}."

    def e_age(self) -> str:
        c = self.h if self.chance(0.5) else self.f
        return f"{c.name} was {in_words(self.between(6, 90))} years old."

    def e_clothes(self) -> str:
        c = self.h if self.chance(0.6) else self.f
        return (
            f"{self.who(c)} put on {c.his} {self.common(COLORS)} {self.common(CLOTHES)}, because it was "
            f"{self.pick(WEATHER)}."
        )

    def e_ouch(self) -> str:
        c = self.h if self.chance(0.6) else self.f
        return (
            f"{self.who(c)} bumped {c.his} {self.common(PEOPLE_PARTS)} on the {self.common(FURN)} and "
            f"{self.common(DO)[PAST]}."
        )

    def e_food(self) -> str:
        c = self.h if self.chance(0.6) else self.f
        return (
            f"{self.who(c)} {self.common(COOK)[PAST]} {with_article(self.common(FOOD))} and "
            f"{self.common(COOK)[PAST]} {self.some(FOOD, FOODS_PL, 2, 20)}."
        )

    # -- events with things: the story's key object and others -----------------------------------------
    def e_handle(self) -> str:
        c = self.h if self.chance(0.6) else self.f
        return (
            f"{self.who(c)} {self.common(HANDLE)[PAST]} the {self.thing()} {self.pick(ON_FURNITURE)} "
            f"the {self.common(FURN)}."
        )

    def e_give(self) -> str:
        a, b = (self.h, self.f) if self.chance(0.5) else (self.f, self.h)
        return (
            f"{a.name} {self.pick(['gave', 'handed', 'showed', 'passed'])} the {self.thing()} to "
            f"{b.name}, who {self.common(HANDLE)[PAST]} it {self.common(ADVERBS)}."
        )

    def e_habit(self) -> str:
        c = self.h if self.chance(0.5) else self.f
        return (
            f"Every {self.pick(DAYS)}, {c.name} {self.common(HANDLE)[PAST]} the {self.common(OBJ)} for "
            f"{c.his} {self.common(RELATIVES)}."
        )

    def e_wish(self) -> str:
        c = self.h if self.chance(0.6) else self.f
        return (
            f"{c.name} wanted to {self.common(HANDLE)[BASE]} the {self.obj}, but {c.he} was too "
            f"{self.common(EMOTIONS)}."
        )

    def e_did_not(self) -> str:
        c = self.h if self.chance(0.6) else self.f
        return f"{self.who(c)} did not {self.common(HANDLE)[BASE]} the {self.obj} {self.common(OTHER_ADVERBS)}."

    def e_describe(self) -> str:
        return f"The {self.obj} was {self.common(QUALITIES)}, {self.common(QUALITIES)} and {self.common(QUALITIES)}."

    def e_count(self) -> str:
        n = self.between(1, 25)
        i = int(len(OBJ) * self.random() ** 2)
        what = f"{in_words(n)} {OBJ[i]}" if n == 1 else f"{in_words(n)} {OBJS[i]}"
        return f"On the {self.common(FURN)} there {'was' if n == 1 else 'were'} {what}."

    def e_price(self) -> str:
        return (
            f"{self.who(self.h)} paid {self.between(2, 99)} coins for {with_article(self.thing())} "
            f"at the {self.place()}."
        )

    def e_memory(self) -> str:
        c = self.h
        return (
            f"{self.who(c)} remembered the {self.pick(SEASONS)} when {c.he} had "
            f"{self.common(HANDLE)[PARTICIPLE]} {with_article(self.thing())}."
        )

    # -- events in dialogue ----------------------------------------------------------------------------
    def e_chat(self) -> str:
        a, b = (self.h, self.f) if self.chance(0.5) else (self.f, self.h)
        r = self.random()
        if r < 0.2:
            said = self.line(
                a, f"{self.pick(INTERJECTIONS)}, the {self.place()} is so {self.common(PLACE_ADJECTIVES)} today", "!"
            )
        elif r < 0.4:
            said = self.line(
                a,
                f"My {self.common(RELATIVES)} {self.common(HANDLE)[THIRD]} the "
                f"{self.common(OBJS)} every {self.pick(DAYS)}",
            )
        elif r < 0.6:
            done = self.common(HANDLE)[PARTICIPLE]
            said = self.line(a, f"I have never {done} {with_article(self.thing())} like this")
        elif r < 0.8:
            said = self.line(a, f"Are you {self.common(HANDLE)[ING]} the {self.common(OBJ)}, {b.name}", "?")
        elif r < 0.9:
            said = self.line(
                a, f"{b.name}, your {self.common(ANIMAL)} {self.common(DO)[THIRD]} every {self.pick(PARTS_OF_DAY)}"
            )
        else:
            said = self.line(
                a, f"Let's {self.common(TRAVEL)[BASE]} to the {self.place()} before {self.pick(PARTS_OF_DAY)}"
            )
        return said

    def e_why(self) -> str:
        a, b = (self.h, self.f) if self.chance(0.5) else (self.f, self.h)
        thing = self.common(OBJ)
        return (
            self.line(a, f"Why is the {thing} so {self.common(QUALITIES)}", "?")
            + " "
            + self.line(b, f"Because I {self.common(HANDLE)[PAST]} it {self.common(OTHER_ADVERBS)}")
        )
