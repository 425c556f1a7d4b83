"""A built-in corpus: short stories generated from a small English grammar, so training needs no download.

The text is made to be learnable but not trivial. Inside a story the names, pronouns, home town and key
object stay the same (a model can learn to copy them), sentences follow English agreement (a/an, one
apple / three apples, she ... her / he ... his, was / were), dialogue comes in question-and-answer turns,
and stories follow a dozen recurring arcs. The words in each slot are drawn at random from lists of
several thousand word types, so there is always something left to predict.

Only `random.Random(seed).random()` is used: Python guarantees that sequence across versions (it does not
guarantee `choice` or `shuffle`), so the same seed gives the same text everywhere.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from minigpt.files import write_atomically

DEFAULT_CORPUS_CHARS = 5_000_000
CORPUS_VERSION = 2  # bump when the grammar changes: the cache file name carries it

# ---------------------------------------------------------------------------------------------------------
# Word lists. Commoner words come first: `_StoryTeller.common` favours the front of a list.
# Nouns are "singular" or "singular/plural"; verbs are "base" or "base:past:ing:participle" with empty
# fields derived by the usual English rules (see _verb_forms).
# ---------------------------------------------------------------------------------------------------------

FEMALE_NAMES = """Mira Anna Lena Rosa Ivy Nora Clara Ella Lily Maya Zoe Ada Iris Hazel Ruby Greta
Tessa Wren Fern Olive Mabel Edith Agnes Beatrix Cora Daisy Elsie Flora Gwen Hattie Ingrid Juno
Kira Lottie Maeve Nell Opal Pearl Rhea Sadie Tilly Una Vera Willa Yara Zelda Alma Bella Celia Dora
Esme Fay Gemma Hana Isla Jade Kate Lucy Molly Nina Orla Pia Rita Sara Tara Uma Viola Wendy Amelia
Bianca Carmen Delia Elena Freya Gloria Helena Imogen Josie Lara Marta Noemi Olga Paula Rosalind
Selma Thea Ursula Violet Winifred Yvonne Astrid Brigid Dagny Eliza Frida Hilda Ines Jolene Kaya
Leona Marigold Nadia Odette Petra Renata Sigrid Talia Valentina Wilma Ximena Zara Aurora Birdie
Constance Dorothy Eleanor Florence Georgia Harriet Juniper Louisa Matilda Penelope Rosemary Sylvia
Theodora Winnie Poppy Primrose Maisie Posy Quinn""".split()

MALE_NAMES = """Tobin Leo Sam Finn Oscar Hugo Felix Jonah Arlo Milo Otto Ben Theo Jack Max Noah
Eli Jasper Rufus Silas Abel Bram Cyril Dmitri Edwin Frank Gideon Harold Ivan Jude Kasper Lionel
Marcus Ned Osric Percy Quentin Ralph Simon Tomas Ulric Victor Walter Xavier Yusuf Zane Alfie Basil
Cedric Dexter Emil Fergus Gus Henry Isaac Joel Kofi Lars Magnus Nils Owen Pablo Rory Stellan Tariq
Vance Wesley Albert Bruno Caspar Declan Ezra Francis George Horace Igor Julian Kenji Luca Mateo
Nico Oliver Peter Reuben Sebastian Tristan Vincent William Angus Barnaby Clement Dorian Elliot
Florian Gilbert Hector Ignatius Jerome Leopold Mortimer Norbert Orville Phineas Roland Septimus
Thaddeus Virgil Wilbur Ambrose Benedict Cornelius Desmond Erasmus Fitz Gregor Hamish Lucas Morris
Nathan Patrick Rupert Stanley Timothy Arthur""".split()

PET_NAMES = """Biscuit Pepper Button Whiskers Patch Muffin Pickle Noodle Socks Clover Maple Pebble
Ginger Smudge Bramble Sprout Toffee Marble Nutmeg Waffle Crumb Domino Fudge Mittens Pudding Rascal
Scout Shadow Sparky Tuppence Wiggles Ziggy Barley Cocoa Dumpling Flapjack Honey Inky Jellybean
Kipper Lentil Mango Pip Bean""".split()

SURNAMES = """Abbott Ashdown Barlow Bennett Blackwood Brightwater Burke Carter Chandler Cooper
Crane Crowley Dalton Darrow Dunmore Ellis Everett Fairweather Fenwick Fletcher Forrester Foster
Gable Garland Goodwin Graves Greenleaf Hale Hadley Hardy Harper Hawthorne Hayward Holloway
Honeycutt Hooper Hughes Ingram Jarvis Keats Kemp Kettleby Larkin Lawson Lockwood Lowell Mallory
Marlowe Mayhew Meadows Merriweather Morrow Nettleton Norwood Oakley Osgood Paxton Pemberton
Penrose Pickett Quill Radcliffe Ramsey Redfern Rowe Sallow Sawyer Shelley Spencer Stirling Stokes
Summers Sutton Tanner Thatcher Thorne Tindall Trent Tucker Underhill Upton Vale Vaughn Wainwright
Walsh Warren Webb Wells Whitlock Wilde Winslow Woodward Yardley Yates Applegate Birdwhistle Cobble
Dimble Fiddlewick Gooseberry Hobbs Inkpen Jolliffe Knapp Lumley Mudge Nutter Oddie Puddifoot
Quimby Rumbold Scrivener Tumbleton Umber Vickery Whistler Yelverton Bagshaw Cresswell Dunthorne
Eastwood Frobisher Gilchrist Hartley Ironside""".split()

# Town names are made by joining a start and an end: Ashford, Millbrook, Ravenmere, ...
TOWN_STARTS = """Ash Oak Elm Mill Stone Fern Clay Thorn Bram Hazel Moss Red Green White Black Fox
Wolf Bear Crow Raven Swan Heron Apple Pear Cherry Birch Willow Maple Pine Cedar Rock Salt Sand
Frost Rain Wind Sun Moon Star Gold Silver Copper Iron Honey Bell Cross Long High Low North South
East West Deep Kings Queens Lark Fen Marsh Amber Briar Hollin Rose""".split()
TOWN_ENDS = """ford ton ville wick field bury dale brook wood stead haven mere moor port gate hill
ridge bridge by thorpe ham ley well cliff stow bourne hollow crest""".split()

ROLES = """baker farmer weaver potter miller blacksmith carpenter tailor painter sailor gardener
shepherd beekeeper cook teacher doctor nurse librarian clockmaker candlemaker glassblower merchant
innkeeper mapmaker musician singer dancer juggler storyteller poet woodcutter fisher farrier
inventor scientist astronomer explorer pilot builder mason cobbler jeweler grocer butcher brewer
cheesemaker seamstress barber ranger guard captain mayor judge artist sculptor student apprentice
traveler peddler tinker fiddler drummer piper acrobat clown magician knitter toymaker bookbinder
printer shoemaker lamplighter rope-maker wheelwright herbalist shopkeeper chemist engineer
architect botanist beekeeper goatherd courier messenger watchman/watchmen gatekeeper
lighthouse-keeper chimney-sweep dressmaker hatter basket-weaver boatbuilder fishmonger greengrocer
milkmaid stonecutter""".split()

RELATIVES = """mother father grandmother grandfather aunt uncle cousin sister brother neighbor
friend teacher grandma grandpa godmother godfather niece nephew""".split()

OBJECTS = """lantern key map book basket hat box cup bowl kite drum bell jar bucket rope candle
mirror clock compass ring coin button ribbon blanket letter pencil ball shell stone feather bottle
bag umbrella kettle spoon fork knife/knives plate pot pan hammer saw nail brush broom watch
telescope necklace bracelet thread needle pillow quilt envelope stamp pen notebook paintbrush
marble puzzle doll toy whistle leaf/leaves flower seed acorn pinecone glove mitten sock sweater
apron belt backpack suitcase wallet purse comb teapot mug tray lamp shovel rake wheelbarrow sled
bicycle wagon cart paddle oar net hook sail anchor flag banner crown shield wand scroll chest
trunk locket brooch thimble spindle flute violin harp fiddle trumpet horn recorder banjo
tambourine harmonica accordion guitar cello ladder chair stool lunchbox picnic-basket jug pitcher
vase flowerpot watering-can birdhouse birdcage fishing-rod tent sleeping-bag magnet lens spyglass
hourglass sundial globe abacus ruler stapler eraser crayon chalk slate sketchbook diary journal
album photograph postcard parcel package present gift card ticket badge medal trophy pin rosette
ornament figurine statue carving puppet marionette top rattle spinning-top pinwheel balloon torch
matchbox candlestick snuffbox music-box jewelry-box sewing-box toolbox tin can lid cork funnel
sieve ladle whisk rolling-pin grater saucepan skillet cauldron bellows anvil chisel file drill
wrench screwdriver trowel hoe pitchfork sickle scythe axe hatchet mallet crowbar lever pulley
wheel spoke gear spring bolt screw hinge latch padlock chain bracket crate barrel sack pouch
satchel knapsack bundle cushion rug mat doormat curtain towel handkerchief napkin tablecloth
bedspread shawl cloak cape veil bonnet cap beret helmet hood mask fan parasol walking-stick cane
crutch saddle bridle harness lasso whip collar leash horseshoe stirrup saucer goblet tankard flask
canteen quill inkpot inkwell ledger almanac atlas dictionary storybook songbook cookbook bookmark
paperweight doorknob doorbell keyring mousetrap weathervane windchime kaleidoscope microscope
magnifying-glass barometer thermometer metronome tuning-fork xylophone bagpipe ocarina kazoo
mandolin lute lyre zither bugle cornet clarinet oboe bassoon tuba piccolo triangle cymbal gong
rocking-horse hobby-horse teddy-bear jigsaw boomerang slingshot whirligig skipping-rope hoop
skittle checker chessboard playing-card pendant tiara earring anklet cufflink hairpin barrette
bootlace shoelace buckle colander strainer teaspoon tablespoon cleaver mortar pestle churn
breadbasket cake-tin biscuit-tin jam-jar eggcup nutcracker corkscrew oven-mitt potholder dishcloth
tea-towel pie-dish casserole platter tureen gravy-boat spanner vise clamp plane awl gimlet
spirit-level measuring-tape yardstick paint-pot paintbox easel palette picture-frame portrait
painting sculpture spade hose sprinkler scarecrow birdfeeder plant-pot pincushion bobbin spool
crochet-hook knitting-needle lifebuoy buoy lobster-pot creel timetable passport carpetbag valise
keepsake heirloom souvenir talisman amulet charm mascot trinket bauble gadget contraption
invention machine robot pebble twig branch log conch sponge tinderbox firework sparkler
banner-pole kite-tail snow-globe pocket-watch wristwatch alarm-clock cuckoo-clock
grandfather-clock rolling-hoop jack-knife/jack-knives penknife/penknives pocketknife/pocketknives
razor thimble-case button-hook shoehorn hatpin lorgnette monocle spectacle-case walking-staff
lantern-hook bellpull horsehair-brush feather-duster dustpan mop sponge-bag washboard mangle
flatiron clothes-peg clothesline washtub""".split()

CLOTHES = """scarf coat hat cloak sweater jacket shawl cap boots mittens apron vest raincoat
bonnet dress skirt shirt tunic waistcoat overcoat jumper cardigan hood gloves slippers sandals""".split()
CONTAINERS = "box basket crate drawer barrel shoebox bucket hatbox teacup flowerpot".split()

FURNITURE = """bed table chair sofa cupboard shelf/shelves desk bench stool dresser wardrobe
cabinet rug curtain stove sink bathtub crate barrel drawer closet armchair bookcase cradle chest
doormat woodpile haystack flowerpot wheelbarrow hammock windowsill mantelpiece fireplace
cellar-door trapdoor rocking-chair footstool coat-rack umbrella-stand laundry-basket sideboard
hatstand grandfather-chair chaise settee ottoman tallboy dresser-drawer pew loveseat washstand
nightstand bedside-table kitchen-table workbench potting-bench garden-bench stepladder log-basket
coal-scuttle""".split()

DWELLINGS = """house cottage cabin hut farmhouse tower houseboat mill lighthouse treehouse inn
caravan windmill bakery apartment shack lodge manor""".split()

PLACES = """river forest meadow hill lake pond garden orchard barn market harbor beach cave bridge
tower castle library school kitchen attic cellar shed well field valley mountain lighthouse
station farm stable workshop inn cliff island marsh glade grove creek waterfall tunnel dock pier
shop museum theater park greenhouse pantry porch balcony rooftop hallway staircase chimney fence
gate path road lane alley street fountain statue windmill quarry mine vineyard pasture heath moor
dune bay cove reef glacier jungle plain prairie ridge peak stream crossroads tavern chapel abbey
palace fortress ruins camp hut cabin treehouse den burrow nest bakery bookshop toyshop post-office
town-hall square playground schoolyard riverbank seashore boathouse boatyard shipyard warehouse
factory sawmill forge smithy pottery dairy henhouse pigsty beehive apiary courtyard cloister
belfry crypt gallery parlor study nursery laundry scullery larder storeroom hayloft granary canal
lock weir millpond duck-pond fishpond spinney copse thicket hedgerow bramble-patch cornfield
wheatfield hayfield turnip-field pumpkin-patch cabbage-patch allotment kitchen-garden rose-garden
herb-garden walled-garden maze bandstand market-square village-green common churchyard graveyard
lychgate signpost milestone tollgate toll-bridge footbridge stepping-stones riverbend millrace
backwater lagoon estuary headland lookout watchtower gatehouse drawbridge moat dungeon turret
battlement keep ballroom banquet-hall library-stairs conservatory orangery summerhouse gazebo
folly grotto boathouse-roof jetty slipway lighthouse-steps tidepool rockpool sandbank
shingle-beach mudflat saltmarsh clifftop hilltop valley-floor mountain-pass foothills highlands
lowlands woodland wildwood pinewood birchwood beechwood oakwood bluebell-wood orchard-gate
farmyard stackyard cowshed sheepfold dovecote pigeon-loft kennel stable-yard coach-house
carriage-house cider-press bakehouse brewhouse wash-house icehouse""".split()

ANIMALS = """cat dog fox owl rabbit hedgehog mouse/mice squirrel deer/deer horse goat sheep/sheep
cow pig duck goose/geese hen rooster crow raven robin sparrow swan heron frog toad turtle snail
beetle butterfly/butterflies bee ant spider bat badger otter beaver bear wolf/wolves lamb
pony/ponies donkey mole lizard crab seal whale dolphin fish/fish salmon/salmon eel pelican puffin
seagull parrot peacock pigeon dove magpie woodpecker kingfisher hawk eagle falcon moth cricket
grasshopper ladybug dragonfly/dragonflies firefly/fireflies worm caterpillar kitten puppy/puppies
chick calf/calves foal fawn cub ferret hamster camel elephant giraffe lion tiger monkey panda
kangaroo koala penguin walrus/walruses octopus/octopuses jellyfish/jellyfish starfish/starfish
lobster shrimp/shrimp moose/moose raccoon skunk weasel stoat vole shrew newt salamander wren finch
lark starling thrush nightingale swallow gull tortoise canary budgie goldfinch bullfinch chaffinch
blackbird bluebird cuckoo lapwing curlew plover sandpiper cormorant gannet albatross/albatrosses
swift martin nuthatch treecreeper wagtail yellowhammer jay rook jackdaw kestrel buzzard osprey
kite-bird barn-owl tawny-owl hare dormouse/dormice polecat pine-marten mink lynx/lynxes
bison/bison buffalo/buffaloes yak zebra hippo rhino gorilla chimpanzee lemur sloth armadillo
anteater porcupine opossum chipmunk marmot meerkat mongoose wombat platypus/platypuses bee-eater
hummingbird toucan flamingo/flamingos ostrich/ostriches emu crane stork ibis/ibises tadpole minnow
stickleback pike/pike carp/carp perch/perch herring/herring mackerel/mackerel sardine seahorse
sea-otter sea-lion orca narwhal/narwhals manatee stingray limpet mussel oyster clam hermit-crab
cockle whelk prawn barnacle woodlouse/woodlice earwig centipede millipede bumblebee wasp hornet
glow-worm mayfly/mayflies damselfly/damselflies ladybird""".split()

PET_KINDS = """cat dog rabbit kitten puppy hedgehog mouse parrot goat pony duck goose hen tortoise
ferret hamster owl crow raven donkey lamb pig frog canary guinea-pig""".split()
FLOWERS = """rose tulip daisy/daisies lily/lilies poppy/poppies daffodil bluebell buttercup
sunflower primrose snowdrop crocus/crocuses orchid peony/peonies carnation dandelion foxglove
honeysuckle jasmine magnolia hyacinth geranium begonia petunia pansy/pansies forget-me-not
cornflower thistle heather zinnia aster dahlia chrysanthemum hollyhock larkspur lupin sweet-pea
snapdragon cowslip anemone camellia gardenia lotus/lotuses water-lily/water-lilies marigold
lavender violet iris/irises""".split()
TREES = """oak birch willow maple pine cedar elm ash beech chestnut walnut cherry yew holly
hawthorn hazel rowan alder aspen poplar sycamore spruce fir larch linden magnolia palm fig plum
olive cypress juniper mulberry apple pear""".split()
PEOPLE_PARTS = """hand arm knee elbow nose chin cheek forehead shoulder back neck ankle wrist
thumb finger toe heel ear eye head foot lip tongue""".split()
SKY = """moon stars clouds sky rainbow sunset sunrise mist fog frost dew snow rain wind storm
thunder lightning""".split()
VEHICLES = """boat ship canoe raft barge ferry rowboat sailboat schooner carriage coach cart wagon
sled bicycle tricycle train tram bus balloon airship sleigh pony-cart dogcart gig trap""".split()

BODY_PARTS = "paw wing leg tail ear foot/feet hoof/hooves claw beak fin".split()

FOODS = """apple pear plum cherry/cherries berry/berries strawberry/strawberries
blueberry/blueberries raspberry/raspberries grape orange lemon peach/peaches banana melon pie cake
cookie muffin biscuit bun pancake waffle egg carrot potato/potatoes tomato/tomatoes onion turnip
cabbage bean pea pumpkin cucumber radish/radishes beet mushroom nut walnut chestnut almond
hazelnut pepper pickle sandwich/sandwiches noodle dumpling pudding tart scone pretzel cracker
candy/candies toffee sausage fig date apricot mango/mangoes pineapple coconut lime olive raisin
pastry/pastries doughnut omelet salad loaf/loaves bagel crumpet cupcake turnover flapjack fritter
crumble trifle pasty/pasties quiche strudel meringue macaroon eclair teacake rock-cake jam-tart
leek parsnip cauliflower artichoke squash/squashes marrow gourd chickpea gooseberry/gooseberries
blackberry/blackberries cranberry/cranberries elderberry/elderberries currant quince nectarine
tangerine clementine grapefruit kiwi papaya guava pomegranate persimmon watermelon cantaloupe
plum-cake seed-cake honey-cake oatcake griddle-cake potato-cake fishcake pork-pie meat-pie
apple-pie cherry-pie hot-cross-bun iced-bun cream-puff jam-roll sausage-roll cheese-straw
gingersnap shortcake""".split()

FOOD_MASS = """bread soup cheese honey jam milk tea porridge butter rice flour sugar cocoa
lemonade cider juice stew broth custard gingerbread syrup marmalade toast cream yogurt oatmeal
popcorn chocolate cinnamon barley water pepper salt vinegar mustard gravy sauce treacle molasses
thyme sage mint parsley oregano saffron vanilla caramel butterscotch licorice marzipan nougat
shortbread fruitcake cornbread flatbread sourdough rye celery spinach kale broccoli asparagus
rhubarb lentil-soup pea-soup fish-stew apple-sauce mashed-potato""".split()

MATERIALS = """wood clay wool paper glass cloth silk leather string wire paint glue yarn wax straw
felt cotton linen tin copper brass silver gold stone sand ribbon lace twine canvas velvet burlap
hessian tweed gingham calico muslin chiffon satin suede oilcloth driftwood birch-bark cork
horsehair goose-down beeswax tallow clay-slip plaster putty mortar lead pewter bronze""".split()

SOUNDS = """squeak thump creak whistle rattle scratch tap hum howl rustle knock bang buzz click
ring splash crash whisper moan chirp hoot bark growl purr hiss clatter jingle crackle murmur tick
snore sneeze giggle flutter drip clang clink thud thunk whoosh swish whirr patter pitter-patter
creaking groan squawk screech caw tweet warble cluck quack honk bleat moo neigh whinny oink yap
yelp howling chime toll gurgle sizzle rumble""".split()

EVENTS = """festival fair feast parade dance concert picnic wedding party contest race show
celebration carnival ceremony play market""".split()
EVENT_KINDS = """harvest spring summer autumn winter midsummer lantern flower village river
moonlight apple pumpkin kite music birthday boat cheese honey""".split()

SIZES = """small big little old new tiny huge large heavy light round long short tall narrow wide
thick thin square enormous miniature giant""".split()
COLORS = """red blue green yellow orange purple pink brown black white gray golden silver crimson
scarlet violet indigo amber ivory teal turquoise navy maroon lavender lilac beige emerald rusty""".split()
MATERIAL_ADJECTIVES = """wooden woolen brass copper glass clay paper leather velvet silk cotton
linen tin iron stone straw wicker crystal porcelain bamboo felt canvas marble bronze pewter oak
pine willow""".split()
QUALITIES = """shiny dusty broken cracked bent soft hard smooth rough sharp dull bright dark clean
dirty strange beautiful pretty ugly fancy plain precious magic ancient worn faded polished painted
carved striped spotted checked folded torn patched empty full warm cold wet dry sticky fragile
sturdy lucky secret special simple odd curious lovely splendid tattered crooked delicate elegant
glittering gleaming humble mysterious peculiar ordinary useful useless valuable forgotten missing
favorite spare tidy messy squeaky noisy wobbly lopsided sparkly glowing creaky battered handmade
borrowed dented scratched chipped rumpled crumpled tangled knotted frayed stained scuffed gilded
jeweled embroidered speckled freckled mended brand-new old-fashioned heavy-looking ornate rustic
sleek glossy grimy sooty frosted ragged threadbare moth-eaten silky velvety fuzzy fluffy feathery
bumpy lumpy knobbly gnarled twisted jagged pointed blunt hollow solid weightless tinny musty soggy
soaked creased wrinkled pleated beaded tasseled fringed ruffled quilted woven knitted stitched
hand-painted hand-carved gold-rimmed silver-plated rust-colored moss-covered cobwebbed antique
ingenious marvelous wondrous dreadful awful wonderful terrible horrible gorgeous dainty chunky
bulky hefty slender plump squat stout spindly rickety flimsy shabby spotless murky transparent
shimmering twinkling flickering smoldering charred scorched singed melted greasy slippery prickly
thorny spiky bristly woolly leafy flowery fragrant smelly""".split()
TRAITS = """brave kind clever shy curious gentle cheerful patient careful stubborn clumsy quiet
loud honest generous proud lazy busy grumpy friendly thoughtful wise silly bold calm nervous
playful polite serious tidy forgetful hardworking quick young old jolly restless sensible sleepy
cautious daring eager fearless humble modest noisy merry nimble sturdy timid witty brisk cunning
dreamy fussy gruff hasty loyal mischievous absent-minded good-natured quick-witted soft-spoken
adventurous ambitious bashful boastful bossy brainy candid capable carefree charming chatty
clever-handed contented courageous cranky crafty creative dependable determined diligent easygoing
energetic faithful fidgety finicky foolish frank gallant gentle-hearted giddy gloomy gracious
greedy gullible hard-headed headstrong hearty helpful hot-tempered imaginative impish industrious
inventive jovial kind-hearted lighthearted lively meek methodical mild-mannered moody neat nosy
obedient observant optimistic orderly peaceful persistent plucky practical prim proper prudent
quarrelsome quick-tempered reckless reliable resourceful scatterbrained secretive selfless
sharp-eyed sly sociable spirited steadfast stern strong-willed sulky talkative tenderhearted
thrifty tireless trusting truthful unflappable vain watchful well-mannered whimsical wily zealous""".split()
EMOTIONS = """happy sad tired hungry angry scared worried excited surprised proud lonely glad
sorry cross nervous calm curious puzzled delighted relieved grateful embarrassed jealous hopeful
bored sleepy thirsty cheerful upset amazed confused anxious content frightened furious joyful
miserable thrilled uneasy disappointed impatient ashamed astonished bewildered cheerless doubtful
eager gloomy grumpy homesick overjoyed restless shaky startled suspicious tearful weary alarmed
amused annoyed apprehensive awkward blissful bothered buoyant cheered crestfallen dazed dejected
despondent dismayed downcast ecstatic elated enchanted enraged envious exasperated exhausted
fearful flustered forlorn frazzled fretful giddy grouchy guilty heartbroken humbled hurt indignant
inspired irritable jittery jubilant lighthearted listless melancholy mortified moved nostalgic
offended optimistic outraged overwhelmed panicky peeved pensive perplexed petrified pleased
rattled reassured regretful resentful sheepish shocked shy sleepless smug sorrowful spooked
stunned sulky terrified thankful touched troubled unhappy vexed wistful worn-out""".split()
WEATHER = """sunny rainy windy cloudy foggy snowy stormy misty chilly cold warm hot bright gray
frosty icy humid breezy damp mild clear gloomy drizzly blustery sweltering""".split()
TASTES = """sweet warm fresh crunchy soft salty sour juicy ripe delicious spicy crisp golden burnt
hot cold sticky creamy tasty bitter smoky chewy buttery fluffy gooey tangy stale plump""".split()
PLACE_ADJECTIVES = """quiet busy narrow old small sleepy windy sunny foggy crowded peaceful noisy
little green muddy dusty snowy rocky sandy grassy shady hidden lonely ancient bustling cozy
distant faraway forgotten pleasant tidy wild windswept""".split()

# Adverbs of manner are made from these adjectives (quick -> quickly, happy -> happily, gentle -> gently).
MANNER_BASES = """quick slow careful quiet gentle soft loud happy sad proud brave calm eager
patient sudden bright warm kind polite nervous curious silent swift steady cheerful angry anxious
careless clumsy graceful honest hungry lazy lucky merry neat playful rapid sleepy tender
thoughtful wild wise bold busy easy noisy proper rough sharp shy smooth strange sweet tight firm
grateful final sure glad sheepish hopeful cautious fierce frantic gleeful grim hasty joyful loyal
nimble secret solemn stern tidy timid weary cheeky crafty dreamy gloomy grumpy nosy shaky snug
awkward bashful blissful brisk casual cheerless clever cozy cruel crisp curt deft elegant faint
fond frank gallant generous giddy glum greedy hearty hoarse idle jaunty keen limp meek mournful
quaint rash reckless restless rude savage serene shrewd sincere skillful sloppy sly sorrowful sour
spiteful stealthy stiff stubborn sullen tame tearful tense thankful tireless triumphant vague vain
vivid wary weak wistful woeful zealous""".split()
OTHER_ADVERBS = """soon later again already almost always never often sometimes together outside
inside upstairs downstairs nearby away back home still just only even also too very quite rather
really nearly once twice today tomorrow yesterday tonight afterwards meanwhile instead perhaps
maybe somehow anyway everywhere somewhere nowhere""".split()
DEGREE = "very quite rather really so terribly awfully a-little".split()

VERBS_FOR_OBJECTS = """carry lift clean polish paint fix mend wash wrap:wrapped:wrapping
hide:hid::hidden drop:dropped:dropping find:found lose:lost hold:held open close fold fill empty
weigh measure examine inspect study sketch draw:drew::drawn decorate repair sort stack hang:hung
tie untie pack unpack load unload check count label sharpen oil dust scrub:scrubbed:scrubbing
rinse dry fetch grab:grabbed:grabbing toss throw:threw::thrown catch:caught kick roll
spin:spun:spinning:spun turn twist bend:bent break:broke::broken tear:tore::torn
cut:cut:cutting:cut sew:sewed::sewn knit:knitted:knitting weave:wove::woven carve shape glue bury
steal:stole::stolen return share trade swap:swapped:swapping offer show:showed::shown hand pass
send:sent deliver collect gather pick choose:chose::chosen test try use
forget:forgot:forgetting:forgotten remember notice spot:spotted:spotting admire touch smell guard
protect save lock unlock light:lit blow:blew::blown ring:rang::rung tune squeeze stretch
flip:flipped:flipping borrow lend:lent bring:brought take:took::taken keep:kept
drag:dragged:dragging push pull buy:bought sell:sold build:built hug:hugged:hugging seal:sealed
mark trace copy tap:tapped:tapping rub:rubbed:rubbing shine:shone wipe brush hammer sand:sanded
stitch patch:patched tidy:tidied arrange balance juggle rescue adjust assemble attach bundle
button buckle cover uncover crack crush dip:dipped:dipping drain embroider engrave fasten unfasten
flatten fluff frame grease grip:gripped:gripping heat hook iron knot:knotted:knotting lace lower
raise melt nudge pinch plait pluck pocket prop:propped:propping pry:pried rattle refill replace
restore rewind rotate scatter scrape screw unscrew shake:shook::shaken shove smash smooth
snap:snapped:snapping soak stamp steady stuff swing:swung tighten loosen tilt topple
trim:trimmed:trimming tuck tug:tugged:tugging twirl unroll unwind:unwound untangle varnish whittle
wind:wound wring:wrung zip:zipped:zipping auction bargain:bargained bless:blessed
blot:blotted:blotting brace clasp clutch coil crumple dangle drape dredge etch fling:flung gild
glaze hoist jam:jammed:jamming lash latch mount muffle nail pad:padded:padding peg:pegged:pegging
pile pin:pinned:pinning plug:plugged:plugging pump quilt ration rig:rigged:rigging rummage salvage
scour shelve shuffle sling:slung smuggle splice spread:spread:spreading:spread sprinkle stash
steer strap:strapped:strapping string:strung swaddle tangle tether thread toast trundle unbolt
unhook unlatch unpin:unpinned:unpinning unwrap:unwrapped:unwrapping winch""".split()
VERBS_FOR_FOOD = """eat:ate::eaten bake cook taste slice chop:chopped:chopping peel boil fry roast
mash stir:stirred:stirring share pick grow:grew::grown plant harvest wash sell buy:bought pack
serve smell nibble munch swallow save sprinkle pour mix knead squeeze gather carry weigh count
sort dry store freeze:froze::frozen""".split()
VERBS_FOR_ANIMALS = """feed:fed pet:petted:petting follow chase watch brush call help find:found
rescue count draw:drew::drawn tame train wash hear:heard see:saw::seen spot:spotted:spotting greet
thank scold name cuddle comfort tickle lead:led catch:caught free release frighten startle
wake:woke::woken carry guide groom shelter bandage warn""".split()
VERBS_OF_TRAVEL = """walk run:ran:running:run hurry wander stroll march skip:skipped:skipping
hop:hopped:hopping jump climb swim:swam:swimming:swum sail row ride:rode::ridden fly:flew::flown
crawl creep:crept tiptoe dash race rush stumble slip:slipped:slipping trip:tripped:tripping dance
trudge scramble jog:jogged:jogging limp paddle drift float travel hike cycle wade splash sneak
tramp amble saunter plod:plodded:plodding gallop trot:trotted:trotting sprint
stride:strode::stridden roam ramble meander zigzag:zigzagged:zigzagging leap:leapt bound clamber
swoop glide soar hasten scurry scuttle shuffle slide:slid:sliding skate toddle waddle lumber prowl
slink:slunk tumble zoom dart bolt spring:sprang::sprung canter lope stagger swagger traipse
trek:trekked:trekking venture voyage wend whizz""".split()
VERBS_OF_DOING = """sing:sang::sung laugh cry smile frown nod:nodded:nodding shiver yawn
sleep:slept rest wait sit:sat:sitting stand:stood kneel:knelt fall:fell::fallen return leave:left
arrive wave sigh whistle hum:hummed:humming giggle grin:grinned:grinning blink wink gasp cough
sneeze shrug:shrugged:shrugging wobble dive:dived linger pause glance peek peer stare gaze listen
work play practice read:read::read dream snore chatter think:thought hide:hid::hidden wriggle
stretch bounce watch blush bow breathe chuckle clap:clapped:clapping cheer doze faint fidget
flinch grumble hesitate hiccup lean lounge mutter nap:napped:napping pace pant ponder pout pray
relax sob:sobbed:sobbing sulk sway tremble twitch wiggle weep:wept whimper wonder worry yell bask
brood dawdle daydream dither doodle fret:fretted:fretting frolic:frolicked:frolicking gossip hover
idle loiter mope muse nestle potter prance quiver ramble reminisce scowl shudder simper slumber
smirk snicker sniffle snooze squint stammer stutter sunbathe swoon tarry teeter tinker titter toil
wheeze wince yodel""".split()
SKILLS = """swim juggle whistle sail knit paint sing dance skate fish sew read write draw carve
weave ride row climb cook bake garden play-the-flute play-the-drum tie-knots build-boats
make-candles fly-a-kite read-maps tell-stories count-stars keep-bees whittle spin-wool bind-books
blow-glass shoe-horses mend-nets make-cheese brew-cider grow-roses catch-fish paint-portraits
play-the-fiddle play-the-harp play-the-lute ring-bells fold-paper sing-in-harmony speak-french
write-poems""".split()
SAY_VERBS = """said said said said replied answered whispered explained added admitted agreed
muttered murmured announced declared insisted suggested promised warned laughed sighed grumbled
called repeated mumbled joked""".split()
ASK_VERBS = "asked asked asked asked wondered whispered called inquired begged".split()
SHOUT_VERBS = "shouted cried exclaimed yelled called cheered gasped laughed squealed boomed".split()

LONG_AGO = "Once upon a time|Long ago|Many years ago|Not long ago|A long time ago|Once".split("|")
WHEN = LONG_AGO + """One morning|One evening|One afternoon|One day|Early one morning|Late one night|At dawn
|At the end of the summer|On the first day of spring|Just before winter|On a quiet afternoon|Last year
|In the middle of the night""".replace("\n", "").split("|")
DAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
MONTHS = "January February March April May June July August September October November December".split()
SEASONS = "spring summer autumn winter".split()
PARTS_OF_DAY = "morning afternoon evening night dawn dusk noon midnight sunrise sunset".split()
NEAR = "near by behind beside".split()
AT = "in on under behind beside near inside above below beneath by".split()
ALONG = "across along around through over past toward into out-of up down".replace("-", " ").split()
ON_FURNITURE = "under behind beside on inside beneath near".split()
NUMBERS = """zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen
fifteen sixteen seventeen eighteen nineteen""".split()
TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
ORDINALS = """first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth""".split()
BLOOMS = "fragrant|in bloom|wilting|tall|tiny|drooping|full of bees|covered in dew".split("|")
WIND = "howled whistled sighed roared moaned".split()
SETBACKS = "falling|breaking|slipping|wobbling|tangling|sticking|tipping over|rolling away".split("|")
INTERJECTIONS = "Oh|Look|Well|Hmm|Goodness|Oh dear|Wow|Hey|Listen|Quick|Ah".split("|")


# ---------------------------------------------------------------------------------------------------------
# English morphology: plurals, verb forms, adverbs, a/an.
# ---------------------------------------------------------------------------------------------------------


def _plural(word: str) -> str:
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    if word.endswith("y") and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def _nouns(words: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Parse "singular" / "singular/plural" entries into parallel (singulars, plurals); '-' becomes ' '."""
    singular, plural = [], []
    for entry in words:
        one, _, many = entry.partition("/")
        singular.append(one.replace("-", " "))
        plural.append((many or _plural(one)).replace("-", " "))
    return tuple(singular), tuple(plural)


