"""The word layer (engine/words.py) with REAL sub-word tokenizers trained here, offline, on
Flickr8k-style captions kept with the tests (CORPUS, so they run on every clone): a byte-level
BPE (GPT-2's kind, 'Ġ' starts a word) behind a tiny ViT + GPT-2, and a WordPiece vocabulary (BERT's kind, '##' continues a word) behind a tiny BLIP. Both split
"bicycle" and "porch" into several tokens.

Every word-level result must equal what the same words give with a one-step-per-word model: here
the same trace collapsed to one step per word, each word keeping its FIRST token's map.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from conftest import CAPTIONS  # noqa: E402
from test_hf import COFFEE, write_tiny, write_tiny_blip  # noqa: E402
from viewer.engine.images import load_photo  # noqa: E402
from viewer.engine.pipeline import Captioner  # noqa: E402
from viewer.engine.trace import AttentionTrace, TraceStep  # noqa: E402
from viewer.engine.vocab import tokenize  # noqa: E402

CAPTION = "a dog sits on a porch next to a red bicycle"
# Flickr8k-style captions the tokenizers learn from, here with the tests so they run on any clone.
# "porch" and "bicycle" are rare in them, so both tokenizers split those words into pieces.
CORPUS = [c for caps in CAPTIONS.values() for c in caps] + """\
a black dog is running after a white dog in the snow
a dog runs on the beach next to the water
two dogs are playing in the grass
a brown dog is jumping to catch a ball
a little girl in a pink dress is climbing up a set of stairs
a man in a red shirt is riding a bike down a dirt road
a man sits on a bench in front of a red building
a woman is walking her dog on the street
a group of people are standing in front of a large building
a boy in a blue shirt is jumping into a swimming pool
two children are sitting on a bench in the park
a man is riding a surfboard on a wave
a young boy is playing soccer on a field of grass
a girl with a red hat is smiling at the camera
a white dog is running through the water
a man in a black jacket is standing on the sidewalk
a woman in a white dress is sitting on the grass
a dog is carrying a stick in its mouth
people are walking down a busy city street
a child is sliding down a red slide
a man on a bicycle rides past a house with a porch
the black dog sits next to the brown dog on the grass
a man's hand holds a light-colored ball
a tri-colored dog plays with a girl's toy on a snow-covered hill""".splitlines()


def caption_lines() -> list[str]:
    return [c.lower() for c in CORPUS]


def caption_bpe():
    """A byte-level BPE of 400 tokens learnt on CORPUS."""
    from tokenizers import ByteLevelBPETokenizer
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(caption_lines(), vocab_size=400, min_frequency=2, special_tokens=["<|endoftext|>"],
                            show_progress=False)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<|endoftext|>",
                                                eos_token="<|endoftext|>")


def caption_wordpiece():
    """A WordPiece vocabulary of 400 learnt on CORPUS, with BLIP's [DEC] start token."""
    from tokenizers import BertWordPieceTokenizer
    wp = BertWordPieceTokenizer(lowercase=True)
    wp.train_from_iterator(caption_lines(), vocab_size=400, min_frequency=2, show_progress=False,
                           special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[DEC]"])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=wp._tokenizer, unk_token="[UNK]", pad_token="[PAD]",
                                                cls_token="[CLS]", sep_token="[SEP]", bos_token="[DEC]",
                                                mask_token="[MASK]")


@pytest.fixture(scope="module", params=["bpe-gpt2", "wordpiece-blip"])
def subword(request, tmp_path_factory):
    """(captioner, model name, photo, the forced trace of CAPTION) for each sub-word model."""
    folder = tmp_path_factory.mktemp(request.param)
    if request.param == "bpe-gpt2":
        write_tiny(folder, tokenizer=caption_bpe())
    else:
        write_tiny_blip(folder, tokenizer=caption_wordpiece())
    cap, model, photo = Captioner(device="cpu"), "hf:" + str(folder), load_photo(COFFEE)
    return cap, model, photo, cap.force([photo], model, [CAPTION])[0]


