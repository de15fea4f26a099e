"""Questions generated from captions: COCO-QA's method (Ren, Kiros and Zemel, NeurIPS 2015) on
Flickr8k's captions, by rules over their regular grammar, so no parser or model is needed.

A caption is read as `SUBJECT [MODIFIERS] [is|are] VERB [OBJECT] [PLACES]`:
- SUBJECT, OBJECT: a noun phrase, a determiner (a, an, the, two..ten) then words up to a
  preposition, a verb or a clause word; its last word is its head ("a black dog" -> dog);
- MODIFIERS: "in/with/wearing NP" after the subject ("a man in a red shirt");
- VERB: an -ing form, or an -s form whose base has an -ing form in the captions ("runs": "running").
Four question types, each with a one-word answer:
- object:   "a dog catches a frisbee" -> "what does the dog catch?" (frisbee), "what catches a frisbee?" (dog)
- number:   "two dogs run in the snow" -> "how many dogs run in the snow?" (two)
- colour:   "a man in a red shirt ..." -> "what colour is the man's shirt?" (red); "a black dog ..." -> "what
            colour is the dog?" (black); only a colour right before its noun, and a noun with two
            colours ("black and white") asks nothing
- location: "a dog runs on the beach" -> "where does the dog run?" (beach): `PLACES` nouns only.
A question is kept when at least `SUPPORT` of the photo's captions support its answer (they name the
answer, and for colour and number the noun asked about too), and refused when one photo's captions
give the same question two answers, or when it names its own answer ("what is chasing a black dog?"). Then, per type and split, no answer may be more than
`CAP_SHARE` of the type's questions (COCO-QA's down-sampling), so guessing the commonest answer scores low.
Splits follow the captions': train, dev-select, dev-report (datasets.half_of). Deterministic.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass

TYPES = ("object", "number", "colour", "location")
# No answer more than this share of its type's questions (about 1/3 of the answers a type has in common use).
CAP_SHARE = {"object": 0.05, "number": 0.4, "colour": 0.15, "location": 0.1}
SUPPORT = 2                      # captions of the photo that must support an answer
MIN_WORDS = 4                    # shorter questions are dropped (COCO-QA: 5, their questions are longer)
NUMBERS = ("two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
COLOURS = ("black", "white", "red", "blue", "green", "yellow", "brown", "orange", "pink", "purple", "gray", "tan")
COLOUR_ALIASES = {"grey": "gray"}
SINGULAR_DETS = ("a", "an", "the", "one")
POSSESSIVES = ("his", "her", "their", "its")
DETERMINERS = SINGULAR_DETS + NUMBERS + POSSESSIVES + ("another", "some", "several", "many")
PREPOSITIONS = ("out", "in", "on", "at", "through", "across", "along", "near", "into", "onto", "by", "over", "under",
                "down", "up", "behind", "beside", "inside", "outside", "around", "from", "with", "of", "off",
                "toward", "towards", "past", "between", "above", "against", "next", "while", "during", "to", "for")
STOP_REST = (",", "while", "as", "and", "who", "that", "because")   # a question's verb phrase ends there
CLAUSE = (",", "and", "who", "that", "while", "as", "wearing", "holding", "is", "are")
# Where things happen, as the captions say it (a place you can be in or on, seen in the photo).
PLACES = frozenset("""beach grass snow water field street road park pool ocean river sand lake mountain hill trail
sidewalk city stage yard dirt forest woods track fountain room floor bed couch court ice waves surf pond creek
stream desert mud leaves lawn playground garden kitchen restaurant store market bridge rocks shore sea
sky ramp rink meadow alley parking lot bench grassy hillside path""".split()) - {"parking", "lot", "grassy"}
# Heads that name no thing one can point at: no question asks for them or about them.
VAGUE = frozenset("""group couple pair bunch lot crowd side front top middle edge area picture photo view
something someone one other others kind type back end part each all camera air distance line team""".split())
IRREGULAR = {"men": "man", "women": "woman", "children": "child", "people": "person", "feet": "foot",
             "teeth": "tooth", "geese": "goose", "mice": "mouse"}


@dataclass(frozen=True)
class Question:
    photo: str          # the photo's path, as the caption set names it
    type: str           # one of TYPES
    question: str
    answer: str
    support: int        # how many of the photo's captions support the answer


def words_of(caption: str) -> list[str]:
    """Lower-case words with commas kept (they end phrases), "man's" one word; other punctuation dropped."""
    return re.findall(r"[a-z]+(?:'s)?|,", caption.lower().replace("-", " ").replace("\u2019", "'"))


def singular(noun: str) -> str:
    if noun in IRREGULAR:
        return IRREGULAR[noun]
    if noun.endswith("ies") and len(noun) > 4:
        return noun[:-3] + "y"
    if noun.endswith(("ches", "shes", "sses", "xes")):
        return noun[:-2]
    if noun.endswith("s") and not noun.endswith(("ss", "us", "is")) and len(noun) > 3:
        return noun[:-1]
    return noun


def verb_bases(captions) -> frozenset[str]:
    """Every base form an -ing word of the captions may come from ("running" -> run, runn;
    "riding" -> rid, ride): a -s word is a verb when its base is one of them."""
    bases = set()
    for caption in captions:
        for w in words_of(caption):
            if w.endswith("ing") and len(w) > 5:
                stem = w[:-3]
                bases.update({stem, stem + "e"})
                if len(stem) > 2 and stem[-1] == stem[-2]:
                    bases.add(stem[:-1])
    return frozenset(bases)


def base_form(verb: str) -> str:
    """ "catches" -> catch, "carries" -> carry, "runs" -> run (no check that it is a verb)."""
    if verb.endswith("ies"):
        return verb[:-3] + "y"
    if verb.endswith(("ches", "shes", "sses", "xes", "zes", "oes")):
        return verb[:-2]
    return verb[:-1] if verb.endswith("s") else verb


@dataclass
class Phrase:
    words: list[str]    # determiner first
    end: int            # index after the phrase

    @property
    def head(self) -> str:
        return self.words[-1]

    @property
    def colour(self) -> str | None:
        """The phrase's one colour, when it stands right before the head ("a red shirt"; not "a black and
        white dog", "a red and blue shirt", nor a head the rules misread: "a white rocket launches")."""
        found = [COLOUR_ALIASES.get(w, w) for w in self.words[1:-1] if COLOUR_ALIASES.get(w, w) in COLOURS]
        before = COLOUR_ALIASES.get(self.words[-2], self.words[-2]) if len(self.words) > 2 else None
        return before if len(found) == 1 and before in COLOURS and "and" not in self.words else None

    @property
    def plural(self) -> bool:
        return self.words[0] in NUMBERS or (self.words[0] not in SINGULAR_DETS and singular(self.head) != self.head)


