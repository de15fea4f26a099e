"""Constrained beam search in the one decoding loop (engine/constraints.py): the caption includes
the required words (one of each set; a word of several tokens in a row), the rest is the model's,
and each step still carries the attention that emitted it."""
import pytest
import torch

from viewer.engine.decoding import DecodeSettings, decode
from viewer.engine.models.base import CaptionModel, Step
from viewer.engine.vocab import SPECIALS, Vocabulary

V = Vocabulary(SPECIALS + ["a", "dog", "in", "the", "field", "bear", "bears", "teddy"])
LIKELY = {"<start>": "a", "a": "dog", "dog": "in", "in": "the", "the": "field", "field": "<end>", "bear": "in",
          "bears": "in", "teddy": "bear"}


class Bigram(CaptionModel):
    """'a dog in the field': each word makes the next likely (log-odds 4); the rest are rare.
    Its attention at a step is the softmax of the previous word's id times each unit's feature."""

    def init_state(self, feats, mask, seed=None):
        return {"a": feats, "mask": mask}

    def forward_step(self, state, words):
        logits = torch.zeros(len(words), len(V))
        for r, w in enumerate(words.tolist()):
            logits[r, V.index[LIKELY.get(V.words[w], "<end>")]] = 4.0
        att = torch.softmax(state["a"][..., 0] * words[:, None].float(), -1)
        return Step(logits, att), state


def run(constraints=None, beam=3, need=None, prefix=None):
    feats = torch.linspace(0, 1, 6).reshape(1, 6, 1)
    mask = torch.ones(1, 6, dtype=torch.bool)
    words = [[tuple(V.encode(w)) for w in c] for c in constraints] if constraints is not None else None
    return decode(Bigram(), feats, mask, DecodeSettings(beam_size=beam), V, constraints=None if words is None else [words],
                  need=need, prefixes=None if prefix is None else [V.encode(prefix)])[0]


def text(h) -> str:
    return " ".join(V.words[t] for t in h.tokens[:-1])


def test_a_required_word_is_in_the_caption_and_the_model_writes_the_rest():
    assert text(run()[0]) == "a dog in the field"
    best = run([["bear", "bears"]])[0]
    assert best.finished and ("bear" in text(best).split() or "bears" in text(best).split())
    (steps,) = best.required.values()
    assert V.words[best.tokens[steps[0]]] in ("bear", "bears")
    assert text(best).endswith("in the field")   # after the required word, the model's own likely words


def test_a_word_of_several_tokens_is_met_only_whole_and_in_a_row():
    best = run([["teddy bear"]])[0]
    words = text(best).split()
    i = words.index("teddy")
    assert words[i + 1] == "bear" and len(best.required[0]) == 2


def test_constraints_the_best_caption_meets_change_nothing():
    plain, constrained = run()[0], run([["dog"], ["field"]])[0]
    assert plain.tokens == constrained.tokens and plain.score == pytest.approx(constrained.score)
    assert torch.allclose(plain.attention, constrained.attention)


def test_need_some_of_the_constraints():
    both = run([["bear"], ["teddy"]])[0]
    assert {"bear", "teddy"} <= set(text(both).split())
    one = run([["bear"], ["teddy"]], need=1)[0]
    assert len(one.required) >= 1
    assert one.score >= both.score - 1e-6   # meeting fewer costs no more


def test_the_attention_of_each_step_is_the_one_that_emitted_it():
    """Force the constrained caption: the same log-probs and attention at every step."""
    best = run([["bears"]])[0]
    forced = decode(Bigram(), torch.linspace(0, 1, 6).reshape(1, 6, 1), torch.ones(1, 6, dtype=torch.bool),
                    DecodeSettings(strategy="forced"), V, prefixes=[best.tokens])[0][0]
    assert forced.tokens == best.tokens
    assert torch.allclose(forced.attention, best.attention)
    assert forced.logprobs == pytest.approx(best.logprobs, abs=1e-5)


