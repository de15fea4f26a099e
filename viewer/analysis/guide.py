"""What to require of a caption (constrained beam search, engine/constraints.py): words the user
names, or the classes the detector finds, as the nocaps Up-Down baseline builds its constraints
(class words and their plurals; a class counted once however many boxes it has; at most the top
`MOST` classes by score, above a score threshold); and what to rule out: the words of every class
the detector keeps no box of (a caption's "man" on an empty street, "dog" of a cat), and <unk> (a
word the model cannot name is no word to show)."""
from __future__ import annotations

from dataclasses import replace

from ..engine.constraints import Requirement, plural
from ..engine.vision.boxes import CONTEXT
from ..data.chair import CLASS_OF, COCO_CLASSES
from .grounding import word_class

MOST = 2              # classes required at most (the nocaps baseline uses 2-3)
# What guidance asks, chosen on dev-select (`make guide-choice`, reports/guide/choice.json; updown,
# beam 3): the lowest CHAIR_s of the rules that keep BLEU-4 within 0.5 and object recall within a
# point of plain decoding (plain: CHAIR_s 0.145, recall 0.784, BLEU-4 19.45): rule out every class
# the detector keeps no box of (its floor, regions.SCORE_THRESHOLD 0.2), require its top classes
# scoring >= 0.8, say no trigram twice: 0.062 / 0.783 / 19.01. Ruling out person only made CHAIR_s
# worse (0.153: the models name the next thing their prior holds, a dog); every class, nothing
# required: 0.035 but recall 0.756; requiring from 0.7: BLEU-4 18.87, from 0.9: recall 0.774.
THRESHOLD = 0.8
RULE_OUT = tuple(sorted(COCO_CLASSES))
# Words for a class beyond CHAIR's synonym list (chair.py), ruled out with it: ruling out "man"
# alone, the models said "hikers", "cyclists", "a motorcycle racer" of empty scenes.
# (Not "couple", "group", "they", "boxer", "fan": as often not people in Flickr8k's captions.)
MORE_WORDS = {"person": (
    "hiker", "hikers", "cyclist", "cyclists", "motorcyclist", "motorcyclists", "racer", "racers", "surfer", "surfers",
    "climber", "climbers", "crowd", "toddler", "toddlers", "swimmer", "swimmers", "team", "teams", "family",
    "dancer", "dancers", "musicians", "performer", "spectators", "friend", "friends", "teen", "athlete", "athletes",
    "runner", "runners", "jockey", "jockeys", "audience", "fans", "rollerblader", "wrestler", "wrestlers",
    "pedestrian", "pedestrians", "gymnast", "police", "daughter", "son", "brother", "mom", "infant", "individuals",
    "someone", "vendor", "kayaker", "goalie", "he", "she"),
    "cat": ("kitty", "kitties"), "cup": ("mug", "mugs")}
UNKNOWN = "<unk>"
NO_REPEAT = 3   # guided decoding says no token trigram twice: ruled out of its favourite words, a model loops
IRREGULAR = {"child": "children", "goose": "geese", "mouse": "mice", "knife": "knives", "pocketknife": "pocketknives",
             "calf": "calves", "person": "people", "sheep": "sheep", "foot": "feet"}


def plurals(word: str) -> set[str]:
    """A class word and its plural ("man" -> "men", "puppy" -> "puppies", "child" -> "children")."""
    many = IRREGULAR.get(word) or (word[:-3] + "men" if word.endswith("man") else plural(word))
    return {word, many}


# Each class's words and their plurals, the class's own name first (what a line says it requires).
CLASS_WORDS = {c: sorted(set().union(*(plurals(w) for w, k in CLASS_OF.items() if k == c)), key=lambda w: (w != c, w))
               for c in COCO_CLASSES}


def user_words(text: str) -> list[Requirement]:
    """--include "bear,teddy bear|teddy": one constraint per comma; "|" joins words any of which
    will do; a single word also accepts its plural."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        words = [w.strip().lower() for w in part.split("|") if w.strip()]
        if words:
            out.append((words if len(words) > 1 else [words[0], *sorted(plurals(words[0]) - {words[0]})], "user"))
    if not out:
        raise ValueError("--include: name at least one word (comma-separated; 'a|b' for either)")
    return out


def sayable(vocab, required: list[Requirement]) -> list[Requirement]:
    """The constraints a model can meet: those with a word its vocabulary has (the rest dropped)."""
    from ..engine.constraints import word_tokens
    return [(words, source) for words, source in required if any(word_tokens(vocab, w) for w in words)]


def detected_words(regions, threshold: float = THRESHOLD, most: int = MOST) -> list[Requirement]:
    """The detector's classes above `threshold` (best score first, each class once, at most `most`)
    as constraints of their words; classes no caption word names are skipped."""
    best: dict[str, float] = {}
    for label, score in zip(regions.labels, regions.scores):
        if label not in CONTEXT and label in CLASS_WORDS and score >= threshold:
            best[label] = max(best.get(label, 0.0), float(score))
    ranked = sorted(best, key=lambda c: -best[c])[:most]
    return [(CLASS_WORDS[c], "detector") for c in ranked]


def guidance(vocab, regions, threshold: float = THRESHOLD, most: int = MOST,
             rule_out=RULE_OUT) -> tuple[list[Requirement], list[str]]:
    """What the detector says a caption must name (its top classes the model can say) and must not
    say (`unseen_words`): every guided caption's constraints, from the app, the command line,
    evaluation and the benchmark alike."""
    return sayable(vocab, detected_words(regions, threshold, most)), unseen_words(regions, rule_out)


def unseen_words(regions, classes=RULE_OUT) -> list[str]:
    """The words a caption guided by the detector must not say: those of each class in `classes`
    the detector kept no box of (CLASS_WORDS and MORE_WORDS), and <unk>."""
    seen = set(regions.labels)
    return [w for c in classes if c not in seen for w in CLASS_WORDS[c] + list(MORE_WORDS.get(c, ()))] + [UNKNOWN]


def user_wins(avoid: list[str], asked: list[Requirement]) -> tuple[list[str], list[str]]:
    """The words to avoid, less those of every class a user's required word names: where the user
    and the detector disagree, the user's word is never ruled out. Returns (the words still
    avoided, the classes taken back for the user)."""
    mine = {word_class(w) or w for words, source in asked if source == "user" for w in words}
    kept = [w for w in avoid if (word_class(w) or w) not in mine]
    return kept, sorted(mine & {word_class(w) or w for w in avoid})


def overruled_note(classes: list[str]) -> str:
    """Says who won where the user's words and the detector disagree (empty when they do not)."""
    return (f"Your words win: {', '.join(classes)} may be said though the detector sees none."
            if classes else "")


def guided_settings(settings):
    """The decode settings of a caption the detector guides: `settings`, no trigram said twice."""
    return replace(settings, no_repeat=NO_REPEAT) if settings.searches else settings
