"""The word lists recipes are made of: fruit and vegetables, measured ingredients, dishes, kitchen things.

Most words also occur in the stories (minigpt/corpus/words.py), so the story tokenizer knows them. Commoner
words come first, as there. Fruit and vegetables are "singular" or "singular/plural"; a measured ingredient
is "name:unit" (1 cup of milk, 2 cups of milk, 2 pinches of salt; a '-' in a name becomes a space).
"""

from minigpt.corpus.words import _nouns

# Sweet dishes are made with fruit, savoury ones with vegetables.
FRUITS = """apple pear plum cherry/cherries strawberry/strawberries raspberry/raspberries
blueberry/blueberries blackberry/blackberries peach/peaches apricot banana lemon orange fig
gooseberry/gooseberries cranberry/cranberries quince nectarine mango/mangoes melon lime
tangerine pineapple coconut grapefruit""".split()
VEGETABLES = """potato/potatoes carrot onion leek tomato/tomatoes mushroom pumpkin parsnip turnip
cabbage cauliflower squash/squashes marrow beet radish/radishes cucumber artichoke gourd
pepper""".split()

FRUIT, FRUITS_PL = _nouns(FRUITS)
VEGETABLE, VEGETABLES_PL = _nouns(VEGETABLES)

# How a dish is cooked decides its steps: in the oven, in a pot, in a pan, or not at all (chilled).
METHODS = ("oven", "pot", "pan", "cold")
SWEET_DISHES = {
    "oven": "pie tart cake crumble loaf pudding cobbler turnover".split(),
    "pot": "jam compote porridge pudding sauce syrup".split(),
    "pan": "pancake fritter flapjack toast".split(),
    "cold": "salad trifle jelly fool".split(),
}
SAVOURY_DISHES = {
    "oven": "pie tart bake pasty quiche loaf".split(),
    "pot": "soup stew broth sauce hotpot chowder".split(),
    "pan": "fritter omelet hash cake".split(),
    "cold": "salad pickle relish".split(),
}

# The ingredients every dish of a method needs, sweet and savoury: "name:unit".
SWEET_BASES = {
    "oven": "flour:cup butter:spoon sugar:cup".split(),
    "pot": "water:cup sugar:cup".split(),
    "pan": "butter:spoon flour:cup milk:cup".split(),
    "cold": "cream:cup sugar:spoon".split(),
}
SAVOURY_BASES = {
    "oven": "flour:cup butter:spoon salt:pinch".split(),
    "pot": "water:cup salt:pinch".split(),
    "pan": "butter:spoon flour:cup milk:cup".split(),
    "cold": "vinegar:spoon salt:pinch".split(),
}
EGGS = {"oven": (1, 3), "pan": (1, 4)}  # how many eggs, from-to; pot and cold dishes have none

UNITS = {"cup": "cups", "spoon": "spoons", "pinch": "pinches", "handful": "handfuls"}  # singular: plural

# One or two of these give a dish its own taste.
SWEET_EXTRAS = """honey:spoon cinnamon:pinch vanilla:spoon syrup:spoon cocoa:spoon treacle:spoon
jam:spoon marmalade:spoon chocolate:cup yogurt:cup custard:cup caramel:spoon nutmeg:pinch
ginger:pinch lemon-juice:spoon almonds:handful walnuts:handful hazelnuts:handful raisins:handful
oatmeal:cup""".split()
SAVOURY_EXTRAS = """pepper:pinch thyme:pinch sage:pinch parsley:handful mint:handful oregano:pinch
mustard:spoon cheese:cup broth:cup cream:cup spinach:handful kale:handful celery:handful rice:cup
barley:cup garlic:pinch saffron:pinch gravy:cup walnuts:handful chestnuts:handful""".split()

TASTES = {
    True: "sweet sticky golden juicy fresh creamy fluffy buttery gooey soft warm".split(),
    False: "hearty warm spicy smoky fresh creamy crisp tangy rich thick golden".split(),
}

# Kitchen words: a '#' in a preparation is "it" for one fruit or vegetable and "them" for more.
WASH = "wash peel rinse trim".split()
CUT = "cut # in half|cut # into small pieces|slice # thinly|chop # finely|mash #|grate #|dice #".split("|")
BOWLS = "bowl|big bowl|large bowl|mixing bowl|clean bowl|wooden bowl|glass bowl".split("|")
POTS = "pot|big pot|heavy pot|copper pot|saucepan|deep pan".split("|")
PANS = "pan|frying pan|heavy pan|hot pan|griddle|skillet".split("|")
TINS = "round dish|deep dish|baking tin|pie dish|baking tray|greased tin|square tin".split("|")
STIRRING = "gently slowly well carefully".split()
DONE = "golden|brown|firm|crisp|risen|bubbling|golden on top|brown at the edges".split("|")
SERVE_WITH = {
    True: "cream|custard|tea|honey|milk|yogurt|a cup of cocoa|fresh butter".split("|"),
    False: "bread|toast|rice|butter|cheese|fresh bread|a green salad|boiled potatoes".split("|"),
}
KEEP_IN = "cupboard|larder|cellar|jar|tin|cool place".split("|")
COOK_TITLES = {
    True: "Aunt Grandma Granny Cousin Sister Mama".split(),  # female cooks
    False: "Uncle Grandpa Grandad Cousin Brother Papa".split(),
}
