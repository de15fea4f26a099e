"""What to require of a caption (constrained beam search, engine/constraints.py): words the user
names, or the classes the detector finds, as the nocaps Up-Down baseline builds its constraints
(class words and their plurals; a class counted once however many boxes it has; at most the top
`MOST` classes by score, above a score threshold); and what to rule out: the words of the classes the
detector reliably finds when it finds none of them (a caption's "man" on an empty street), and
<unk> (a word the model cannot name is no word to show)."""
from __future__ import annotations

from ..engine.constraints import Requirement, plural
from ..engine.vision.boxes import CONTEXT
from .grounding import SYNONYMS

MOST = 2              # classes required at most (the nocaps baseline uses 2-3)
THRESHOLD = 0.7       # detection score, chosen on dev-select (reports/guide/: the least BLEU lost, 0.3 / 0.5 / 0.7)
# Ruled out when the detector keeps no box of them (regions.SCORE_THRESHOLD, 0.2, its floor): the
# classes it finds on >= 95% of the dev-select photos whose references name them, of those named on
# >= 20 photos: person 97% (409 photos); the next, dog, 89% (118), sports ball 22%.
RULE_OUT = ("person",)
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
