"""The story generator: `StoryTeller` writes short stories, `generate_stories` joins them into a corpus.

The text is made to be learnable but not trivial. Inside a story the names, pronouns, home town and key
object stay the same (a model can learn to copy them), sentences follow English agreement (a/an, one
apple / three apples, she ... her / he ... his, was / were), dialogue comes in question-and-answer turns,
and stories follow a dozen recurring arcs. The words in each slot are drawn at random from lists of
several thousand word types (minigpt/corpus/words.py), so there is always something left to predict.

This file holds the plot: the cast, the opening, twelve arcs and the ending. The single sentences it strings
together (phrases and events) are in sentences.py, the random choices in grammar.py.
"""

from __future__ import annotations

import random

from minigpt.corpus.grammar import Character, cap, check_num_chars, in_words, join_pieces, with_article
from minigpt.corpus.sentences import StorySentences
from minigpt.corpus.words import (
    ADVERBS,
    ANIMAL,
    ANIMALS_PL,
    BASE,
    BODY,
    CONTAINERS,
    COOK,
    DAYS,
    DEGREES,
    DO,
    EMOTIONS,
    EVENT_KINDS,
    EVENTS,
    FOOD,
    FOOD_MASS,
    FOODS_PL,
    FURN,
    HANDLE,
    HOMES,
    ING,
    LONG_AGO,
    MATERIALS,
    NEAR,
    OBJ,
    OBJECT_ADJECTIVES,
    OBJS,
    ON_FURNITURE,
    ORDINALS,
    PARTS_OF_DAY,
    PAST,
    PET,
    PET_NAMES,
    PLACE,
    PLACE_ADJECTIVES,
    QUALITIES,
    RELATIVES,
    SEASONS,
    SETBACKS,
    SIZES,
    SKILL,
    SOUNDS,
    TASTES,
    TEND,
    TOWN_ENDS,
    TOWN_STARTS,
    TRAITS,
    TRAVEL,
)

__all__ = ["Character", "StoryTeller", "check_num_chars", "generate_corpus", "generate_stories"]