class CaptionReader:
    """Reads captions into the parts the question rules use (module docstring)."""

    def __init__(self, bases: frozenset[str]):
        self.bases = bases

    def is_verb(self, w: str, plural: bool = False) -> bool:
        """An -ing form, an -s form of a verb, or after a plural subject a base form ("two dogs run")."""
        return (w.endswith("ing") and len(w) > 5) or (w.endswith("s") and len(w) > 3 and base_form(w) in self.bases) \
            or (plural and w in self.bases and not w.endswith("s"))

    def phrase(self, words: list[str], i: int) -> Phrase | None:
        """The noun phrase starting at i (a determiner), or None."""
        if i >= len(words) or words[i] not in DETERMINERS:
            return None
        j = i + 1
        while j < len(words):
            w = words[j]
            between_colours = w == "and" and j + 1 < len(words) and words[j - 1] in COLOURS and words[j + 1] in COLOURS
            if w in PREPOSITIONS or w in DETERMINERS or (w in CLAUSE and not between_colours) or \
                    (j > i + 1 and self.is_verb(w, plural=singular(words[j - 1]) != words[j - 1])) or \
                    (w.endswith("ing") and len(w) > 5):
                break
            j += 1
        if j > i + 2 and words[j - 1].endswith("ly") and j < len(words) and self.is_verb(words[j]):
            j -= 1                                         # "a hiker carefully walks": the adverb is no head
        if j == i + 1 or words[j - 1] in COLOURS or words[j - 1].endswith("ed"):
            return None
        return Phrase(words[i:j], j)

    def read(self, caption: str) -> dict | None:
        words = words_of(caption)
        subject = self.phrase(words, 0)
        if subject is None or subject.head in VAGUE:
            return None
        parts = {"subject": subject, "modifiers": [], "aux": None, "verb": None, "object": None, "places": [],
                 "rest": []}
        i = subject.end
        while i < len(words) and words[i] in ("in", "with", "wearing"):       # "a man in a red shirt"
            mod = self.phrase(words, i + 1)
            if mod is None:
                break
            parts["modifiers"].append(mod)
            i = mod.end
        if i < len(words) and words[i].endswith("ly"):
            i += 1                                         # the adverb before the verb
        if i < len(words) and words[i] in ("is", "are"):
            parts["aux"], i = words[i], i + 1
        if i >= len(words) or not self.is_verb(words[i], subject.plural) or (parts["aux"] and not words[i].endswith("ing")):
            return parts                                   # no verb, or "is black"
        implied = words[i].endswith("ing") and parts["aux"] is None
        if implied:                                        # "a man sitting on a bench": "is" understood
            parts["aux"] = "is"
        parts["verb"], i = words[i], i + 1
        rest = words[i:]
        if "is" in rest or "are" in rest or (implied and any(self.is_verb(w) and not w.endswith("ing") for w in rest)):
            return None                    # "the man reading a magazine is sitting", "a woman carrying a bag sits"
        cut = next((k for k, w in enumerate(rest) if w in STOP_REST and not
                    (w == "and" and 0 < k < len(rest) - 1 and rest[k - 1] in COLOURS and rest[k + 1] in COLOURS)), len(rest))
        parts["rest"] = rest[:cut]
        if cut and (rest[cut - 1] in DETERMINERS or rest[cut - 1] in COLOURS or rest[cut - 1] in PREPOSITIONS):
            parts["rest"] = []                             # cut inside a phrase: no question reads it
        parts["object"] = self.phrase(words, i)
        if parts["object"] is None and parts["rest"] and parts["rest"][0] not in PREPOSITIONS:
            parts["rest"] = []                             # an object the rules do not read ("puts on sunglasses")
        j = parts["object"].end if parts["object"] else i
        while j < len(words):
            if words[j] in PREPOSITIONS and words[j] not in ("with", "of", "to", "for"):
                place = self.phrase(words, j + 1)
                if place is not None:
                    parts["places"].append((words[j], place))
                    j = place.end
                    continue
            j += 1
        return parts


