"""CHAIR as Rohrbach et al. publish it (data/chair.py): their synonym list, two-word objects and
rules, every mention counted. The expected counts are worked by hand through their `chair.py`
(`caption_to_words`, `compute_chair`) for each caption below."""
import pytest

from viewer.data.chair import CLASS_OF, COCO_CLASSES, mentions, singularize, word_classes
from viewer.analysis.hallucination import caption_objects, hallucination_block, mentioned
from viewer.engine.vocab import tokenize

# (caption, what is there (a reference naming it), the classes of its mentions by their rules, how many are not there)
CASES = [
    ("a man riding a horse", "a person on a horse", ["person", "horse"], 0),
    ("a hot dog on a plate next to a dog", "a hot dog", ["hot dog", "dog"], 1),               # a hot dog is no dog
    ("a teddy bear sitting on a bed", "a teddy bear", ["teddy bear", "bed"], 1),              # nor a bear
    ("a baby elephant walking with its mother", "an elephant", ["elephant", "person"], 1),    # baby: a qualifier
    ("two black poodles playing with a frisbee", "a dog", ["dog", "frisbee"], 1),             # the long list
    ("a toilet seat in a small bathroom", "a toilet", ["toilet"], 0),                         # no chair
    ("a man and a woman and a child", "people", ["person", "person", "person"], 0),           # every mention
    ("a dog chasing another dog", "a cat", ["dog", "dog"], 2),
    ("a passenger jet flying in the sky", "an airplane", ["airplane"], 0),                    # no passenger
    ("people sitting at a table with wine glasses", "people at a table", ["person", "dining table", "wine glass"], 1),
    ("a kitten on a sofa near a tv", "a cat on a couch", ["cat", "couch", "tv"], 1),
    ("a stop sign next to a fire hydrant and a traffic light", "a stop sign by a fire hydrant",
     ["stop sign", "fire hydrant", "traffic light"], 1),
    ("a motor bike parked by a bus", "a motorcycle and a bus", ["motorcycle", "bus"], 0),
]


def test_their_list_is_whole():
    assert len(COCO_CLASSES) == 80 and len(CLASS_OF) > 390
    assert CLASS_OF["jetliner"] == "airplane" and CLASS_OF["poodle"] == "dog" and CLASS_OF["teddy bear"] == "teddy bear"


@pytest.mark.parametrize("caption,there,classes,wrong", CASES)
def test_each_caption_names_what_their_rules_say(caption, there, classes, wrong):
    assert mentioned(caption) == classes
    assert len(caption_objects(caption, [there])["hallucinated"]) == wrong


def test_chair_counts_every_mention_as_theirs_does():
    """Over the dozen: 28 mentions, 9 of them not there (CHAIR_i 9/28); 8 of 13 captions name
    something not there (CHAIR_s)."""
    captions = {str(i): c for i, (c, *_) in enumerate(CASES)}
    references = {str(i): [there] for i, (_, there, *_) in enumerate(CASES)}
    block = hallucination_block(captions, references)
    assert block["object_mentions"] == 28
    assert block["chair_i"] == pytest.approx(round(9 / 28, 4)) and block["chair_s"] == pytest.approx(round(8 / 13, 4))


def test_singular_forms_of_the_lists_words():
    for plural, singular in [("dogs", "dog"), ("puppies", "puppy"), ("policemen", "policeman"), ("benches", "bench"),
                             ("horses", "horse"), ("buses", "bus"), ("glasses", "glass"), ("knives", "knife"),
                             ("geese", "goose"), ("skis", "ski"), ("ties", "tie"), ("stoves", "stove"), ("bus", "bus")]:
        assert singularize(plural) == singular


def test_word_by_word_the_class_sits_on_the_word_that_ends_the_object():
    words = tokenize("a hot dog and a baby elephant near a toilet seat")
    assert [c for c in word_classes(words)] == [None, None, "hot dog", None, None, None, "elephant", None, None,
                                                 None, "toilet"]
    assert [m.words for m in mentions(words)] == ["hot dog", "baby elephant", "toilet seat"]
