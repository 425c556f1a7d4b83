"""The word lists the stories are made of, and the derived forms the story teller uses.

Commoner words come first: `StoryTeller.common` favours the front of a list. Nouns are "singular" or
"singular/plural"; verbs are "base" or "base:past:ing:participle", with empty fields derived by the usual
English rules (see _verb_forms). In a noun list a '-' becomes a space (picnic-basket -> picnic basket); in
the adjective lists it stays (brand-new).
"""

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
WHEN = (
    LONG_AGO
    + """One morning|One evening|One afternoon|One day|Early one morning|Late one night|At dawn
|At the end of the summer|On the first day of spring|Just before winter|On a quiet afternoon|Last year
|In the middle of the night""".replace("\n", "").split("|")
)
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
# English morphology: plurals, verb forms, adverbs.
# ---------------------------------------------------------------------------------------------------------


def _plural(word: str) -> str:
    """The regular English plural: box -> boxes, berry -> berries, cat -> cats."""
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
    """Parse every entry of a verb list (see _verb_forms)."""
    return tuple(_verb_forms(entry) for entry in words)


def _adverb(adjective: str) -> str:
    """The adverb of manner: quick -> quickly, happy -> happily, gentle -> gently."""
    if adjective.endswith("y") and adjective not in ("shy", "sly"):
        return adjective[:-1] + "ily"
    if adjective.endswith("le"):
        return adjective[:-1] + "y"
    if adjective.endswith("ic"):
        return adjective + "ally"
    if adjective in ("true", "due"):
        return adjective[:-1] + "ly"
    return adjective + "ly"


# ---------------------------------------------------------------------------------------------------------
# The parsed lists the story teller draws from: a noun list gives parallel (singulars, plurals), a verb list
# gives each verb's five forms, indexed by BASE, THIRD, PAST, ING, PARTICIPLE.
# ---------------------------------------------------------------------------------------------------------

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
