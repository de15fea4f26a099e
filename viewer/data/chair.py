"""CHAIR's words as Rohrbach et al. publish them (EMNLP 2018, "Object Hallucination in Image
Captioning"; LisaAnne/Hallucination, `utils/chair.py` and `data/synonyms.txt`): which COCO class each
word of a caption names, with their synonym list (about 400 words: "poodle" is a dog, "jetliner" an
airplane), their two-word objects ("hot dog", "teddy bear", "stop sign": one object, not a dog or a
bear) and their rules ("baby elephant" is an elephant, not a person; "passenger jet" a jet; the seat
of a toilet is no chair). Every mention counts: CHAIR_i is over mentions, not classes.

A port, not a dependency: theirs is Python 2 and needs NLTK's tokenizer data and `pattern.en`,
neither offline. Two steps differ in means, not in intent, each tested on their examples:
- words are `engine.vocab.tokenize`'s (lower case, punctuation dropped), not NLTK's `word_tokenize`;
- `singularize` is a small rule set covering the synonym list's words (pattern.en's rules are
  general English); irregular plurals of the list's words ("men", "knives", "geese", "mice") are
  spelled out.

The synonym list and the rules are theirs (Anna Rohrbach, Lisa Anne Hendricks, Kaylee Burns,
Trevor Darrell, Kate Saenko), under the licence their README names, the BSD 2-Clause License:

    Redistribution and use in source and binary forms, with or without
    modification, are permitted provided that the following conditions are met:
    1. Redistributions of source code must retain the above copyright notice, this list of
       conditions and the following disclaimer.
    2. Redistributions in binary form must reproduce the above copyright notice, this list of
       conditions and the following disclaimer in the documentation and/or other materials
       provided with the distribution.
    THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS" AND ANY EXPRESS OR
    IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE IMPLIED WARRANTIES OF MERCHANTABILITY AND
    FITNESS FOR A PARTICULAR PURPOSE ARE DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT HOLDER OR
    CONTRIBUTORS BE LIABLE FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR CONSEQUENTIAL
    DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR SERVICES; LOSS OF USE,
    DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER CAUSED AND ON ANY THEORY OF LIABILITY,
    WHETHER IN CONTRACT, STRICT LIABILITY, OR TORT (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY
    WAY OUT OF THE USE OF THIS SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.
"""
from __future__ import annotations

from typing import NamedTuple

# data/synonyms.txt, line by line: the COCO class first, then the words that name it.
SYNONYMS_TXT = """\
person, girl, boy, man, woman, kid, child, chef, baker, people, adult, rider, children, baby, worker, passenger, sister, biker, policeman, cop, officer, lady, cowboy, bride, groom, male, female, guy, traveler, mother, father, gentleman, pitcher, player, skier, snowboarder, skater, skateboarder, person, woman, guy, foreigner, child, gentleman, caller, offender, coworker, trespasser, patient, politician, soldier, grandchild, serviceman, walker, drinker, doctor, bicyclist, thief, buyer, teenager, student, camper, driver, solider, hunter, shopper, villager
bicycle, bike, bicycle, bike, unicycle, minibike, trike
car, automobile, van, minivan, sedan, suv, hatchback, cab, jeep, coupe, taxicab, limo, taxi
motorcycle, scooter,  motor bike, motor cycle, motorbike, scooter, moped
airplane, jetliner, plane, air plane, monoplane, aircraft, jet, jetliner, airbus, biplane, seaplane
bus, minibus, trolley
train, locomotive, tramway, caboose
truck, pickup, lorry, hauler, firetruck
boat, ship, liner, sailboat, motorboat, dinghy, powerboat, speedboat, canoe, skiff, yacht, kayak, catamaran, pontoon, houseboat, vessel, rowboat, trawler, ferryboat, watercraft, tugboat, schooner, barge, ferry, sailboard, paddleboat, lifeboat, freighter, steamboat, riverboat, battleship, steamship
traffic light, street light, traffic signal, stop light, streetlight, stoplight
fire hydrant, hydrant
stop sign
parking meter
bench, pew
bird, ostrich, owl, seagull, goose, duck, parakeet, falcon, robin, pelican, waterfowl, heron, hummingbird, mallard, finch, pigeon, sparrow, seabird, osprey, blackbird, fowl, shorebird, woodpecker, egret, chickadee, quail, bluebird, kingfisher, buzzard, willet, gull, swan, bluejay, flamingo, cormorant, parrot, loon, gosling, waterbird, pheasant, rooster, sandpiper, crow, raven, turkey, oriole, cowbird, warbler, magpie, peacock, cockatiel, lorikeet, puffin, vulture, condor, macaw, peafowl, cockatoo, songbird
cat, kitten, feline, tabby
dog, puppy, beagle, pup, chihuahua, schnauzer, dachshund, rottweiler, canine, pitbull, collie, pug, terrier, poodle, labrador, doggie, doberman, mutt, doggy, spaniel, bulldog, sheepdog, weimaraner, corgi, cocker, greyhound, retriever, brindle, hound, whippet, husky
horse, colt, pony, racehorse, stallion, equine, mare, foal, palomino, mustang, clydesdale, bronc, bronco
sheep, lamb, ram, lamb, goat, ewe
cow, cattle, oxen, ox, calf, cattle, holstein, heifer, buffalo, bull, zebu, bison 
elephant
bear, panda
zebra
giraffe
backpack, knapsack
umbrella
handbag, wallet, purse, briefcase
tie, bow, bow tie
suitcase, suit case, luggage
frisbee
skis, ski
snowboard
sports ball, ball
kite
baseball bat
baseball glove
skateboard
surfboard, longboard, skimboard, shortboard, wakeboard
tennis racket, racket
bottle
wine glass
cup
fork
knife, pocketknife, knive
spoon
bowl, container
banana
apple
sandwich, burger, sub, cheeseburger, hamburger
orange
broccoli
carrot
hot dog
pizza
donut, doughnut, bagel
cake,  cheesecake, cupcake, shortcake, coffeecake, pancake
chair, seat, stool
couch, sofa, recliner, futon, loveseat, settee, chesterfield 
potted plant, houseplant
bed
dining table, table, desk
toilet, urinal, commode, toilet, lavatory, potty
tv, monitor, televison, television
laptop, computer, notebook, netbook, lenovo, macbook, laptop computer
mouse
remote
keyboard
cell phone, mobile phone, phone, cellphone, telephone, phon, smartphone, iPhone
microwave
oven, stovetop, stove, stove top oven
toaster
sink
refrigerator, fridge, fridge, freezer
book
clock
vase
scissors
teddy bear, teddybear
hair drier, hairdryer
toothbrush
"""