def test_a_branch_keeps_the_words_still_to_include():
    """Branching (a prefix chosen in the app) goes on under the constraints: the caption starts with
    the prefix and still includes the required word; one the prefix holds already is met."""
    assert text(run(prefix="the")[0]) == "the field"
    best = run([["bear"]], prefix="the")[0]
    assert text(best).startswith("the ") and "bear" in text(best).split()
    met = run([["dog"]], prefix="a dog")[0]
    assert text(met) == "a dog in the field" and met.required == {0: [1]}


def test_bad_constraints_are_refused():
    with pytest.raises(ValueError, match="at least one word"):
        run([[]])
    with pytest.raises(ValueError, match="beam search"):
        decode(Bigram(), torch.zeros(1, 6, 1), torch.ones(1, 6, dtype=torch.bool), DecodeSettings(strategy="sample"),
               V, constraints=[[[(5,)]]])


@pytest.mark.parametrize("model", ["sat-soft", "updown", "transformer"])
def test_every_model_includes_a_required_word_and_the_trace_marks_it(captioner, photo, model):
    """Through the pipeline, for grid, region and transformer models: the trace's caption holds the
    required word, its steps say who required it (and round-trip through JSON), and the forced
    caption gives each step the same attention."""
    import numpy as np

    from viewer.engine.trace import AttentionTrace
    plain = captioner.caption([photo], model, DecodeSettings(beam_size=2))[0][0]
    word = next(w for w in ("cat", "flag", "table", "cup") if w not in plain.words)
    trace = captioner.caption([photo], model, DecodeSettings(beam_size=2),
                              constraints=[[([word, word + "s"], "user")]])[0][0]
    assert word in trace.words or word + "s" in trace.words
    marked = [s for s in trace.steps if s.required]
    assert [s.word for s in marked] in ([word], [word + "s"]) and marked[0].required == "user"
    back = AttentionTrace.from_json(trace.to_json())
    assert [s.required for s in back.steps] == [s.required for s in trace.steps]
    forced = captioner.force([photo], model, [trace.token_ids])[0]
    for a, b in zip(trace.steps, forced.steps):
        assert np.allclose(a.attention, b.attention, atol=1e-5)
    with pytest.raises(ValueError, match="no word 'zzyzx'"):
        captioner.caption([photo], model, DecodeSettings(), constraints=[[(["zzyzx"], "user")]])


def test_the_command_line_includes_words_and_follows_the_detector(tiny_checkpoints, capsys):
    """caption --include and --guide detector: the JSON trace marks the required steps and who asked."""
    import json
    import os

    from conftest import ASSETS
    from viewer.__main__ import main as cli
    from viewer.analysis.guide import detected_words, user_words
    from viewer.engine.vision.boxes import Regions
    import numpy as np
    assert user_words("cat, teddy|bear") == [(["cat", "cats"], "user"), (["teddy", "bear"], "user")]
    regions = Regions(np.zeros((4, 4), np.float32), ["dog", "dog", "cup", "kite"], np.array([0.9, 0.8, 0.3, 0.6]))
    assert [(w[0], s) for w, s in detected_words(regions, 0.5)] == [("dog", "detector"), ("kite", "detector")]
    photo = os.path.join(ASSETS, "coffee.jpg")
    assert cli(["--checkpoints", tiny_checkpoints, "caption", photo, "--model", "sat-soft", "--include", "cat",
                "--json"]) == 0
    trace = json.loads(capsys.readouterr().out)
    required = [s for s in trace["steps"] if s.get("required")]
    assert [s["word"] for s in required] in (["cat"], ["cats"]) and required[0]["required_by"] == "user"
    assert cli(["--checkpoints", tiny_checkpoints, "caption", photo, "--model", "sat-soft", "--include", "cat",
                "--sample"]) == 2
    assert "constrain beam search" in capsys.readouterr().err


