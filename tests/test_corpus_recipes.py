import random
import re

import pytest

from minigpt.corpus import CORPORA, DEFAULT_CORPUS_CHARS, generate_corpus
from minigpt.corpus.recipes import RecipeWriter, generate_recipes
from minigpt.tokenizer import get_tokenizer

HEADER = re.compile(r"Recipe: [a-z ]+\nFrom the kitchen of [A-Z][a-z]+( [A-Z][a-z]+)? in [A-Z][a-z]+\. Serves \d\.")
INGREDIENT = re.compile(r"- (\d+) (?:(cup|spoon|pinch|handful)e?s? of )?([a-z ]+)")


def recipes(num_chars: int = 200_000, seed: int = 0) -> list[str]:
    """The complete recipes of a generated corpus (the last one may be cut short, so it is left out)."""
    return generate_corpus(num_chars, seed, kind="recipes").split("\n\n")[:-1]


def sections(recipe: str) -> tuple[list[str], list[str], list[str]]:
    """(ingredient lines, step texts without their numbers, tip lines) of one recipe."""
    lines = recipe.split("\n")
    start, steps_at = lines.index("Ingredients:"), lines.index("Steps:")
    steps = [line.split(". ", 1)[1] for line in lines[steps_at + 1 :] if not line.startswith("Tip: ")]
    return lines[start + 1 : steps_at], steps, [line for line in lines if line.startswith("Tip: ")]


def test_recipes_are_a_built_in_corpus_by_name():
    assert CORPORA["recipes"] is generate_recipes
    assert generate_corpus(5_000, 4, kind="recipes") == generate_recipes(5_000, 4)


def test_same_seed_gives_same_recipes_across_calls_and_other_seed_other_recipes():
    text = generate_recipes(30_000, seed=1)
    assert text == generate_recipes(30_000, seed=1)
    assert text != generate_recipes(30_000, seed=2)
    writer_a, writer_b = RecipeWriter(random.Random(9)), RecipeWriter(random.Random(9))
    assert [writer_a.recipe() for _ in range(20)] == [writer_b.recipe() for _ in range(20)]


@pytest.mark.parametrize("n", [0, 1, 17, 4_999, 33_333])
def test_length_is_exact_and_shorter_is_a_prefix(n):
    assert len(generate_recipes(n, 3)) == n
    assert generate_recipes(40_000, 3).startswith(generate_recipes(n, 3))


def test_bad_num_chars_is_a_clear_error():
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="num_chars"):
            generate_recipes(bad)


def test_every_recipe_has_its_sections_in_order():
    all_recipes = recipes()
    assert len(all_recipes) > 300
    for recipe in all_recipes:
        assert recipe.isascii()
        assert HEADER.match(recipe), recipe
        lines = recipe.split("\n")
        assert lines[2] == "Ingredients:" and "Steps:" in lines, recipe
        ingredients, steps, tips = sections(recipe)
        assert len(ingredients) >= 3 and all(INGREDIENT.fullmatch(line) for line in ingredients), recipe
        numbers = [int(line.split(".")[0]) for line in lines[lines.index("Steps:") + 1 :] if line[0].isdigit()]
        assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 4, recipe  # 1., 2., 3., ...
        assert len(tips) <= 1 and (not tips or lines[-1] == tips[0]), recipe  # a tip comes last


def test_every_ingredient_is_used_in_the_steps_in_the_order_listed():
    for recipe in recipes(100_000, seed=5):
        ingredients, steps, _ = sections(recipe)
        steps_text = " ".join(steps)
        names = [INGREDIENT.fullmatch(line).group(3) for line in ingredients]
        first_use = [re.search(rf"\bthe {name}\b", steps_text) for name in names]
        assert all(first_use), (names, recipe)
        assert [m.start() for m in first_use] == sorted(m.start() for m in first_use), recipe


def test_counts_agree_with_their_nouns_and_pronouns():
    text = "\n\n".join(recipes(seed=6))
    for count, unit in re.findall(r"^- (\d+) (cups?|spoons?|pinch(?:es)?|handfuls?) of ", text, re.M):
        assert (count == "1") == (unit in ("cup", "spoon", "pinch", "handful")), (count, unit)
    for recipe in recipes(60_000, seed=6):
        ingredients, steps, _ = sections(recipe)
        count, _, name = INGREDIENT.fullmatch(ingredients[0]).groups()
        it = "it" if count == "1" else "them"
        prepare = next(step for step in steps if step.startswith(("Wash", "Peel", "Rinse", "Trim")))
        assert re.fullmatch(rf"[A-Z][a-z]+ the {name} and [a-z]+ {it}( [a-z ]+)?\.", prepare), recipe
    assert "Chill for 1 hours" not in text and "1 eggs" not in text


def test_recipes_and_stories_differ_in_form():
    stories = generate_corpus(200_000, 0)
    cookbook = generate_corpus(200_000, 0, kind="recipes")
    for marker in ("\nIngredients:\n", "\nSteps:\n", "\n- ", "\n1. ", "Recipe: "):
        assert marker in cookbook and marker not in stories, marker
    assert '"' in stories and '"' not in cookbook  # stories have dialogue, recipes none
    digits = sum(c.isdigit() for c in cookbook) / len(cookbook)
    assert digits > 10 * sum(c.isdigit() for c in stories) / len(stories)  # quantities come in digits


def test_recipes_reuse_the_story_words_so_the_story_tokenizer_covers_them():
    story_words = set(re.findall(r"[a-z]+", generate_corpus(DEFAULT_CORPUS_CHARS, 0).lower()))
    recipe_words = re.findall(r"[a-z]+", generate_corpus(300_000, 0, kind="recipes").lower())
    assert sum(word in story_words for word in recipe_words) / len(recipe_words) > 0.8  # kitchen words are new
    enc = get_tokenizer("minigpt-8k")
    stories, cookbook = generate_corpus(300_000, 0), generate_corpus(300_000, 0, kind="recipes")
    per_char = [len(enc.encode_ordinary(text)) / len(text) for text in (stories, cookbook)]
    assert per_char[0] < per_char[1] < 0.4  # the new layout costs more tokens a character, but not many more