def _verb_forms(entry: str) -> tuple[str, str, str, str, str]:
    """'base:past:ing:participle' (empty fields derived) -> (base, third person, past, -ing, participle)."""
    base, past, ing, participle = (entry.split(":") + ["", "", ""])[:4]
    if not past:
        if base.endswith("e"):
            past = base + "d"
        elif base.endswith("y") and base[-2] not in "aeiou":
            past = base[:-1] + "ied"
        else:
            past = base + "ed"
    if not ing:
        if base.endswith("ie"):
            ing = base[:-2] + "ying"
        elif base.endswith("e") and not base.endswith(("ee", "ye", "oe")):
            ing = base[:-1] + "ing"
        else:
            ing = base + "ing"
    third = base + "es" if base.endswith(("o", "s", "x", "z", "ch", "sh")) else _plural(base)
    return base, third, past, ing, participle or past


def _verbs(words: list[str]) -> tuple[tuple[str, str, str, str, str], ...]:
    return tuple(_verb_forms(entry) for entry in words)


def _adverb(adjective: str) -> str:
    if adjective.endswith("y") and adjective not in ("shy", "sly"):
        return adjective[:-1] + "ily"
    if adjective.endswith("le"):
        return adjective[:-1] + "y"
    if adjective.endswith("ic"):
        return adjective + "ally"
    if adjective in ("true", "due"):
        return adjective[:-1] + "ly"
    return adjective + "ly"


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