def test_the_app_marks_the_words_it_was_asked_to_mention(captioner, photo):
    """Explore's "Must mention": the caption includes the word and marks its steps "required"."""
    from viewer.app import session as S
    from viewer.analysis.guide import user_words
    studio = S.Studio(captioner)
    required = tuple((tuple(w), s) for w, s in user_words("cat"))
    ex = studio.explore(photo, "sat-soft", DecodeSettings(beam_size=2), required)
    labels = dict((i, label) for i, (_, label) in enumerate(S.caption_tokens(ex)))
    marked = [t for t, label in labels.items() if label == "required"]
    assert [ex.trace.steps[t].word for t in marked] in (["cat"], ["cats"])
    assert studio.explore(photo, "sat-soft", DecodeSettings(beam_size=2)).trace.words != ex.trace.words
    # branching from the first word goes on under the same constraint, and so do back and reset
    t = next(t for t, s in enumerate(ex.trace.steps) if s.word not in ("cat", "cats"))
    word = next(w for w, _ in ex.trace.steps[t].alternatives if w not in (ex.trace.steps[t].word, "<end>", "cat", "cats"))
    branched = studio.branch(ex, t, word)
    assert branched.trace.words[t] == word and {"cat", "cats"} & set(branched.trace.words)
    assert studio.unbranch(branched).trace.words == ex.trace.words == studio.reset(branched).trace.words


def test_must_mention_in_the_browser_marks_the_required_word(server):
    """Typed into Explore's "Must mention" box, a word the caption would not say is in the caption,
    marked as required (its own colour), and clicking it draws that step's map."""
    from playwright.sync_api import expect, sync_playwright

    from test_app import _browser, _page_with_photo
    url, studio = server
    with sync_playwright() as p:
        browser = _browser(p)
        page = _page_with_photo(browser, url)
        page.locator("#mention textarea").fill("cat")
        page.locator("#run").click()
        expect(page.locator("#caption")).to_contain_text("cat", timeout=90_000)
        tokens = page.locator("#caption .token")
        words = [t.strip() for t in tokens.all_inner_texts()]
        i = next(i for i, w in enumerate(words) if w.startswith("cat"))
        colour = tokens.nth(i).evaluate("e => getComputedStyle(e).backgroundColor")
        other = tokens.nth(0 if i else 1).evaluate("e => getComputedStyle(e).backgroundColor")
        assert colour.startswith("rgba(253, 230, 138") and other != colour   # the required word's colour (#fde68a)
        tokens.nth(i).click()                                              # its map: the step that emitted it
        page.wait_for_function("i => document.querySelector('#view canvas').dataset.shown?.split('|')[1] === String(i)",
                               arg=i)
        browser.close()


def test_at_the_length_limit_a_live_row_meeting_the_constraint_beats_finished_captions_meeting_none():
    """'bear' is rare and nothing after it ends within 3 words: the finished captions meet nothing,
    a live row has 'bear'; that row is returned first (unfinished), never a caption without it."""
    feats, mask = torch.linspace(0, 1, 6).reshape(1, 6, 1), torch.ones(1, 6, dtype=torch.bool)
    hyps = decode(Bigram(), feats, mask, DecodeSettings(beam_size=2, max_len=3), V,
                  constraints=[[[tuple(V.encode("bear"))]]])[0]
    best = hyps[0]
    assert "bear" in text(best).split() + [V.words[best.tokens[-1]]] and not best.finished and best.required
    assert len({tuple(h.tokens) for h in hyps}) == len(hyps)   # no row twice


class NoisyBigram(Bigram):
    """Bigram with fixed random log-odds added (seed 0), so no two captions tie: brute force has one answer."""
    NOISE = 0.3 * torch.randn(len(V), len(V), generator=torch.Generator().manual_seed(0))

    def forward_step(self, state, words):
        step, state = super().forward_step(state, words)
        return Step(step.logits + self.NOISE[words], step.attention), state