def one_step_per_word(trace: AttentionTrace) -> AttentionTrace:
    """The same caption as a whole-word model would trace it: one step per word, with its first token's map."""
    steps = [TraceStep(w.text if w.text != "<end>" else "<end>", -1, trace.steps[w.first].logprob,
                       trace.steps[w.first].attention, []) for w in trace.word_spans]
    return AttentionTrace("words", trace.attends_to, steps, trace.width, trace.height)


def test_steps_map_onto_the_captions_words(subword):
    _, _, _, trace = subword
    assert trace.words == tokenize(CAPTION)                       # the word layer reads the words back
    spans = trace.word_spans
    assert [t for w in spans for t in w.steps] == list(range(len(trace.steps)))   # every step in one word, in order
    assert spans[-1].text == "<end>" and spans[-1].first == len(trace.steps) - 1
    split = {w.text: w for w in spans if w.last > w.first}
    assert {"porch", "bicycle"} <= set(split)                      # the tokenizers really split these
    for w in spans[:-1]:
        pieces = "".join(trace.pieces[t] for t in w.steps).strip()
        assert pieces == w.text and trace.word_at(w.last) is w
    raw = [s.word for s in trace.steps]
    assert any(r.startswith(("Ġ", "##")) for r in raw)             # the raw tokens carry the markers ...
    assert not any(m in w for w in trace.words for m in ("Ġ", "##"))   # ... the words do not


def test_the_word_layer_round_trips_through_json(subword):
    _, _, _, trace = subword
    obj = json.loads(json.dumps(trace.to_json()))
    assert [w["text"] for w in obj["words"]][:-1] == tokenize(CAPTION) and "first token" in obj["word_map"]
    assert [s["word_index"] for s in obj["steps"]] == [trace._word_of[t] for t in range(len(trace.steps))]
    back = AttentionTrace.from_json(obj)
    assert back.word_spans == trace.word_spans and back.token_ids == trace.token_ids


def test_grounding_equals_the_one_step_per_word_trace(subword):
    """Detector-box grounding reads each word once, at its first token: the same figures as a
    whole-word trace of the same words."""
    from viewer.analysis.grounding import grounding
    from viewer.engine.vision.boxes import Regions
    _, _, _, trace = subword
    boxes = np.array([[0.1, 0.2, 0.6, 0.9], [0.5, 0.1, 0.95, 0.6]], np.float32)
    regions = Regions(boxes, ["dog", "bicycle"], np.array([0.9, 0.8], np.float32))
    ours, words = grounding(trace, regions), grounding(one_step_per_word(trace), regions)
    assert [g.word for g in ours] == ["dog", "bicycle"] and len(ours) == len(words)
    for a, b in zip(ours, words):
        assert a.step == trace.word_spans[b.step].first
        assert (a.word, a.inside, a.hit, a.centre_hit) == (b.word, b.inside, b.hit, b.centre_hit)


def test_boxes_ground_each_word_at_its_own_first_token(subword, tmp_path):
    from viewer.analysis.user_boxes import evaluate_user_boxes
    cap, model, photo, trace = subword
    boxes = {"coffee.jpg": {"caption": CAPTION, "boxes": {"dog": [10, 20, 200, 180], "bicycle": [100, 60, 300, 220]}}}
    os.symlink(COFFEE, tmp_path / "coffee.jpg")
    (tmp_path / "boxes.json").write_text(json.dumps(boxes))
    report = evaluate_user_boxes(cap, model, str(tmp_path / "boxes.json"))
    rows = report["per_photo"][0]["words"]
    first = {w.text: w.first for w in trace.word_spans}
    assert [(r["word"], r["step"]) for r in rows] == [("dog", first["dog"]), ("bicycle", first["bicycle"])]
    assert report["unknown_to_model"] == [] and all(r["model_word"] == r["word"] for r in rows)
    assert len(rows[1]["model_tokens"]) > 1                       # "bicycle" is several tokens, grounded once