OBJ, OBJS = _nouns(OBJECTS)
FURN, _ = _nouns(FURNITURE)
HOMES, _ = _nouns(DWELLINGS)
PLACE, _ = _nouns(PLACES)
ANIMAL, ANIMALS_PL = _nouns(ANIMALS)
BODY, _ = _nouns(BODY_PARTS)
PET, _ = _nouns(PET_KINDS)
FLOWER, FLOWERS_PL = _nouns(FLOWERS)
VEHICLE, _ = _nouns(VEHICLES)
FOOD, FOODS_PL = _nouns(FOODS)
ROLE, ROLES_PL = _nouns(ROLES)
SKILL, _ = _nouns(SKILLS)
HANDLE = _verbs(VERBS_FOR_OBJECTS)
COOK = _verbs(VERBS_FOR_FOOD)
TEND = _verbs(VERBS_FOR_ANIMALS)
TRAVEL = _verbs(VERBS_OF_TRAVEL)
DO = _verbs(VERBS_OF_DOING)
ADVERBS = tuple(_adverb(a) for a in MANNER_BASES)
DEGREES = tuple(d.replace("-", " ") for d in DEGREE)
OBJECT_ADJECTIVES = tuple(SIZES + COLORS + MATERIAL_ADJECTIVES + QUALITIES)
ANIMAL_ADJECTIVES = tuple(SIZES + TRAITS + COLORS)
BASE, THIRD, PAST, ING, PARTICIPLE = range(5)  # index into a verb's forms