class StoryTeller(StorySentences):
    """Writes stories from one random stream; each method returns a sentence, a paragraph or a list of them.

    `story()` picks a cast (hero, friend, maybe a pet), a town and a key object, then writes an opening, one of
    twelve arcs, maybe a paragraph of random events, and an ending: one paragraph per line.
    """

    def __init__(self, rng: random.Random):
        super().__init__(rng)
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
        home = f"{with_article(self.common(SIZES))} {self.common(HOMES)} {self.pick(NEAR)} the {self.place()}"
        if r < 0.25:
            first = (
                f"{self.common(LONG_AGO)}, {with_article(h.trait + ' ' + h.role)} named {self.full_name(h)} "
                f"lived in {home}."
            )
        elif r < 0.5:
            first = f"{h.name} was {with_article(h.trait + ' ' + h.role)} who lived in {home} in {self.town}."
        elif r < 0.75:
            first = (
                f"In the {self.common(PLACE_ADJECTIVES)} town of {self.town}, there lived "
                f"{with_article(h.role)} called {h.name}."
            )
        else:
            morning = self.pick(["One morning", "Early one morning", f"One {self.pick(SEASONS)} morning"])
            first = f"{morning}, {h.name} the {h.role} woke up early in {self.town}."
        r = self.random()
        if r < 0.35:
            second = f"{h.His} best friend was {with_article(f.role)} named {f.name}."
        elif r < 0.65:
            second = f"{f.name}, {with_article(f.trait)} {f.role}, lived next door."
        else:
            second = (
                f"Every {self.pick(DAYS)}, {h.he} visited {h.his} friend {f.name}, who worked as "
                f"{with_article(f.role)}."
            )
        parts = [first, second]
        if self.pet:
            parts.append(
                f"{h.He} had {with_article(self.common(TRAITS) + ' ' + self.pet.role)} named {self.pet.name}, "
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
            return f"{h.name} smiled. It had been {with_article(self.common(QUALITIES))} day."
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
            f"{h.name} wanted to visit {dest}, which was {in_words(miles)} miles away. {h.He} packed "
            f"some {food}, {with_article(self.thing())} and {h.his} {self.obj} in a bag.",
            self.line(f, "Can I come with you", "?"),
            self.line(h, f"Of course, {f.name}. It is a long way to {dest}"),
            self.then_events(
                f"They {self.common(TRAVEL)[PAST]} along the {self.place()} for {in_words(self.between(2, 9))} hours.",
                1,
                3,
            ),
            f"On the way, they met {with_article(stranger.trait + ' ' + stranger.role)} named "
            f"{self.full_name(stranger)}.",
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
            f"The {event} was {in_words(days)} days away, and {h.name} wanted to make "
            f"{with_article(self.common(OBJECT_ADJECTIVES) + ' ' + self.obj)} for it. {h.He} gathered {material}, "
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
            f"One {self.pick(SEASONS)} evening, {with_article(self.pick(['great', 'terrible', 'sudden', 'wild']))} "
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
            f"There {h.he} saw {with_article(self.common(OBJECT_ADJECTIVES) + ' ' + self.obj)} at the stall of "
            f"{with_article(seller.role)} named {self.full_name(seller)}.",
            self.line(h, f"How much is the {self.obj}", "?"),
            self.line(seller, f"{cap(in_words(price))} coins, or your {goods.split(' ', 1)[1]}"),
            self.line(h, f"I only have {in_words(self.between(1, price - 1))} coins"),
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
                f"{h.name} for {in_words(self.between(2, 7))} days.",
                1,
                2,
            ),
            f"The next morning, {h.name} {self.common(TRAVEL)[PAST]} to {f.name}'s {self.common(HOMES)} "
            f"with {with_article(self.common(FOOD))}.",
            self.line(h, "I am sorry. I was wrong"),
            self.line(f, f"I am sorry too, {h.name}"),
        ]

    def lesson(self) -> list[str]:
        h = self.h
        skill = self.common(SKILL)
        teacher = self.character(h, self.f)
        weeks = self.between(2, 12)
        return [
            f"{h.name} wanted to learn how to {skill}. {h.He} asked {with_article(teacher.trait)} {teacher.role} "
            f"named {self.full_name(teacher)} to teach {h.him}.",
            self.line(teacher, "First you must practice every day"),
            f"{h.name} practiced every day for {in_words(weeks)} weeks. At first {h.he} was "
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
            self.line(f, f"Maybe it is {with_article(self.common(ANIMAL))}. Or maybe it is the {self.common(OBJ)}"),
            self.then_events(
                f"So one night they {self.common(TRAVEL)[PAST]} to the {place} with {with_article(self.common(OBJ))}.",
                0,
                2,
            ),
            f"Behind the {self.common(FURN)} they found {self.some(ANIMAL, ANIMALS_PL, 1, 6)} and "
            f"{with_article(ANIMAL[animal])} {self.common(DO)[ING]} in the dark.",
            self.line(f, f"So that was the {sound}", "!"),
        ]

    def hurt_animal(self) -> list[str]:
        h = self.h
        animal, part = self.common(ANIMAL), self.common(BODY)
        return [
            f"On the way to the {self.place()}, {h.name} found {with_article(self.common(SIZES) + ' ' + animal)} "
            f"with a hurt {part}.",
            self.line(h, f"Poor little {animal}. Let me {self.pick(TEND)[BASE]} you"),
            f"{h.He} carried the {animal} home and made a bed for it in {with_article(self.common(CONTAINERS))}. "
            f"{h.He} gave it some {self.common(FOOD_MASS)} and {self.some(FOOD, FOODS_PL, 2, 9)}.",
            self.event_paragraph(1, 2),
            f"After {in_words(self.between(2, 20))} days, the {part} had {self.pick(['healed', 'mended'])}, "
            f"and the {animal} {self.common(TRAVEL)[PAST]} away into the {self.place()}.",
        ]

    def race(self) -> list[str]:
        h, f = self.h, self.f
        place = self.place()
        runners = self.between(3, 12)
        place_h, place_f = self.between(1, runners), self.between(1, runners - 1)
        place_f += place_f >= place_h  # two runners never share a place
        return [
            f"There was a race to the {place} in {self.town}, and {in_words(runners)} people joined it.",
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
            f"{h.name} read the letter {in_words(self.between(2, 9))} times.",
            self.event_paragraph(1, 2),
        ]

    def cooking(self) -> list[str]:
        h, f = self.h, self.f
        food = self.common(FOOD)
        relative = self.common(RELATIVES)
        return [
            f"{h.name} decided to make {with_article(self.common(TASTES) + ' ' + food)} for {h.his} {relative}. "
            f"{h.He} needed {self.some(FOOD, FOODS_PL)}, some {self.common(FOOD_MASS)} and a little "
            f"{self.common(FOOD_MASS)}.",
            self.line(f, f"Can I help you {self.common(COOK)[BASE]} the {self.common(FOODS_PL)}", "?"),
            self.line(h, f"Yes, please. Then we can {self.common(COOK)[BASE]} the {self.common(FOOD_MASS)}"),
            f"The {food} was {self.pick(['ready', 'finished', 'done'])} by {self.pick(PARTS_OF_DAY)}. "
            f"It smelled {self.common(TASTES)} and tasted {self.common(TASTES)}.",
            self.line(self.h, f"My {relative} will love it", "!"),
        ]


def generate_stories(num_chars: int, seed: int = 0) -> str:
    """Return exactly `num_chars` characters of generated stories (ASCII), separated by blank lines.

    The output depends only on (num_chars, seed), and a shorter corpus is a prefix of a longer one.
    """
    check_num_chars(num_chars)
    return join_pieces(num_chars, StoryTeller(random.Random(seed)).story)


generate_corpus = generate_stories  # the name from before there was a second corpus