def test_object_words_and_dependence_are_read_per_word(subword):
    """evaluate --explain's object words, visual dependence, "said, not seen" and the triage sort
    read the word layer: one entry per object word, at its first token."""
    from viewer.analysis.explain import Pipeline
    from viewer.analysis.explain_eval import object_steps
    from viewer.analysis.language_prior import Prior, said_not_seen
    from viewer.analysis.pixel_faithfulness import seen_dependence, visual_dependence
    from viewer.analysis.triage import _looked_vs_used
    cap, model, photo, trace = subword
    pipe = Pipeline(cap, photo, model, trace.token_ids)
    first = {w.text: w.first for w in trace.word_spans}
    assert object_steps(pipe.words) == [first["dog"], first["bicycle"]]
    dependence = visual_dependence(pipe)
    assert len(dependence) == len(trace.steps)
    said_of_most = np.zeros(len(dependence))
    said_of_most[first["bicycle"]] = 1.0
    assert said_not_seen(trace.step_words(), Prior(said_of_most, None, 8)) == ["bicycle"]
    seen = seen_dependence(pipe)                 # the larger drop of blurring and removing the photo
    assert np.all(seen >= dependence - 1e-6)
    found, _ = _looked_vs_used(cap, photo, model, trace, None)
    assert found["said_not_seen"] == "not measured"
    assert found["seen"] == pytest.approx(min(seen[first["dog"]], seen[first["bicycle"]]), abs=1e-4)


def test_a_non_canonical_segmentation_is_explained_as_traced(subword):
    """A caption whose tokens are not the tokenizer's own segmentation of its text ("bicycle" spelt
    one character a token): explanations force the trace's ids, so maps and steps line up."""
    from viewer.analysis.explain import explain, explained_trace
    cap, model, photo, trace = subword
    vocab = cap.model(model).vocab
    w = next(w for w in trace.word_spans if w.text == "bicycle")
    rest = "bicycle"[len(vocab.display(trace.token_ids[w.first])):]
    spelt = [vocab.index[("##" if vocab.marker == "##" else "") + c] for c in rest]   # both hold the letters
    ids = trace.token_ids[:w.first + 1] + spelt + trace.token_ids[w.last + 1:]
    assert vocab.encode(vocab.text(ids)) + [vocab.end] != ids      # re-tokenising the text would differ
    odd = cap.force([photo], model, [ids])[0]
    assert odd.token_ids == ids and odd.words == trace.words
    found = explain(cap, photo, model, odd.token_ids, ("attention", "gradcam"))
    assert found.maps["gradcam"].shape[0] == len(ids)
    assert np.allclose(found.logprobs, [s.logprob for s in odd.steps], atol=1e-4)
    shown = explained_trace(odd, found, "gradcam")
    assert shown.word_spans == odd.word_spans


def test_measure_probes_object_words_at_their_first_token(subword):
    from viewer.analysis.faithfulness import measure
    from viewer.engine.vision import model_inputs
    cap, model, photo, trace = subword
    lm = cap.model(model)
    feats, mask = model_inputs(cap.inputs(lm, [photo]), lm.attends_to, cap.device)
    found = measure(lm.model, lm.vocab, feats, mask, [(0, trace.token_ids)],
                    [np.stack([s.attention for s in trace.steps])], levels=(), draws=1)
    first = {w.text: w.first for w in trace.word_spans}
    assert [(f.word, f.step) for f in found] == [("dog", first["dog"]), ("bicycle", first["bicycle"])]