class _Character:
    """A person (or pet) in one story: the name and pronouns stay fixed until the story ends."""

    __slots__ = ("name", "he", "him", "his", "He", "His", "role", "trait")

    def __init__(self, name: str, female: bool, role: str, trait: str):
        self.name, self.role, self.trait = name, role, trait
        self.he, self.him, self.his = ("she", "her", "her") if female else ("he", "him", "his")
        self.He, self.His = self.he.capitalize(), self.his.capitalize()


def _cap(sentence: str) -> str:
    return sentence[0].upper() + sentence[1:]


class _StoryTeller:
    """Writes one story at a time from a random stream. Each method returns one sentence or paragraph."""

    def __init__(self, rng: random.Random):
        self.random = rng.random
        self.arcs = (self.lost_thing, self.journey, self.making, self.storm, self.market, self.quarrel,
                     self.lesson, self.noise, self.hurt_animal, self.race, self.letter, self.cooking)
        self.events = (self.e_handle, self.e_animal, self.e_weather, self.e_feeling, self.e_food,
                       self.e_count, self.e_smell, self.e_walk, self.e_creature, self.e_together,
                       self.e_memory, self.e_habit, self.e_describe, self.e_wish, self.e_give, self.e_price,
                       self.e_age, self.e_could, self.e_clothes, self.e_chat, self.e_chat, self.e_why,
                       self.e_busy, self.e_time, self.e_did_not, self.e_crowd, self.e_tend, self.e_while,
                       self.e_where, self.e_garden, self.e_tree, self.e_ouch, self.e_sky, self.e_ride)

    # -- random choices ------------------------------------------------------------------------------
    def pick(self, words):
        """Any word of the list, all equally likely."""
        return words[int(self.random() * len(words))]

    def common(self, words):
        """A word from the list, front words more often: P(index < k) = sqrt(k / len)."""
        return words[int(len(words) * self.random() ** 2)]

    def chance(self, p: float) -> bool:
        return self.random() < p

    def between(self, lo: int, hi: int) -> int:
        return lo + int(self.random() * (hi - lo + 1))

    # -- phrases --------------------------------------------------------------------------------------
    def character(self, *avoid: _Character) -> _Character:
        """A new character whose name differs from those in `avoid` (the cast so far)."""
        female = self.chance(0.5)
        name, taken = "", {c.name for c in avoid}
        while not name or name in taken:
            name = self.pick(FEMALE_NAMES if female else MALE_NAMES)
        return _Character(name, female, self.common(ROLE), self.common(TRAITS))

    def full_name(self, c: _Character) -> str:  # "Mira" or "Mira Pemberton", for a first mention
        return f"{c.name} {self.pick(SURNAMES)}" if self.chance(0.5) else c.name

    def thing(self) -> str:  # "the brass key" / "the key"
        i = int(len(OBJ) * self.random() ** 2)
        return OBJ[i] if self.chance(0.5) else f"{self.common(OBJECT_ADJECTIVES)} {OBJ[i]}"

    def some(self, singular, plural, lo: int = 2, hi: int = 12) -> str:  # "three apples", "one apple"
        i, n = int(len(singular) * self.random() ** 2), self.between(lo, hi)
        return f"{_number(n)} {singular[i] if n == 1 else plural[i]}"

    def who(self, c: _Character) -> str:  # the name or the pronoun, as a sentence subject
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

    def line(self, c: _Character, text: str, mark: str = ".") -> str:
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
            self.pet = _Character(self.pick(PET_NAMES), self.chance(0.5), self.common(PET), "")
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
            first = (f"{self.common(LONG_AGO)}, {_a(h.trait + ' ' + h.role)} named {self.full_name(h)} lived "
                     f"in {home}.")
        elif r < 0.5:
            first = f"{h.name} was {_a(h.trait + ' ' + h.role)} who lived in {home} in {self.town}."
        elif r < 0.75:
            first = (f"In the {self.common(PLACE_ADJECTIVES)} town of {self.town}, there lived "
                     f"{_a(h.role)} called {h.name}.")
        else:
            morning = self.pick(["One morning", "Early one morning", f"One {self.pick(SEASONS)} morning"])
            first = f"{morning}, {h.name} the {h.role} woke up early in {self.town}."
        r = self.random()
        if r < 0.35:
            second = f"{h.His} best friend was {_a(f.role)} named {f.name}."
        elif r < 0.65:
            second = f"{f.name}, {_a(f.trait)} {f.role}, lived next door."
        else:
            second = (f"Every {self.pick(DAYS)}, {h.he} visited {h.his} friend {f.name}, who worked as "
                      f"{_a(f.role)}.")
        parts = [first, second]
        if self.pet:
            parts.append(f"{h.He} had {_a(self.common(TRAITS) + ' ' + self.pet.role)} named {self.pet.name}, "
                         f"who followed {h.him} everywhere.")
        if self.chance(0.5):
            parts.append(f"{h.He} was {h.trait} and {self.common(TRAITS)}, and {h.he} loved "
                         f"{self.common(OBJS) if self.chance(0.5) else self.common(FOODS_PL)}.")
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
            self.then_events(f"They {self.common(TRAVEL)[PAST]} along the {self.place()} for "
                             f"{_number(self.between(2, 9))} hours.", 1, 3),
            f"On the way, they met {_a(stranger.trait + ' ' + stranger.role)} named "
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
            f"The {event} was {_number(days)} days away, and {h.name} wanted to make "
            f"{_a(self.common(OBJECT_ADJECTIVES) + ' ' + self.obj)} for it. {h.He} gathered {material}, "
            f"{self.common(MATERIALS)} and {self.common(MATERIALS)}.",
            self.then_events(f"Every evening {h.he} worked in {h.his} {self.common(HOMES)}.", 1, 2),
            f"Then, {self.some(('day',), ('days',), 1, days - 1)} before the {event}, {h.he} ran out of "
            f"{material}.",
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
            self.then_events(f"{f.name} went home and did not {self.pick(['speak', 'talk', 'play'])} with "
                             f"{h.name} for {_number(self.between(2, 7))} days.", 1, 2),
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
            self.then_events(f"So one night they {self.common(TRAVEL)[PAST]} to the {place} with "
                             f"{_a(self.common(OBJ))}.", 0, 2),
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
            self.then_events(f"They {self.common(TRAVEL)[PAST]} past the {self.place()} and over the "
                             f"{self.place()}.", 0, 2),
            f"{h.name} came {ORDINALS[place_h - 1]}, and {f.name} came {ORDINALS[place_f - 1]}.",
            self.line(h if place_h <= place_f else f, "Next year I will be even faster"),
        ]

    def letter(self) -> list[str]:
        h = self.h
        relative, town = self.common(RELATIVES), self.pick(TOWN_STARTS) + self.pick(TOWN_ENDS)
        return [
            f"{self.when()}, {h.name} received a letter from {h.his} {relative} in {town}.",
            f'It said: "Dear {h.name}, I am sending you my old {self.obj}. Please '
            f'{self.common(HANDLE)[BASE]} it every {self.pick(DAYS)}. The {self.common(PLACE)} here is '
            f'{self.common(PLACE_ADJECTIVES)} and the {self.common(ANIMALS_PL)} are '
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

    # -- single event sentences, to vary the middle of a story ------------------------------------------
    def e_handle(self) -> str:
        c = self.h if self.chance(0.6) else self.f
        return (f"{self.who(c)} {self.common(HANDLE)[PAST]} the {self.thing()} {self.pick(ON_FURNITURE)} "
                f"the {self.common(FURN)}.")

    def e_animal(self) -> str:
        verbs = TRAVEL if self.chance(0.5) else DO
        return f"The {self.common(ANIMAL)} {self.common(verbs)[PAST]} {self.common(ADVERBS)}."

    def e_weather(self) -> str:
        r = self.random()
        if r < 0.25:
            return f"Outside, the rain {self.pick(['fell', 'stopped', 'kept falling', 'turned to snow'])}."
        if r < 0.5:
            return f"The wind {self.pick(WIND)} over the {self.place()}."
        if r < 0.75:
            return f"It was {_a(self.pick(WEATHER))} {self.pick(PARTS_OF_DAY)} in {self.town}."
        return f"The sun {self.pick(['shone', 'set', 'rose', 'came out'])} over the {self.place()}."

    def e_feeling(self) -> str:
        c = self.h if self.chance(0.6) else self.f
        return f"{self.who(c)} felt {self.common(EMOTIONS)} and a little {self.common(EMOTIONS)}."

    def e_food(self) -> str:
        c = self.h if self.chance(0.6) else self.f
        return (f"{self.who(c)} {self.common(COOK)[PAST]} {_a(self.common(FOOD))} and "
                f"{self.common(COOK)[PAST]} {self.some(FOOD, FOODS_PL, 2, 20)}.")

    def e_count(self) -> str:
        n = self.between(1, 25)
        i = int(len(OBJ) * self.random() ** 2)
        what = f"{_number(n)} {OBJ[i]}" if n == 1 else f"{_number(n)} {OBJS[i]}"
        return f"On the {self.common(FURN)} there {'was' if n == 1 else 'were'} {what}."

    def e_smell(self) -> str:
        return f"The {self.place()} smelled of {self.common(FOOD_MASS)} and {self.common(MATERIALS)}."

    def e_walk(self) -> str:
        c = self.h if self.chance(0.6) else self.f
        return f"{self.who(c)} {self.common(TRAVEL)[PAST]} {self.common(ADVERBS)} to the {self.place()}."

    def e_creature(self) -> str:
        return (f"{_cap(_a(self.common(ANIMAL_ADJECTIVES)))} {self.common(ANIMAL)} was "
                f"{self.common(DO)[ING]} near the {self.place()}.")

    def e_together(self) -> str:
        return (f"{self.h.name} and {self.f.name} {self.common(DO)[PAST]} together until "
                f"{self.pick(PARTS_OF_DAY)}.")

    def e_memory(self) -> str:
        c = self.h
        return (f"{self.who(c)} remembered the {self.pick(SEASONS)} when {c.he} had "
                f"{self.common(HANDLE)[PARTICIPLE]} {_a(self.thing())}.")

    def e_habit(self) -> str:
        c = self.h if self.chance(0.5) else self.f
        return (f"Every {self.pick(DAYS)}, {c.name} {self.common(HANDLE)[PAST]} the {self.common(OBJ)} for "
                f"{c.his} {self.common(RELATIVES)}.")

    def e_describe(self) -> str:
        return (f"The {self.obj} was {self.common(QUALITIES)}, {self.common(QUALITIES)} and "
                f"{self.common(QUALITIES)}.")

    def e_wish(self) -> str:
        c = self.h if self.chance(0.6) else self.f
        return (f"{c.name} wanted to {self.common(HANDLE)[BASE]} the {self.obj}, but {c.he} was too "
                f"{self.common(EMOTIONS)}.")

    def e_give(self) -> str:
        a, b = (self.h, self.f) if self.chance(0.5) else (self.f, self.h)
        return (f"{a.name} {self.pick(['gave', 'handed', 'showed', 'passed'])} the {self.thing()} to "
                f"{b.name}, who {self.common(HANDLE)[PAST]} it {self.common(ADVERBS)}.")

    def e_price(self) -> str:
        return (f"{self.who(self.h)} paid {self.between(2, 99)} coins for {_a(self.thing())} at the "
                f"{self.place()}.")

    def e_age(self) -> str:
        c = self.h if self.chance(0.5) else self.f
        return f"{c.name} was {_number(self.between(6, 90))} years old."

    def e_could(self) -> str:
        c = self.h if self.chance(0.5) else self.f
        return f"From the {self.place()}, {c.name} could see {self.some(ANIMAL, ANIMALS_PL, 1, 30)}."

    def e_clothes(self) -> str:
        c = self.h if self.chance(0.6) else self.f
        return (f"{self.who(c)} put on {c.his} {self.common(COLORS)} {self.common(CLOTHES)}, because it was "
                f"{self.pick(WEATHER)}.")

    def e_chat(self) -> str:
        a, b = (self.h, self.f) if self.chance(0.5) else (self.f, self.h)
        r = self.random()
        if r < 0.2:
            said = self.line(a, f"{self.pick(INTERJECTIONS)}, the {self.place()} is so "
                                f"{self.common(PLACE_ADJECTIVES)} today", "!")
        elif r < 0.4:
            said = self.line(a, f"My {self.common(RELATIVES)} {self.common(HANDLE)[THIRD]} the "
                                f"{self.common(OBJS)} every {self.pick(DAYS)}")
        elif r < 0.6:
            done = self.common(HANDLE)[PARTICIPLE]
            said = self.line(a, f"I have never {done} {_a(self.thing())} like this")
        elif r < 0.8:
            said = self.line(a, f"Are you {self.common(HANDLE)[ING]} the {self.common(OBJ)}, {b.name}", "?")
        elif r < 0.9:
            said = self.line(a, f"{b.name}, your {self.common(ANIMAL)} {self.common(DO)[THIRD]} every "
                                f"{self.pick(PARTS_OF_DAY)}")
        else:
            said = self.line(a, f"Let's {self.common(TRAVEL)[BASE]} to the {self.place()} before "
                                f"{self.pick(PARTS_OF_DAY)}")
        return said

    def e_why(self) -> str:
        a, b = (self.h, self.f) if self.chance(0.5) else (self.f, self.h)
        thing = self.common(OBJ)
        return (self.line(a, f"Why is the {thing} so {self.common(QUALITIES)}", "?") + " "
                + self.line(b, f"Because I {self.common(HANDLE)[PAST]} it {self.common(OTHER_ADVERBS)}"))

    def e_busy(self) -> str:
        c = self.pet or self.f
        return f"{c.name} was busy {self.common(DO)[ING]} in the {self.place()}."

    def e_time(self) -> str:
        return (f"At {_number(self.between(1, 12))} o'clock, the {self.common(ROLE)} "
                f"{self.common(HANDLE)[PAST]} the {self.common(OBJS)}.")

    def e_crowd(self) -> str:
        return f"{_cap(self.some(ROLE, ROLES_PL, 2, 9))} were {self.common(DO)[ING]} in the {self.place()}."

    def e_tend(self) -> str:
        c = self.h if self.chance(0.6) else self.f
        return f"{self.who(c)} {self.common(TEND)[PAST]} the {self.common(ANIMAL)} {self.common(ADVERBS)}."

    def e_while(self) -> str:
        a, b = (self.h, self.f) if self.chance(0.5) else (self.f, self.h)
        b = self.pet or b
        return (f"While {a.name} was {self.common(COOK)[ING]} the {self.common(FOODS_PL)}, {b.name} "
                f"{self.common(DO)[PAST]} {self.common(ADVERBS)}.")

    def e_where(self) -> str:
        c = self.h if self.chance(0.6) else self.f
        if self.chance(0.5):
            return f"{self.who(c)} {self.common(TRAVEL)[PAST]} {self.pick(ALONG)} the {self.place()}."
        return f"{self.who(c)} {self.common(DO)[PAST]} {self.pick(AT)} the {self.place()} for a while."

    def e_garden(self) -> str:
        i = int(len(FLOWER) * self.random() ** 2)
        if self.chance(0.5):
            return (f"The {FLOWERS_PL[i]} by the {self.place()} were {self.common(COLORS)} and "
                    f"{self.pick(BLOOMS)}.")
        c = self.h if self.chance(0.6) else self.f
        flowers = self.some(FLOWER, FLOWERS_PL, 1, 12)
        return f"{self.who(c)} picked {flowers} for {c.his} {self.common(RELATIVES)}."

    def e_tree(self) -> str:
        c = self.h if self.chance(0.6) else self.f
        return (f"{self.who(c)} {self.common(DO)[PAST]} under the {self.common(SIZES)} {self.common(TREES)} "
                f"tree near the {self.place()}.")

    def e_ouch(self) -> str:
        c = self.h if self.chance(0.6) else self.f
        return (f"{self.who(c)} bumped {c.his} {self.common(PEOPLE_PARTS)} on the {self.common(FURN)} and "
                f"{self.common(DO)[PAST]}.")

    def e_sky(self) -> str:
        return (f"That {self.pick(PARTS_OF_DAY)}, the {self.common(SKY)} over {self.town} looked "
                f"{self.common(QUALITIES)}.")

    def e_ride(self) -> str:
        return (f"{self.h.name} and {self.f.name} took the {self.common(VEHICLE)} to the {self.place()} and "
                f"back.")

    def e_did_not(self) -> str:
        c = self.h if self.chance(0.6) else self.f
        return (f"{self.who(c)} did not {self.common(HANDLE)[BASE]} the {self.obj} "
                f"{self.common(OTHER_ADVERBS)}.")


def _check_count(num_chars: int) -> None:
    if not isinstance(num_chars, int) or isinstance(num_chars, bool) or num_chars < 0:
        raise ValueError(f"num_chars must be a non-negative int, got {num_chars!r}")


def generate_corpus(num_chars: int, seed: int = 0) -> str:
    """Return exactly `num_chars` characters of generated stories (ASCII), separated by blank lines.

    The output depends only on (num_chars, seed), and a shorter corpus is a prefix of a longer one.
    """
    _check_count(num_chars)
    teller = _StoryTeller(random.Random(seed))
    stories: list[str] = []
    total = 0
    while total < num_chars:
        story = teller.story()
        total += len(story) + (2 if stories else 0)  # 2 = the "\n\n" between stories
        stories.append(story)
    return "\n\n".join(stories)[:num_chars]


def default_cache_dir() -> Path:
    """Where generated files are kept: $MINIGPT_CACHE if set, else ~/.cache/minigpt."""
    return Path(os.environ.get("MINIGPT_CACHE") or Path.home() / ".cache" / "minigpt")


def builtin_corpus_path(
    num_chars: int = DEFAULT_CORPUS_CHARS, seed: int = 0, cache_dir: Path | None = None
) -> Path:
    """Write the generated corpus to a cache file once (atomically) and return its path.

    A file already there is reused; it is written to a temp file first and renamed, so no reader ever
    sees half a file.
    """
    _check_count(num_chars)
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path = cache_dir / f"builtin-v{CORPUS_VERSION}-seed{seed}-{num_chars}.txt"
    if path.is_file() and path.stat().st_size == num_chars:  # ASCII: one byte per char
        return path
    text = generate_corpus(num_chars, seed)
    return write_atomically(path, lambda f: f.write(text.encode("ascii")))