def _read(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        words = [w.strip().lower() for w in line.split(",") if w.strip()]
        for w in words:
            out[w] = words[0]
    return out


CLASS_OF: dict[str, str] = _read(SYNONYMS_TXT)        # word (singular, as `singularize` spells it) -> COCO class
COCO_CLASSES: tuple[str, ...] = tuple(dict.fromkeys(CLASS_OF.values()))

# Their rules: pairs of words read as one ("hot dog" -> the class hot dog, never a dog) or as the
# second ("baby elephant" -> elephant: a qualifier, not a person).
_DOUBLE = ["motor bike", "motor cycle", "air plane", "traffic light", "street light", "traffic signal", "stop light",
           "fire hydrant", "stop sign", "parking meter", "suit case", "sports ball", "baseball bat", "baseball glove",
           "tennis racket", "wine glass", "hot dog", "cell phone", "mobile phone", "teddy bear", "hair drier",
           "potted plant", "bow tie", "laptop computer", "stove top oven", "home plate"]
_ANIMALS = ["bird", "cat", "dog", "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "animal", "cub"]
DOUBLE_WORDS: dict[str, str] = {**{w: w for w in _DOUBLE},
                                **{f"{q} {a}": a for a in _ANIMALS for q in ("baby", "adult")},
                                **{f"passenger {v}": v for v in ("jet", "train")},
                                "bow tie": "tie", "toilet seat": "toilet"}

# Plurals the suffix rules below would get wrong, for the words the synonym list has.
_IRREGULAR = {"men": "man", "women": "woman", "children": "child", "people": "people", "feet": "foot", "geese": "goose",
              "mice": "mouse", "knives": "knife", "pocketknives": "pocketknife", "calves": "calf", "wolves": "wolf",
              "leaves": "leaf", "shelves": "shelf", "halves": "half", "loaves": "loaf", "wives": "wife",
              "buses": "bus", "minibuses": "minibus", "teeth": "tooth", "oxen": "oxen", "cacti": "cactus",
              "ponies": "pony", "skis": "ski", "scissors": "scissors", "ties": "tie", "pies": "pie"}
_KEEP = ("ss", "us", "is", "ous")   # singular words ending in s ("glass", "bus", "tennis")


def singularize(word: str) -> str:
    """A word's singular, for looking it up in the synonym list ("dogs" -> "dog", "puppies" ->
    "puppy", "policemen" -> "policeman", "benches" -> "bench", "horses" -> "horse")."""
    w = word.lower()
    if w in _IRREGULAR:
        return _IRREGULAR[w]
    if w.endswith("men") and len(w) > 4:
        return w[:-3] + "man"
    if len(w) < 4 or not w.endswith("s") or w.endswith(_KEEP):
        return w
    if w.endswith("ies"):
        return w[:-3] + "y"
    if w.endswith(("sses", "ches", "shes", "xes", "zzes")):
        return w[:-2]
    return w[:-1]


class Mention(NamedTuple):
    """One object a caption names: the word(s) as said, its COCO class, and the index of the
    caption word that ends it (the "dog" of "hot dog": where a word-level view shows it)."""
    words: str
    coco_class: str
    last: int


def mentions(words: list[str]) -> list[Mention]:
    """Every COCO object a caption's words name, in order, by Rohrbach et al.'s rules: each word
    singularized; a pair in DOUBLE_WORDS read as one; a seat beside a toilet is no chair."""
    singular = [singularize(w) for w in words]
    merged: list[tuple[str, str, int]] = []   # (as said, as read, last index)
    i = 0
    while i < len(singular):
        pair = " ".join(singular[i:i + 2])
        if i + 1 < len(singular) and pair in DOUBLE_WORDS:
            merged.append((" ".join(words[i:i + 2]), DOUBLE_WORDS[pair], i + 1))
            i += 2
        else:
            merged.append((words[i], singular[i], i))
            i += 1
    read = [r for _, r, _ in merged]
    if "toilet" in read:
        merged = [m for m in merged if m[1] != "seat"]
    return [Mention(said, CLASS_OF[r], last) for said, r, last in merged if r in CLASS_OF]


def word_classes(words: list[str]) -> list[str | None]:
    """Per caption word, the COCO class of the object it ends (None for every other word): the
    word-level form of `mentions`, for views and measures that go word by word."""
    out: list[str | None] = [None] * len(words)
    for m in mentions(words):
        out[m.last] = m.coco_class
    return out
