"""The story generator: `StoryTeller` writes short stories, `generate_corpus` joins them into a corpus.

The text is made to be learnable but not trivial. Inside a story the names, pronouns, home town and key
object stay the same (a model can learn to copy them), sentences follow English agreement (a/an, one
apple / three apples, she ... her / he ... his, was / were), dialogue comes in question-and-answer turns,
and stories follow a dozen recurring arcs. The words in each slot are drawn at random from lists of
several thousand word types (minigpt/corpus/words.py), so there is always something left to predict.

Only `random.Random(seed).random()` is used: Python guarantees that sequence across versions (it does not
guarantee `choice` or `shuffle`), so the same seed gives the same text everywhere.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

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
    BODY,
    CLOTHES,
    COLORS,
    CONTAINERS,
    COOK,
    DAYS,
    DEGREES,
    DO,
    EMOTIONS,
    EVENT_KINDS,
    EVENTS,
    FEMALE_NAMES,
    FLOWER,
    FLOWERS_PL,
    FOOD,
    FOOD_MASS,
    FOODS_PL,
    FURN,
    HANDLE,
    HOMES,
    ING,
    INTERJECTIONS,
    LONG_AGO,
    MALE_NAMES,
    MATERIALS,
    MONTHS,
    NEAR,
    NUMBERS,
    OBJ,
    OBJECT_ADJECTIVES,
    OBJS,
    ON_FURNITURE,
    ORDINALS,
    OTHER_ADVERBS,
    PARTICIPLE,
    PARTS_OF_DAY,
    PAST,
    PEOPLE_PARTS,
    PET,
    PET_NAMES,
    PLACE,
    PLACE_ADJECTIVES,
    QUALITIES,
    RELATIVES,
    ROLE,
    ROLES_PL,
    SAY_VERBS,
    SEASONS,
    SETBACKS,
    SHOUT_VERBS,
    SIZES,
    SKILL,
    SKY,
    SOUNDS,
    SURNAMES,
    TASTES,
    TEND,
    TENS,
    THIRD,
    TOWN_ENDS,
    TOWN_STARTS,
    TRAITS,
    TRAVEL,
    TREES,
    VEHICLE,
    WEATHER,
    WHEN,
    WIND,
)

T = TypeVar("T")


# ---------------------------------------------------------------------------------------------------------
# Phrase helpers: a/an, numbers in words, a capital first letter.
# ---------------------------------------------------------------------------------------------------------


def _a(phrase: str) -> str:
    """Prefix 'a' or 'an' by the sound of the first word: an apple, a unicorn, an hour, a one-eyed cat."""
    lower = phrase.lower()
    if lower.startswith(("hour", "honest", "honor", "heir")):
        return "an " + phrase
    if lower[0] in "aeiou" and not lower.startswith(("uni", "use", "usu", "eu", "one", "once")):
        return "an " + phrase
    return "a " + phrase


def _number(n: int) -> str:
    """1 -> 'one', 42 -> 'forty-two' (0 <= n < 100)."""
    if n < 20:
        return NUMBERS[n]
    tens, ones = divmod(n, 10)
    return TENS[tens] + ("-" + NUMBERS[ones] if ones else "")


def _cap(sentence: str) -> str:
    """The sentence with its first letter in upper case: 'three cats' -> 'Three cats'."""
    return sentence[0].upper() + sentence[1:]


class Character:
    """A person (or pet) in one story: the name and pronouns stay fixed until the story ends."""

    __slots__ = ("name", "he", "him", "his", "He", "His", "role", "trait")

    def __init__(self, name: str, female: bool, role: str, trait: str):
        self.name, self.role, self.trait = name, role, trait
        self.he, self.him, self.his = ("she", "her", "her") if female else ("he", "him", "his")
        self.He, self.His = self.he.capitalize(), self.his.capitalize()


class StoryTeller:
    """Writes stories from one random stream; each method returns a sentence, a paragraph or a list of them.

    `story()` picks a cast (hero, friend, maybe a pet), a town and a key object, then writes an opening, one of
    twelve arcs, maybe a paragraph of random events, and an ending: one paragraph per line.
    """

    def __init__(self, rng: random.Random):
        self.random = rng.random
        # The order of these tuples is part of the corpus: `pick` draws an index, so reordering them changes
        # the text (bump CORPUS_VERSION in corpus/__init__.py). e_chat is listed twice: it comes up twice as often.
        self.arcs = (
            self.lost_thing,
            self.journey,
            self.making,
            self.storm,
            self.market,
            self.quarrel,
            self.lesson,
            self.noise,
            self.hurt_animal,
            self.race,
            self.letter,
            self.cooking,
        )
        self.events = (
            self.e_handle,
            self.e_animal,
            self.e_weather,
            self.e_feeling,
            self.e_food,
            self.e_count,
            self.e_smell,
            self.e_walk,
            self.e_creature,
            self.e_together,
            self.e_memory,
            self.e_habit,
            self.e_describe,
            self.e_wish,
            self.e_give,
            self.e_price,
            self.e_age,
            self.e_could,
            self.e_clothes,
            self.e_chat,
            self.e_chat,
            self.e_why,
            self.e_busy,
            self.e_time,
            self.e_did_not,
            self.e_crowd,
            self.e_tend,
            self.e_while,
            self.e_where,
            self.e_garden,
            self.e_tree,
            self.e_ouch,
            self.e_sky,
            self.e_ride,
        )

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

    # -- phrases --------------------------------------------------------------------------------------
    def character(self, *avoid: Character) -> Character:
        """A new character whose name differs from those in `avoid` (the cast so far)."""
        female = self.chance(0.5)
        name, taken = "", {c.name for c in avoid}
        while not name or name in taken:
            name = self.pick(FEMALE_NAMES if female else MALE_NAMES)
        return Character(name, female, self.common(ROLE), self.common(TRAITS))

    def full_name(self, c: Character) -> str:  # "Mira" or "Mira Pemberton", for a first mention
        return f"{c.name} {self.pick(SURNAMES)}" if self.chance(0.5) else c.name

    def thing(self) -> str:  # "the brass key" / "the key"
        i = int(len(OBJ) * self.random() ** 2)
        return OBJ[i] if self.chance(0.5) else f"{self.common(OBJECT_ADJECTIVES)} {OBJ[i]}"

    def some(self, singular: Sequence[str], plural: Sequence[str], lo: int = 2, hi: int = 12) -> str:
        """A count in words and the noun agreeing with it: "three apples", "one apple"."""
        i, n = int(len(singular) * self.random() ** 2), self.between(lo, hi)
        return f"{_number(n)} {singular[i] if n == 1 else plural[i]}"

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

    # -- a story ---------------------------------------------------------------------------------------
    def story(self) -> str:
        self.h = self.character()
        self.f = self.character(self.h)
        self.town = self.pick(TOWN_STARTS) + self.pick(TOWN_ENDS)
        self.obj = self.common(OBJ)  # the story's key object
        self.pet = None
        if self.chance(0.35):
            self.pet = Character(self.pick(PET_NAMES), self.chance(0.5), self.common(PET), "")
        paragraphs = [self.opening()]
        paragraphs += self.pick(self.arcs)()
        if self.chance(0.5):
            paragraphs.append(self.event_paragraph(1, 3))
        paragraphs.append(self.ending())
        return "\n".join(paragraphs)

    def event_paragraph(self, lo: int, hi: int) -> str:
        return " ".join(self.pick(self.events)() for _ in range(self.between(lo, hi)))

    def then_events(self, text: str, lo: int, hi: int) -> str:
        """`text` followed by lo..hi event sentences in the same paragraph."""
        events = self.event_paragraph(lo, hi)
        return f"{text} {events}" if events else text

    def opening(self) -> str:
        h, f, r = self.h, self.f, self.random()
        home = f"{_a(self.common(SIZES))} {self.common(HOMES)} {self.pick(NEAR)} the {self.place()}"
        if r < 0.25:
            first = f"{self.common(LONG_AGO)}, {_a(h.trait + ' ' + h.role)} named {self.full_name(h)} lived in {home}."
        elif r < 0.5:
            first = f"{h.name} was {_a(h.trait + ' ' + h.role)} who lived in {home} in {self.town}."
        elif r < 0.75:
            first = (
                f"In the {self.common(PLACE_ADJECTIVES)} town of {self.town}, there lived {_a(h.role)} called {h.name}."
            )
        else:
            morning = self.pick(["One morning", "Early one morning", f"One {self.pick(SEASONS)} morning"])
            first = f"{morning}, {h.name} the {h.role} woke up early in {self.town}."
        r = self.random()
        if r < 0.35:
            second = f"{h.His} best friend was {_a(f.role)} named {f.name}."
        elif r < 0.65:
            second = f"{f.name}, {_a(f.trait)} {f.role}, lived next door."
        else:
            second = f"Every {self.pick(DAYS)}, {h.he} visited {h.his} friend {f.name}, who worked as {_a(f.role)}."
        parts = [first, second]
        if self.pet:
            parts.append(
                f"{h.He} had {_a(self.common(TRAITS) + ' ' + self.pet.role)} named {self.pet.name}, "
                f"who followed {h.him} everywhere."
            )
        if self.chance(0.5):
            parts.append(
                f"{h.He} was {h.trait} and {self.common(TRAITS)}, and {h.he} loved "
                f"{self.common(OBJS) if self.chance(0.5) else self.common(FOODS_PL)}."
            )
        return " ".join(parts)

    def ending(self) -> str:
        h, f, r = self.h, self.f, self.random()
        if r < 0.2:
            return f"From that day on, {h.name} and {f.name} were the best of friends."
        if r < 0.35:
            return f"That night, {h.name} slept {self.common(ADVERBS)}, dreaming of {self.common(OBJS)}."
        if r < 0.5:
            return f"{h.name} smiled. It had been {_a(self.common(QUALITIES))} day."
        if r < 0.65:
            return f"Years later, {h.name} still told the story of the {self.common(QUALITIES)} {self.obj}."
        if r < 0.8:
            where = f"{self.pick(ON_FURNITURE)} the {self.common(FURN)}"
            return f"And the {self.obj} stayed {where} for many years."
        if r < 0.9:
            return f"{h.name} never forgot that {self.pick(SEASONS)} in {self.town}."
        return "The end."

    # -- story arcs: each returns a list of paragraphs -------------------------------------------------
    def lost_thing(self) -> list[str]:
        h, f, obj = self.h, self.f, self.obj
        finder = self.pet if self.pet and self.chance(0.5) else f
        spots = [f"{self.pick(ON_FURNITURE)} the {self.common(FURN)}" for _ in range(3)]
        return [
            f"{self.when()}, {h.name} could not find {h.his} {obj}. {h.He} looked {spots[0]} and {spots[1]}, "
            f"but it was not there.",
            self.line(h, f"Have you seen my {obj}", "?"),
            self.line(f, f"No, but I will help you look, {h.name}"),
            self.then_events(f"They searched the {self.place()} and the {self.place()}.", 1, 3),
            f"At last, {finder.name} found the {obj} {spots[2]}.",
            self.line(h, f"Thank you, {finder.name}", "!"),
        ]

    def journey(self) -> list[str]:
        h, f = self.h, self.f
        dest = self.pick(TOWN_STARTS) + self.pick(TOWN_ENDS)
        miles = self.between(2, 60)
        food = self.common(FOOD_MASS)
        stranger = self.character(h, self.f)
        return [
            f"{h.name} wanted to visit {dest}, which was {_number(miles)} miles away. {h.He} packed "
            f"some {food}, {_a(self.thing())} and {h.his} {self.obj} in a bag.",
            self.line(f, "Can I come with you", "?"),
            self.line(h, f"Of course, {f.name}. It is a long way to {dest}"),
            self.then_events(
                f"They {self.common(TRAVEL)[PAST]} along the {self.place()} for {_number(self.between(2, 9))} hours.",
                1,
                3,
            ),
            f"On the way, they met {_a(stranger.trait + ' ' + stranger.role)} named {self.full_name(stranger)}.",
            self.line(stranger, f"Where are you going with that {self.obj}", "?"),
            self.line(h, f"We are going to {dest}"),
            f"When they finally reached {dest}, the sun was {self.pick(['rising', 'setting', 'high'])} "
            f"and the streets were {self.common(PLACE_ADJECTIVES)}.",
        ]

    def making(self) -> list[str]:
        h, f = self.h, self.f
        event = f"{self.common(EVENT_KINDS)} {self.common(EVENTS)}"
        days = self.between(2, 14)
        material = self.common(MATERIALS)
        verb = self.common(HANDLE)
        return [
            f"The {event} was {_number(days)} days away, and {h.name} wanted to make "
            f"{_a(self.common(OBJECT_ADJECTIVES) + ' ' + self.obj)} for it. {h.He} gathered {material}, "
            f"{self.common(MATERIALS)} and {self.common(MATERIALS)}.",
            self.then_events(f"Every evening {h.he} worked in {h.his} {self.common(HOMES)}.", 1, 2),
            f"Then, {self.some(('day',), ('days',), 1, days - 1)} before the {event}, {h.he} ran out of {material}.",
            self.line(h, "What will I do now", "?"),
            self.line(f, f"I have some {material}. You can {verb[BASE]} it with mine"),
            f"Together they finished the {self.obj}. At the {event}, everyone said it was the "
            f"{self.pick(['best', 'finest', 'most beautiful', 'strangest'])} {self.obj} they had ever "
            f"{self.pick(['seen', 'held', 'touched'])}.",
        ]

    def storm(self) -> list[str]:
        h, f = self.h, self.f
        things = self.common(OBJS)
        return [
            f"One {self.pick(SEASONS)} evening, {_a(self.pick(['great', 'terrible', 'sudden', 'wild']))} "
            f"storm came over {self.town}. The wind shook the {self.common(PLACE)} and the rain "
            f"{self.pick(['beat', 'drummed', 'hammered', 'pattered'])} on the roof.",
            self.line(f, f"Are you {self.pick(['scared', 'afraid', 'frightened'])}, {h.name}", "?"),
            self.line(h, f"A little. I do not like the {self.pick(SOUNDS)} of the wind"),
            self.event_paragraph(1, 3),
            f"In the morning, {self.some(OBJ, OBJS, 2, 30)} lay in the {self.place()}, and the "
            f"{self.common(PLACE)} was {self.pick(['flooded', 'broken', 'covered in leaves', 'gone'])}.",
            f"{h.name} and {f.name} spent the whole day picking up {things}.",
        ]

    def market(self) -> list[str]:
        h = self.h
        seller = self.character(h, self.f)
        price = self.between(2, 40)
        goods = self.some(FOOD, FOODS_PL, 3, 20)
        return [
            f"On {self.pick(DAYS)}, {h.name} went to the market in {self.town} with {goods}.",
            f"There {h.he} saw {_a(self.common(OBJECT_ADJECTIVES) + ' ' + self.obj)} at the stall of "
            f"{_a(seller.role)} named {self.full_name(seller)}.",
            self.line(h, f"How much is the {self.obj}", "?"),
            self.line(seller, f"{_cap(_number(price))} coins, or your {goods.split(' ', 1)[1]}"),
            self.line(h, f"I only have {_number(self.between(1, price - 1))} coins"),
            f"In the end, {h.name} gave {seller.name} the {goods.split(' ', 1)[1]} and {price // 2} coins, "
            f"and carried the {self.obj} home {self.common(ADVERBS)}.",
        ]

    def quarrel(self) -> list[str]:
        h, f = self.h, self.f
        return [
            f"{h.name} and {f.name} argued about the {self.obj}. {f.name} said it was "
            f"{self.common(QUALITIES)}, but {h.name} said it was {self.common(QUALITIES)}.",
            self.line(f, "You never listen to me", "!"),
            self.line(h, f"And you always {self.common(HANDLE)[BASE]} my {self.common(OBJ)}", "!"),
            self.then_events(
                f"{f.name} went home and did not {self.pick(['speak', 'talk', 'play'])} with "
                f"{h.name} for {_number(self.between(2, 7))} days.",
                1,
                2,
            ),
            f"The next morning, {h.name} {self.common(TRAVEL)[PAST]} to {f.name}'s {self.common(HOMES)} "
            f"with {_a(self.common(FOOD))}.",
            self.line(h, "I am sorry. I was wrong"),
            self.line(f, f"I am sorry too, {h.name}"),
        ]

    def lesson(self) -> list[str]:
        h = self.h
        skill = self.common(SKILL)
        teacher = self.character(h, self.f)
        weeks = self.between(2, 12)
        return [
            f"{h.name} wanted to learn how to {skill}. {h.He} asked {_a(teacher.trait)} {teacher.role} "
            f"named {self.full_name(teacher)} to teach {h.him}.",
            self.line(teacher, "First you must practice every day"),
            f"{h.name} practiced every day for {_number(weeks)} weeks. At first {h.he} was "
            f"{self.common(EMOTIONS)}, and {h.his} {self.obj} kept {self.pick(SETBACKS)}.",
            self.line(h, f"I will never learn to {skill}", "!"),
            self.line(teacher, f"You are {self.pick(DEGREES)} {self.common(TRAITS)}. Try again tomorrow"),
            f"In the {ORDINALS[min(weeks, 12) - 1]} week, {h.name} could finally {skill}, and "
            f"{h.he} felt {self.common(EMOTIONS)}.",
        ]

    def noise(self) -> list[str]:
        h, f = self.h, self.f
        sound, place = self.common(SOUNDS), self.place()
        animal = int(len(ANIMAL) * self.random() ** 2)
        return [
            f"Every night, {h.name} heard a strange {sound} coming from the {place}.",
            self.line(h, f"What is that {sound}", "?"),
            self.line(f, f"Maybe it is {_a(self.common(ANIMAL))}. Or maybe it is the {self.common(OBJ)}"),
            self.then_events(
                f"So one night they {self.common(TRAVEL)[PAST]} to the {place} with {_a(self.common(OBJ))}.", 0, 2
            ),
            f"Behind the {self.common(FURN)} they found {self.some(ANIMAL, ANIMALS_PL, 1, 6)} and "
            f"{_a(ANIMAL[animal])} {self.common(DO)[ING]} in the dark.",
            self.line(f, f"So that was the {sound}", "!"),
        ]

    def hurt_animal(self) -> list[str]:
        h = self.h
        animal, part = self.common(ANIMAL), self.common(BODY)
        return [
            f"On the way to the {self.place()}, {h.name} found {_a(self.common(SIZES) + ' ' + animal)} "
            f"with a hurt {part}.",
            self.line(h, f"Poor little {animal}. Let me {self.pick(TEND)[BASE]} you"),
            f"{h.He} carried the {animal} home and made a bed for it in {_a(self.common(CONTAINERS))}. "
            f"{h.He} gave it some {self.common(FOOD_MASS)} and {self.some(FOOD, FOODS_PL, 2, 9)}.",
            self.event_paragraph(1, 2),
            f"After {_number(self.between(2, 20))} days, the {part} had {self.pick(['healed', 'mended'])}, "
            f"and the {animal} {self.common(TRAVEL)[PAST]} away into the {self.place()}.",
        ]

    def race(self) -> list[str]:
        h, f = self.h, self.f
        place = self.place()
        runners = self.between(3, 12)
        place_h, place_f = self.between(1, runners), self.between(1, runners - 1)
        place_f += place_f >= place_h  # two runners never share a place
        return [
            f"There was a race to the {place} in {self.town}, and {_number(runners)} people joined it.",
            self.line(f, f"I will win this race, {h.name}", "!"),
            self.line(h, "We will see about that"),
            self.then_events(
                f"They {self.common(TRAVEL)[PAST]} past the {self.place()} and over the {self.place()}.", 0, 2
            ),
            f"{h.name} came {ORDINALS[place_h - 1]}, and {f.name} came {ORDINALS[place_f - 1]}.",
            self.line(h if place_h <= place_f else f, "Next year I will be even faster"),
        ]

    def letter(self) -> list[str]:
        h = self.h
        relative, town = self.common(RELATIVES), self.pick(TOWN_STARTS) + self.pick(TOWN_ENDS)
        return [
            f"{self.when()}, {h.name} received a letter from {h.his} {relative} in {town}.",
            f'It said: "Dear {h.name}, I am sending you my old {self.obj}. Please '
            f"{self.common(HANDLE)[BASE]} it every {self.pick(DAYS)}. The {self.common(PLACE)} here is "
            f"{self.common(PLACE_ADJECTIVES)} and the {self.common(ANIMALS_PL)} are "
            f'{self.common(QUALITIES)}. With love, your {relative}."',
            f"{h.name} read the letter {_number(self.between(2, 9))} times.",
            self.event_paragraph(1, 2),
        ]

    def cooking(self) -> list[str]:
        h, f = self.h, self.f
        food = self.common(FOOD)
        relative = self.common(RELATIVES)
        return [
            f"{h.name} decided to make {_a(self.common(TASTES) + ' ' + food)} for {h.his} {relative}. "
            f"{h.He} needed {self.some(FOOD, FOODS_PL)}, some {self.common(FOOD_MASS)} and a little "
            f"{self.common(FOOD_MASS)}.",
            self.line(f, f"Can I help you {self.common(COOK)[BASE]} the {self.common(FOODS_PL)}", "?"),
            self.line(h, f"Yes, please. Then we can {self.common(COOK)[BASE]} the {self.common(FOOD_MASS)}"),
            f"The {food} was {self.pick(['ready', 'finished', 'done'])} by {self.pick(PARTS_OF_DAY)}. "
            f"It smelled {self.common(TASTES)} and tasted {self.common(TASTES)}.",
            self.line(self.h, f"My {relative} will love it", "!"),
        ]

    # Single event sentences vary the middle of a story; `self.events` lists them, in a fixed order.
    # -- events in the setting: weather, sky, smells, the people of the town ---------------------------
    def e_weather(self) -> str:
        r = self.random()
        if r < 0.25:
            return f"Outside, the rain {self.pick(['fell', 'stopped', 'kept falling', 'turned to snow'])}."
        if r < 0.5:
            return f"The wind {self.pick(WIND)} over the {self.place()}."
        if r < 0.75:
            return f"It was {_a(self.pick(WEATHER))} {self.pick(PARTS_OF_DAY)} in {self.town}."
        return f"The sun {self.pick(['shone', 'set', 'rose', 'came out'])} over the {self.place()}."

    def e_sky(self) -> str:
        return (
            f"That {self.pick(PARTS_OF_DAY)}, the {self.common(SKY)} over {self.town} looked {self.common(QUALITIES)}."
        )

    def e_smell(self) -> str:
        return f"The {self.place()} smelled of {self.common(FOOD_MASS)} and {self.common(MATERIALS)}."

    def e_time(self) -> str:
        return (
            f"At {_number(self.between(1, 12))} o'clock, the {self.common(ROLE)} "
            f"{self.common(HANDLE)[PAST]} the {self.common(OBJS)}."
        )

    def e_crowd(self) -> str:
        return f"{_cap(self.some(ROLE, ROLES_PL, 2, 9))} were {self.common(DO)[ING]} in the {self.place()}."

    # -- events with animals and plants ----------------------------------------------------------------
    def e_animal(self) -> str:
        verbs = TRAVEL if self.chance(0.5) else DO
        return f"The {self.common(ANIMAL)} {self.common(verbs)[PAST]} {self.common(ADVERBS)}."

    def e_creature(self) -> str:
        return (
            f"{_cap(_a(self.common(ANIMAL_ADJECTIVES)))} {self.common(ANIMAL)} was "
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
        return f"{c.name} was {_number(self.between(6, 90))} years old."

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
            f"{self.who(c)} {self.common(COOK)[PAST]} {_a(self.common(FOOD))} and "
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
        what = f"{_number(n)} {OBJ[i]}" if n == 1 else f"{_number(n)} {OBJS[i]}"
        return f"On the {self.common(FURN)} there {'was' if n == 1 else 'were'} {what}."

    def e_price(self) -> str:
        return f"{self.who(self.h)} paid {self.between(2, 99)} coins for {_a(self.thing())} at the {self.place()}."

    def e_memory(self) -> str:
        c = self.h
        return (
            f"{self.who(c)} remembered the {self.pick(SEASONS)} when {c.he} had "
            f"{self.common(HANDLE)[PARTICIPLE]} {_a(self.thing())}."
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
            said = self.line(a, f"I have never {done} {_a(self.thing())} like this")
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


def check_num_chars(num_chars: int) -> None:
    """Raise ValueError unless num_chars is a whole number >= 0 (a bool or a float is refused)."""
    if not isinstance(num_chars, int) or isinstance(num_chars, bool) or num_chars < 0:
        raise ValueError(f"num_chars must be a non-negative int, got {num_chars!r}")


def generate_corpus(num_chars: int, seed: int = 0) -> str:
    """Return exactly `num_chars` characters of generated stories (ASCII), separated by blank lines.

    The output depends only on (num_chars, seed), and a shorter corpus is a prefix of a longer one.
    """
    check_num_chars(num_chars)
    teller = StoryTeller(random.Random(seed))
    stories: list[str] = []
    total = 0
    while total < num_chars:
        story = teller.story()
        total += len(story) + (2 if stories else 0)  # 2 = the "\n\n" between stories
        stories.append(story)
    return "\n\n".join(stories)[:num_chars]