def test_the_apps_caption_and_panels_show_words(subword):
    from viewer.app import panels as P
    from viewer.app import session as S
    from viewer.engine.decoding import DecodeSettings
    cap, model, photo, trace = subword
    ex = S.Exploration(photo, model, DecodeSettings(strategy="forced"), [trace])
    shown = "".join(text for text, _ in S.caption_tokens(ex))
    assert shown.split() == tokenize(CAPTION)                    # words apart, a word's tokens together; no <end>
    w = next(w for w in trace.word_spans if w.text == "bicycle")
    assert S.first_steps(trace)[w.last] == w.first              # a click anywhere on "bicycle" selects its first token
    ex.step = w.first + 1
    panel = P.step_panel(ex)
    assert "<b>bicycle (token 2 of" in panel
    assert not any(m in panel for m in ("Ġ", "##"))              # the next-word choices are readable text
    assert P.compare_line(trace, w.last).endswith("**[bicycle]**")


def test_branching_takes_the_chosen_alternatives_token(subword):
    from viewer.app.session import Exploration, Studio
    from viewer.engine.decoding import DecodeSettings
    cap, model, photo, trace = subword
    studio = Studio(cap)
    ex = Exploration(photo, model, DecodeSettings(strategy="greedy", max_len=8), [trace])
    s = trace.steps[2]
    shown, token = next((w, i) for (w, _), i in zip(s.alternatives, s.alternative_ids) if i != s.token)
    branched = studio.branch(ex, 2, shown)
    assert branched.trace.token_ids[:3] == trace.token_ids[:2] + [token]
    studio.close()


def test_whole_word_vocabularies_keep_one_word_per_step():
    from viewer.engine.vocab import SPECIALS, Vocabulary
    vocab = Vocabulary(SPECIALS + ["a", "red", "bicycle"])
    ids = vocab.encode("a red zzyzx bicycle") + [vocab.end]
    spans = vocab.word_spans(ids)
    assert [(w.text, w.first, w.last, w.known) for w in spans] == [
        ("a", 0, 0, True), ("red", 1, 1, True), ("<unk>", 2, 2, False), ("bicycle", 3, 3, True), ("<end>", 4, 4, True)]


JOINED = "a man's dog in a light-colored t-shirt"


def test_possessives_and_hyphenated_words_are_one_word_for_every_tokenizer(subword):
    """Each tokenizer cuts "man's" and "light-colored" at the mark ('Ġman' "'s", 'light' '-' 'co'...;
    WordPiece: 'man' "'" 's'), and the word layer joins them back, each word's map its first token's."""
    cap, model, photo, _ = subword
    trace = cap.force([photo], model, [JOINED])[0]
    assert [w.text for w in trace.word_spans] == ["a", "man's", "dog", "in", "a", "light-colored", "t-shirt", "<end>"]
    joined = [w for w in trace.word_spans if w.text in ("man's", "light-colored", "t-shirt")]
    assert all(w.last > w.first for w in joined)                   # several tokens each
    assert trace.to_json()["words"][5]["text"] == "light-colored"
    spaced = cap.force([photo], model, ["a dog - a cat"])[0]        # a dash between words joins nothing
    if "bpe" in model:
        assert [w.text for w in spaced.word_spans] == ["a", "dog", "-", "a", "cat", "<end>"]


def test_the_shipped_whole_word_vocabulary_joins_possessives_and_its_compounds():
    """`tokenize` drops the marks ("man's" -> man, s), so the vocabulary's word layer joins a
    possessive "s" and the hyphenated pairs Flickr8k's captions write (words.COMPOUNDS); the caption
    text says them as written. A pair the table lacks stays two words."""
    from viewer.analysis.grounding import word_class
    from viewer.engine.pipeline import typed_words
    from viewer.engine.vocab import SPECIALS, Vocabulary
    vocab = Vocabulary(SPECIALS + ["a", "man", "s", "dog", "in", "light", "colored", "t", "shirt"])
    ids = vocab.encode(JOINED) + [vocab.end]
    assert [w.text for w in vocab.word_spans(ids)] == ["a", "man's", "dog", "in", "a", "light", "colored", "t-shirt",
                                                       "<end>"]
    assert vocab.text(ids) == "a man's dog in a light colored t-shirt"
    assert word_class("man's") == word_class("man") == "person" and word_class("dogs'") == "dog"
    ids = vocab.encode("a zzyzx's dog") + [vocab.end]              # an unknown word's possessive keeps its typed text
    trace = AttentionTrace("m", "grid", [TraceStep(vocab.words[i], i, -1.0, np.ones(4) / 4, []) for i in ids], 8, 8,
                           word_spans=vocab.word_spans(ids))
    typed_words(trace, "a zzyzx's dog")
    assert [(w.text, w.known) for w in trace.word_spans] == [("a", True), ("zzyzx's", False), ("dog", True),
                                                             ("<end>", True)]