def brute_force_best(avoid: set[str], longest: int = 5) -> float:
    """The best total log-prob of any finished caption of at most `longest` words none of which is
    avoided, scored by NoisyBigram as decoding sees it (<pad>, <start> never said)."""
    import itertools
    model, words = NoisyBigram(), [w for w in V.words if w not in SPECIALS and w not in avoid]
    feats, mask = torch.zeros(1, 6, 1), torch.ones(1, 6, dtype=torch.bool)
    logp = {}
    for w in V.words:
        logits = model.forward_step(model.init_state(feats, mask), torch.tensor([V.index[w]]))[0].logits[0]
        logp[w] = torch.log_softmax(logits.index_fill(0, torch.tensor([V.pad, V.start]), float("-inf")), -1)
    best = float("-inf")
    for n in range(longest + 1):
        for caption in itertools.product(words, repeat=n):
            seq = ("<start>",) + caption + ("<end>",)
            best = max(best, sum(logp[a][V.index[b]].item() for a, b in zip(seq, seq[1:])))
    return best


def run_avoiding(avoid: list[str], constraints=None, beam=3, prefix=None, model=None):
    feats, mask = torch.linspace(0, 1, 6).reshape(1, 6, 1), torch.ones(1, 6, dtype=torch.bool)
    words = None if constraints is None else [[[tuple(V.encode(w)) for w in c] for c in constraints]]
    return decode(model or Bigram(), feats, mask, DecodeSettings(beam_size=beam, max_len=8), V, constraints=words,
                  prefixes=None if prefix is None else [V.encode(prefix)],
                  avoid=[[tuple(V.encode(w)) for w in avoid]])[0]


def test_an_avoided_word_is_never_said_and_the_best_caption_without_it_is_returned():
    """'dog' follows 'a' in the model's best caption: ruled out, the caption is the best one without
    it (brute force over every caption of up to 5 words), and plain search is unchanged otherwise."""
    assert text(run_avoiding([], model=NoisyBigram())[0]) == "a dog in the field"
    best = run_avoiding(["dog"], model=NoisyBigram())[0]
    assert "dog" not in text(best).split() and best.finished
    assert sum(best.logprobs) == pytest.approx(brute_force_best({"dog"}), abs=1e-5)
    assert text(run_avoiding(["bear"], model=NoisyBigram())[0]) == "a dog in the field"   # nothing to rule out
    two = run_avoiding(["dog", "bear"], model=NoisyBigram())[0]
    assert sum(two.logprobs) == pytest.approx(brute_force_best({"dog", "bear"}), abs=1e-5)
    assert not {"dog", "bear"} & set(text(two).split())


def test_a_word_of_several_tokens_is_ruled_out_whole_and_its_tokens_stay_free():
    """Avoiding 'teddy bear' (two tokens): required to say 'teddy', the caption never goes on with
    'bear' (the model's likely next word), yet 'bear' alone and 'teddy' alone stay sayable; a
    forced prefix is never ruled out."""
    best = run_avoiding(["teddy bear"], constraints=[["teddy"]])[0]
    words = text(best).split()
    assert "teddy" in words and words[words.index("teddy") + 1:words.index("teddy") + 2] != ["bear"]
    assert "bear" in text(run_avoiding(["teddy bear"], constraints=[["bear"]])[0]).split()
    assert text(run_avoiding(["dog"], prefix="a dog")[0]) == "a dog in the field"