def _the(phrase: Phrase) -> str:
    """The phrase as a question names it: "a black dog" -> "the black dog", "two dogs" -> "the two dogs"."""
    if phrase.words[0] in POSSESSIVES:
        return " ".join(phrase.words)                     # "his arm"
    body = phrase.words[1:] if phrase.words[0] in SINGULAR_DETS + ("another", "some", "several", "many") else phrase.words
    return "the " + " ".join(body)


def _rest(words: list[str]) -> str:
    return " ".join(w for w in words if w != ",").strip()


def questions_of(parts: dict) -> list[tuple[str, str, str, str]]:
    """(type, question, answer, noun asked about) from one read caption."""
    out = []
    s = parts["subject"]
    plural, verb, aux = s.plural, parts["verb"], parts["aux"]
    if s.colour:
        out.append(("colour", f"what colour {'are' if plural else 'is'} the {s.head}?", s.colour, s.head))
    for mod in parts["modifiers"]:
        if not plural and mod.colour and mod.head not in VAGUE:
            out.append(("colour", f"what colour is the {s.head}'s {mod.head}?", mod.colour, mod.head))
    if verb is None:
        return out
    rest = _rest(parts["rest"])
    if s.words[0] in NUMBERS and rest:
        lead = f"are {verb}" if aux else verb
        out.append(("number", f"how many {s.head} {lead} {rest}?", s.words[0], s.head))
    if s.words[0] in SINGULAR_DETS and rest and singular(s.head) not in VAGUE:
        lead = f"is {verb}" if aux else verb
        out.append(("object", f"what {lead} {rest}?", singular(s.head), s.head))
    asked = (f"{'are' if plural else 'is'} {_the(s)} {verb}" if aux
             else f"{'do' if plural else 'does'} {_the(s)} {base_form(verb) if not plural else verb}")
    o = parts["object"]
    if o is not None and o.head not in VAGUE and o.head not in PLACES and o.head != s.head:
        out.append(("object", f"what {asked}?", singular(o.head), o.head))
        if o.colour:
            clause = f"{_the(s)} {('are' if plural else 'is') + ' ' if aux else ''}{verb}"   # "the dog is catching"
            out.append(("colour", f"what colour {'are' if o.plural else 'is'} the {o.head} {clause}?", o.colour, o.head))
    places = [p for _, p in parts["places"] if p.head in PLACES]
    if len(places) == 1:
        what = f" {_the(o)}" if o is not None and o.head not in PLACES else ""   # "where is the man riding the bike?"
        out.append(("location", f"where {asked}{what}?", places[0].head, places[0].head))
    return out


