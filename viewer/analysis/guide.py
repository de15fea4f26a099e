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
from .grounding import SYNONYMS

MOST = 2              # classes required at most (the nocaps baseline uses 2-3)
# What guidance asks, chosen on dev-select (`make guide-choice`, reports/guide/choice.json; updown,
# beam 3): the lowest CHAIR_s of the rules that keep BLEU-4 within 0.5 and object recall within a
# point of plain decoding (plain: CHAIR_s 0.145, recall 0.784, BLEU-4 19.45): rule out every class
# the detector keeps no box of (its floor, regions.SCORE_THRESHOLD 0.2), require its top classes
# scoring >= 0.8, say no trigram twice: 0.062 / 0.783 / 19.01. Ruling out person only made CHAIR_s
# worse (0.153: the models name the next thing their prior holds, a dog); every class, nothing
# required: 0.035 but recall 0.756; requiring from 0.7: BLEU-4 18.87, from 0.9: recall 0.774.
THRESHOLD = 0.8
RULE_OUT = tuple(sorted(set(SYNONYMS.values())))
# Words for a class that CHAIR's synonym list (grounding.SYNONYMS) lacks, ruled out with it: ruling
# out "man" alone, the models said "hikers", "cyclists", "a motorcycle racer" of empty scenes.
# (Not "couple", "group", "they", "boxer", "fan": as often not people in Flickr8k's captions.)
MORE_WORDS = {"person": (
    "hiker", "hikers", "cyclist", "cyclists", "bicyclist", "bicyclists", "motorcyclist", "motorcyclists", "racer",
    "racers", "skateboarder", "skateboarders", "snowboarder", "snowboarders", "swimmer", "swimmers", "team", "teams",
    "family", "worker", "workers", "dancer", "dancers", "musicians", "performer", "soldier", "spectators", "friend",
    "friends", "adult", "adults", "teenager", "teenagers", "teen", "students", "athlete", "athletes", "runner",
    "runners", "jockey", "jockeys", "cowboy", "audience", "fans", "rollerblader", "skater", "skaters", "wrestler",
    "wrestlers", "pedestrian", "pedestrians", "gymnast", "officer", "officers", "policeman", "police", "mother",
    "father", "daughter", "son", "sister", "brother", "mom", "infant", "individuals", "someone", "bride", "groom",
    "vendor", "kayaker", "goalie", "skiers", "female", "females", "male", "males", "gentleman", "he", "she")}
UNKNOWN = "<unk>"
NO_REPEAT = 3   # guided decoding says no token trigram twice: ruled out of its favourite words, a model loops
CLASS_WORDS = {c: sorted({w for w, k in SYNONYMS.items() if k == c} | {plural(w) for w, k in SYNONYMS.items() if k == c})
               for c in set(SYNONYMS.values())}


def user_words(text: str) -> list[Requirement]:
    """--include "bear,teddy bear|teddy": one constraint per comma; "|" joins words any of which
    will do; a single word also accepts its plural."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        words = [w.strip().lower() for w in part.split("|") if w.strip()]
        if words:
            out.append((words if len(words) > 1 else [words[0], plural(words[0])], "user"))
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


def guided_settings(settings):
    """The decode settings of a caption the detector guides: `settings`, no trigram said twice."""
    return replace(settings, no_repeat=NO_REPEAT) if settings.searches else settings