def test_unseen_words_are_the_rule_out_classes_the_detector_kept_no_box_of():
    import numpy as np
    from viewer.analysis.guide import MORE_WORDS, RULE_OUT, UNKNOWN, unseen_words
    from viewer.engine.vision.boxes import Regions
    nobody = Regions(np.zeros((1, 4), np.float32), ["dog"], np.array([0.9]))
    words = unseen_words(nobody)
    assert {"man", "men", "people", "girl", "hikers", "cat", "cats", "bear", "ball"} <= set(words)
    assert words[-1] == UNKNOWN and words.count(UNKNOWN) == 1
    assert not {"dog", "dogs", "puppy"} & set(words) and set(MORE_WORDS["person"]) <= set(words)
    someone = Regions(np.zeros((2, 4), np.float32), ["dog", "person"], np.array([0.9, 0.21]))
    kept = set(unseen_words(someone))   # any box the detector kept counts
    assert not {"man", "people", "hikers", "dog"} & kept and {"cat", UNKNOWN} <= kept
    everything = Regions(np.zeros((len(RULE_OUT), 4), np.float32), list(RULE_OUT), np.full(len(RULE_OUT), 0.3))
    assert unseen_words(everything) == [UNKNOWN]


def test_the_app_rules_out_a_person_the_detector_does_not_see_and_says_so(captioner):
    """Explore's guidance: on the rocket (the detector finds no one) no person word is said, nor
    <unk>, and the note says why; on Grace Hopper (a person found) no person word is ruled out. Branching
    goes on under the same ruling out; requiring the detector's classes marks them."""
    import os

    from conftest import ASSETS
    from viewer.app import session as S
    studio = S.Studio(captioner)
    settings = DecodeSettings(beam_size=2)
    ex = studio.explore(os.path.join(ASSETS, "rocket.jpg"), "updown", settings, rule_out=True)
    assert "man" in ex.avoid and "<unk>" in ex.avoid
    for trace in ex.beams:
        assert not set(trace.words) & set(ex.avoid)
    note = S.guidance_note(ex.required, ex.avoid)
    assert "never person, dog or " in note and "other classes (the detector sees none)" in note and "<unk>" in note
    t = 1
    word = next(w for w, _ in ex.trace.steps[t].alternatives if w not in (ex.trace.steps[t].word, "<end>"))
    branched = studio.branch(ex, t, word)
    assert branched.avoid == ex.avoid and not set(branched.trace.words[t + 1:]) & set(ex.avoid)
    seen = studio.explore(os.path.join(ASSETS, "grace_hopper.jpg"), "updown", settings, rule_out=True,
                          name_detected=True)
    assert not {"man", "person", "people"} & set(seen.avoid) and {"dog", "<unk>"} <= set(seen.avoid)
    assert {w for words, source in seen.required for w in words if source == "detector"} >= {"man", "person"}
    assert "must name person" in S.guidance_note(seen.required, seen.avoid)
    plain = studio.explore(os.path.join(ASSETS, "rocket.jpg"), "updown", settings)
    assert S.guidance_note(plain.required, plain.avoid) == ""


def test_compare_shows_a_model_plain_ruled_out_and_guided_side_by_side(captioner):
    """Compare's guidance mode: Explore's model three ways on one photo, each as Explore would decode
    it with those switches, named by what the detector asked of it; sampling is refused in words."""
    import os

    import gradio as gr
    import pytest

    from conftest import ASSETS
    from viewer.app import session as S
    from viewer.app import compare_tab, ui
    studio = S.Studio(captioner)
    photo, settings = os.path.join(ASSETS, "coffee.jpg"), DecodeSettings(beam_size=2)   # a cup, no one
    ex = studio.explore(photo, "updown", settings)
    traces, slider, _ = ui.Handlers(studio, studio.models()).compare(ex, [], compare_tab.GUIDANCE_MODE, "", "", None,
                                                                     "Beam search", 2, 1.0, 0, 20)
    switches = [{}, {"rule_out": True}, {"rule_out": True, "name_detected": True}]
    assert [t.words for t in traces] == [studio.explore(photo, "updown", settings, **s).trace.words for s in switches]
    ruled_out = studio.explore(photo, "updown", settings, rule_out=True).avoid
    assert not set(traces[1].words) & set(ruled_out) and not set(traces[2].words) & set(ruled_out)
    assert traces[0].model == "updown · plain"
    assert traces[1].model.startswith("updown · ruled out (never person, dog or ")
    assert traces[2].model.startswith("updown · guided (must name cup · never person, dog or ") and "cup" in traces[2].words
    assert slider.maximum == max(2, max(len(t.word_spans) for t in traces))
    sampled = studio.explore(photo, "updown", DecodeSettings(strategy="sample"))
    with pytest.raises(gr.Error, match="beam search or greedy"):
        ui.Handlers(studio, studio.models()).compare(sampled, [], compare_tab.GUIDANCE_MODE, "", "", None,
                                                     "Sampling", 2, 1.0, 0, 20)