def test_the_apps_trace_cache_is_bounded_in_bytes(subword):
    """Per-head maps are float16 arrays, and the Studio's cache of decodes drops the oldest once
    their arrays pass its byte budget (a BLIP trace's heads are megabytes)."""
    from viewer.app.session import Studio
    from viewer.engine.decoding import DecodeSettings
    cap, model, photo, trace = subword
    assert trace.steps[0].heads.dtype == np.float16 and trace.nbytes > 0
    studio = Studio(cap)
    for n in (4, 5, 6):
        studio.decode(photo, model, DecodeSettings(strategy="greedy", max_len=n))
    assert len(studio._decodes) == 3
    studio.max_decode_bytes = studio.decode_bytes() - 1            # one byte too few for all three
    studio.decode(photo, model, DecodeSettings(strategy="greedy", max_len=7))
    assert 1 <= len(studio._decodes) < 4 and studio.decode_bytes() <= studio.max_decode_bytes
    studio.close()


def test_a_word_to_avoid_of_several_tokens_is_ruled_out_at_its_last_token(subword):
    """A word of several tokens the model says (greedy), as a word to avoid: its token sequence is the
    caption's spelling, and given the caption up to the word's last token, greedy decoding, which said
    that token, now says another; beam search too."""
    from viewer.engine.constraints import avoid_tokens
    from viewer.engine.decoding import DecodeSettings
    cap, model, photo, _ = subword
    vocab = cap.model(model).vocab
    said = cap.caption([photo], model, DecodeSettings(strategy="greedy", max_len=12))[0][0]
    ids = said.token_ids
    word = next(w for w in said.word_spans if w.last > w.first and tuple(ids[w.first:w.last + 1]) in
                avoid_tokens(vocab, [w.text]))
    for settings in (DecodeSettings(strategy="greedy", max_len=12), DecodeSettings(beam_size=2, max_len=12)):
        again = cap.caption([photo], model, settings, [ids[:word.last]])[0]
        ruled = cap.caption([photo], model, settings, [ids[:word.last]], avoid=[[word.text]])[0]
        assert settings.strategy == "beam" or again[0].token_ids[word.last] == ids[word.last]
        for trace in ruled:
            assert trace.token_ids[:word.last] == ids[:word.last] and trace.token_ids[word.last] != ids[word.last]


def test_no_repeated_trigram_counts_sub_word_tokens(subword):
    """`no_repeat` rules out token trigrams, not word trigrams: with a real BPE or WordPiece model,
    after a prefix that says the caption's first three tokens and then its first two again, greedy
    decoding cannot say the third again; no trigram of tokens repeats, and the word layer reads it."""
    from test_constraints import repeats_at
    from viewer.engine.decoding import DecodeSettings
    cap, model, photo, _ = subword
    ids = cap.caption([photo], model, DecodeSettings(strategy="greedy", max_len=8))[0][0].token_ids
    assert len(ids) >= 4
    prefix = ids[:3] + ids[:2]
    once = cap.caption([photo], model, DecodeSettings(strategy="greedy", max_len=16, no_repeat=3), [prefix])[0][0]
    assert once.token_ids[:5] == prefix and once.token_ids[5] != ids[2]
    assert repeats_at(once.token_ids) is None
    assert [t for w in once.word_spans for t in w.steps] == list(range(len(once.steps)))