def supports(caption: str, qtype: str, answer: str, noun: str) -> bool:
    """Does this caption say the same: it names the answer (and, for colour and number, near the noun)?"""
    words = [COLOUR_ALIASES.get(w, w) for w in words_of(caption)]
    if qtype in ("object", "location"):
        return answer in words or any(singular(w) == answer for w in words)
    nouns = {noun, singular(noun)}
    for i, w in enumerate(words):
        if w == answer and any(singular(x) in nouns or x in nouns for x in words[i + 1:i + 4]):
            return True
    return False


def names_its_answer(text: str, answer: str) -> bool:
    """Does the question say its own answer ("what is chasing a black dog on the sand?" -> dog)? Then
    it tests reading, not looking."""
    return any(w == answer or singular(w) == answer for w in words_of(text))


def photo_questions(photo: str, captions: list[str], reader: CaptionReader) -> list[Question]:
    """The questions a photo's captions give and agree on (none that names its answer)."""
    found: dict[str, set] = defaultdict(set)
    for caption in captions:
        parts = reader.read(caption)
        for qtype, text, answer, noun in questions_of(parts) if parts else []:
            if len(text.split()) >= MIN_WORDS and not names_its_answer(text, answer):
                found[(qtype, text)].add((answer, noun))
    out = []
    for (qtype, text), answers in sorted(found.items()):
        if len({a for a, _ in answers}) != 1:
            continue          # the captions disagree: ambiguous
        answer, noun = sorted(answers)[0]
        n = sum(supports(c, qtype, answer, noun) for c in captions)
        if n >= SUPPORT:
            out.append(Question(photo, qtype, text, answer, n))
    return out


def _rank(q: Question) -> str:
    return hashlib.sha256(f"{q.photo}\t{q.question}".encode()).hexdigest()


def answer_limit(counts: list[int], share: float) -> int:
    """The largest count per answer such that, with every answer capped at it, no answer is more
    than `share` of the type's questions (at least 1 per answer)."""
    limit = max(counts, default=0)
    while limit > 1 and limit > share * sum(min(c, limit) for c in counts):
        limit -= 1
    return limit


def cap_answers(questions: list[Question]) -> list[Question]:
    """Per type, no answer more than `CAP_SHARE` of the type (COCO-QA's down-sampling of the commonest
    answers); which questions stay is a deterministic choice by a hash of photo and question."""
    kept = []
    for qtype in TYPES:
        of_type = [q for q in questions if q.type == qtype]
        limit = answer_limit(list(Counter(q.answer for q in of_type).values()), CAP_SHARE[qtype])
        taken: Counter = Counter()
        for q in sorted(of_type, key=_rank):
            if taken[q.answer] < limit:
                taken[q.answer] += 1
                kept.append(q)
    return sorted(kept, key=lambda q: (q.photo, q.type, q.question))


def generate(data, splits=("train", "dev-select", "dev-report")) -> dict[str, list[Question]]:
    """The questions of every split (a `CaptionSet`), capped per split."""
    reader = CaptionReader(verb_bases(c for p in data.split("train") for c in data.captions[p]))
    return {name: cap_answers([q for p in data.split(name) for q in photo_questions(p, data.captions[p], reader)])
            for name in splits}


def write(out: str, sets: dict[str, list[Question]], root: str) -> None:
    """One JSON file: {"about", "splits": {name: [question, ...]}} with photo paths relative to `root`."""
    import os
    about = ("questions generated from captions (COCO-QA's method on Flickr8k, viewer/data/questions.py); "
             "not a VQA data set: never compare its accuracy with VQA v2's")
    splits = {name: [{**asdict(q), "photo": os.path.relpath(q.photo, root)} for q in qs] for name, qs in sets.items()}
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"about": about, "types": TYPES, "splits": splits}, f, indent=0)


def read(path: str, root: str) -> dict[str, list[Question]]:
    """What `write` wrote, photo paths joined to `root` again; a bad file is one ValueError."""
    import os
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
        return {name: [Question(**{**q, "photo": os.path.join(root, q["photo"])}) for q in qs]
                for name, qs in obj["splits"].items()}
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not a questions file written by qa-data ({type(err).__name__}: {err})") from None