def test_the_command_line_guided_by_the_detector_never_says_a_person_it_does_not_see(tiny_checkpoints, capsys):
    import json
    import os

    from conftest import ASSETS
    from viewer.__main__ import main as cli
    from viewer.analysis.guide import unseen_words
    from viewer.engine.vision.boxes import Regions
    import numpy as np
    ruled_out = set(unseen_words(Regions(np.zeros((0, 4), np.float32), [], np.zeros(0))))
    for model in ("sat-soft", "updown"):
        assert cli(["--checkpoints", tiny_checkpoints, "caption", os.path.join(ASSETS, "rocket.jpg"), "--model", model,
                    "--guide", "detector", "--json"]) == 0
        trace = json.loads(capsys.readouterr().out)
        assert not {s["word"] for s in trace["steps"]} & ruled_out


def test_the_guidance_switches_in_the_browser_rule_out_and_require_what_the_detector_says(server):
    """Explore's "Guided by what the detector sees": both switches off as the app starts; ticked, the
    status says what the detector asked (the coffee cup: must name cup, never a class it does not see, never <unk>)
    and the required word is marked in the caption."""
    from playwright.sync_api import expect, sync_playwright

    from test_app import _browser, _page_with_photo
    from viewer.app.ui import NAME_DETECTED, RULE_OUT
    url, _ = server
    with sync_playwright() as p:
        browser = _browser(p)
        page = _page_with_photo(browser, url)
        boxes = page.locator("#guides input[type=checkbox]")
        assert boxes.count() == 2 and not any(boxes.nth(i).is_checked() for i in range(2))
        page.get_by_label(RULE_OUT).check()
        page.get_by_label(NAME_DETECTED).check()
        page.locator("#run").click()
        expect(page.locator("#status")).to_contain_text("Guided by the detector: must name cup", timeout=90_000)
        expect(page.locator("#status")).to_contain_text("never person, dog or ")
        expect(page.locator("#caption")).to_contain_text("cup")
        browser.close()


class LoopBigram(NoisyBigram):
    """'a dog a dog a dog ...': each word makes the next likely (log-odds 4), and it never ends."""
    NEXT = {"<start>": "a", "a": "dog", "dog": "a"}

    def forward_step(self, state, words):
        logits = torch.zeros(len(words), len(V))
        for r, w in enumerate(words.tolist()):
            logits[r, V.index[self.NEXT.get(V.words[w], "<end>")]] = 4.0
        return Step(logits + self.NOISE[words], torch.full((len(words), 6), 1 / 6)), state


def repeats_at(tokens, n: int = 3) -> int | None:
    """The first position that ends an n-gram said before (None: none)."""
    seen = set()
    for i in range(n - 1, len(tokens)):
        gram = tuple(tokens[i - n + 1:i + 1])
        if gram in seen:
            return i
        seen.add(gram)
    return None


def loop(settings, prefix=None):
    feats, mask = torch.zeros(1, 6, 1), torch.ones(1, 6, dtype=torch.bool)
    return decode(LoopBigram(), feats, mask, settings, V, prefixes=None if prefix is None else [V.encode(prefix)])[0]


def test_no_trigram_is_said_twice_and_until_one_would_be_the_caption_is_the_models_own():
    """`no_repeat` 3 (guided decoding's): the looping model's greedy caption is its own up to the
    token that would say a trigram again, and another token there; beam search's captions hold no
    trigram twice either; a forced prefix may; a caption without repeats is unchanged."""
    plain = loop(DecodeSettings(strategy="greedy", max_len=8))[0]
    at = repeats_at(plain.tokens)
    assert text(plain).startswith("a dog a dog") and at == 4
    once = loop(DecodeSettings(strategy="greedy", max_len=8, no_repeat=3))[0]
    assert once.tokens[:at] == plain.tokens[:at] and once.tokens[at] != plain.tokens[at]
    for h in loop(DecodeSettings(beam_size=3, max_len=8, no_repeat=3)):
        assert repeats_at(h.tokens) is None
    prefixed = loop(DecodeSettings(beam_size=2, max_len=10, no_repeat=3), prefix="a dog a dog")[0]
    assert text(prefixed).startswith("a dog a dog") and repeats_at(prefixed.tokens[4:]) is None
    feats, mask = torch.linspace(0, 1, 6).reshape(1, 6, 1), torch.ones(1, 6, dtype=torch.bool)
    assert text(decode(Bigram(), feats, mask, DecodeSettings(no_repeat=3), V)[0][0]) == "a dog in the field"
    for bad in ({"no_repeat": 1}, {"no_repeat": 3, "strategy": "sample"}):
        with pytest.raises(ValueError, match="no_repeat"):
            DecodeSettings(**bad)


def test_the_guidance_rule_chosen_is_the_least_hallucinating_of_those_that_cost_little():
    from viewer.analysis.guide_choice import chosen
    rows = [{"rule": "plain", "chair_s": 0.15, "object_recall": 0.78, "BLEU-4": 19.4},
            {"rule": "cheap", "chair_s": 0.10, "object_recall": 0.78, "BLEU-4": 19.0},
            {"rule": "costly in BLEU", "chair_s": 0.03, "object_recall": 0.79, "BLEU-4": 18.8},
            {"rule": "costly in recall", "chair_s": 0.03, "object_recall": 0.76, "BLEU-4": 19.4},
            {"rule": "best", "chair_s": 0.06, "object_recall": 0.775, "BLEU-4": 18.95}]
    assert chosen(rows) == "best"
    assert chosen(rows[:1] + rows[2:4]) == "plain"   # nothing affordable: plain decoding stays


def test_compares_guidance_mode_says_why_two_columns_agree(captioner):
    """A column that says what an earlier one said says why, and only then: ruling out changed nothing (the
    caption named nothing the detector misses), or requiring changed nothing (no class scored THRESHOLD or
    more; or the caption already named it). Checked on three example photos."""
    import os

    from conftest import ASSETS
    from viewer.app import session as S
    from viewer.analysis.guide import THRESHOLD
    studio = S.Studio(captioner)
    settings, agreed = DecodeSettings(beam_size=2), 0
    for name in ("chelsea.jpg", "coffee.jpg", "grace_hopper.jpg"):   # nothing sure enough, a cup required, a person
        traces = studio.compare_guidance(studio.explore(os.path.join(ASSETS, name), "updown", settings))
        guided = studio.explore(os.path.join(ASSETS, name), "updown", settings, name_detected=True, rule_out=True)
        required = [w for w, source in guided.required or () if source == "detector"]
        for i, trace in enumerate(traces):
            same = [j for j in range(i) if traces[j].words == trace.words]
            if not same:
                assert "same as" not in trace.model
                continue
            agreed += 1
            j = same[-1]
            expected = ("same as plain: it named nothing the detector does not see" if j == 0 else
                        f"same as ruled out: no class scored {THRESHOLD} or more, so nothing was required"
                        if not required else "same as ruled out: that caption already named what the detector required")
            assert trace.model.endswith(expected), (name, i, trace.model)
    assert agreed, "no example photo had two columns alike: the test checked nothing"
