"""The app's explanations (issue 27): Explain with, the trust card, Compare's methods mode, exports,
the caption coloured by visual dependence; in the session and in a real browser (tiny models)."""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

from viewer.app import panels as P
from viewer.app import session as S
from viewer.engine.decoding import DecodeSettings

from conftest import ASSETS
from test_app import _browser, _captioned_page


@pytest.fixture(scope="module")
def studio(captioner):
    return S.Studio(captioner)


@pytest.fixture(scope="module")
def explored(studio):
    ex = studio.explore(os.path.join(ASSETS, "coffee.jpg"), "sat-soft", DecodeSettings(beam_size=2))
    ex.go_to(2)
    return ex


def test_explain_with_draws_the_methods_map_and_steps_without_recomputing(studio, explored, monkeypatch):
    ex = explored
    attention_view = studio.view(ex, S.Style(), ex.step)
    found = studio.explain(ex, "occlusion")
    calls = []
    monkeypatch.setattr(S, "explain", lambda *a, **k: calls.append(a))   # a second computation would show here
    ex.method = "occlusion"
    try:
        shown = ex.shown
        assert [s.word for s in shown.steps] == [s.word for s in ex.trace.steps]
        for t, s in enumerate(shown.steps):   # each word's view draws the occlusion map of that word
            assert np.array_equal(s.attention, found.maps["occlusion"][t].ravel())
            assert np.isclose(s.attention.sum(), 1) or not s.attention.any()
        assert studio.view(ex, S.Style(), ex.step) != attention_view
        for t in range(ex.n_steps):           # stepping through every word: views only
            studio.view(ex, S.Style(), t)
        assert studio.explain(ex, "occlusion") is found and calls == []
        obj = S.trace_json(ex)                # the JSON export carries the method shown and its maps
        assert obj["shown"] == "occlusion"
        assert np.allclose(obj["steps"][1]["explain"]["occlusion"], found.maps["occlusion"][1], atol=1e-6)
        assert "occlusion (what it needed)" in P.step_panel(ex)
    finally:
        ex.method = "attention"
    assert ex.shown is ex.trace


def test_a_new_caption_shows_attention_until_explained(studio, explored):
    ex = explored
    studio.explain(ex, "gradcam")
    ex.method = "gradcam"
    branched = studio.branch(ex, 1, ex.trace.steps[1].alternatives[-1][0])
    assert branched.trace.caption != ex.trace.caption
    assert branched.shown is branched.trace      # no maps for the new caption: the model's attention
    ex.method = "attention"


def test_trust_card_has_a_map_and_numbers_per_method(studio, explored):
    heard = []
    page = P.trust_card(studio, explored, S.Style(), lambda done, total, what: heard.append((done, total, what)))
    methods = studio.methods("sat-soft")
    n = len(methods) + 2   # one report per method's map, then one per imputer's curves, in order
    assert [(d, t) for d, t, _ in heard] == [(i, n) for i in range(n)]
    assert heard[0][2] == f"map 1 of {len(methods)}: attention" and "hidden by road" in heard[-1][2]
    assert methods == ("attention", "occlusion", "superpixels", "gradcam", "kernelshap", "occlusion-fine")
    tiles = re.findall(r'data-method="([\w-]+)"><img src="data:image/jpeg;base64,[A-Za-z0-9+/=]{100,}"', page)
    assert tiles == list(methods)
    _, curves = studio.trust(explored)
    t = explored.step
    assert set(curves) == {"blur", "road"}   # the reports' two-imputer rule, not the blur alone
    for imp, c in curves.items():
        aucs = [float(v) for v in re.findall(rf'<b class="auc" data-imputer="{imp}">(-?[\d.]+)</b>', page)]
        assert np.allclose(aucs, [c.auc(m)[t] for m in methods], atol=0.006)
    best = {imp: max(methods, key=lambda m, c=c: c.auc(m)[t]) for imp, c in curves.items()}
    verdict = re.search(r'<div class="trust-verdict">(.*?)</div>', page).group(1)
    assert page.index("trust-verdict") < page.index("step-facts")        # the plain verdict first
    assert verdict.startswith("Trust <b>" if best["blur"] == best["road"] else "No one map to trust")
    assert "nats" not in verdict and "imputer" not in verdict             # in words, not jargon
    assert ("under both imputers" in page) == (best["blur"] == best["road"])
    assert ("the imputers disagree" in page.lower()) == (best["blur"] != best["road"])
    assert f"falls by {curves['blur'].visual_dependence[t]:.2f} nats when the whole photo is blurred away" in page
    assert f"and by {curves['road'].visual_dependence[t]:.2f} when it is removed" in page


def test_compare_methods_mode_is_one_caption_one_column_per_method(studio, explored):
    traces = studio.compare_methods(explored)
    assert [t.model for t in traces] == ["sat-soft"] + [f"sat-soft · {m}" for m in studio.methods("sat-soft")[1:]]
    assert len({tuple(s.word for s in t.steps) for t in traces}) == 1


def test_caption_words_are_coloured_by_what_the_model_would_have_said_of_most_photos(studio, explored):
    """Visual dependence stays a figure (the larger drop of the photo blurred away and removed); the
    grey and red words are the language-prior verdict's (`Studio.guessed`), shown once measured."""
    ex = explored
    seen = studio.visual_dependence(ex)
    pipe = studio.pipe(ex)
    import torch
    blurred = (pipe.base() - pipe.logprobs(torch.zeros(1, 14, 14))[0]).numpy()
    removed = (pipe.base() - pipe.logprobs(torch.zeros(1, 14, 14), "road")[0]).numpy()
    assert np.allclose(seen, np.maximum(blurred, removed), atol=1e-5)
    assert not np.allclose(blurred, removed)                               # the two baselines differ
    ex.step = ex.n_steps - 1
    ex.unseen.clear()   # the detector's "not seen" marks (test_app_compare) aside: the prior's verdict alone
    assert all(label is None for _, label in S.caption_tokens(ex))       # not measured yet: nothing grey
    ex.guessed[ex.tokens] = np.arange(len(seen)) == 0                       # only word 1 "would have said it"
    labels = [label for _, label in S.caption_tokens(ex)]
    from viewer.analysis.grounding import word_class
    first = ex.trace.word_at(0).text
    assert labels[0] == ("said, not seen" if word_class(first) else "guessed")   # an object word is said, not seen
    assert all(label is None for label in labels[1:])


def test_imported_models_explain_with_attention_only(studio, monkeypatch):
    monkeypatch.setattr(S, "available_methods", lambda captioner, model: ("attention",))
    ex = studio.explore(os.path.join(ASSETS, "coffee.jpg"), "sat-soft", DecodeSettings(beam_size=1))
    assert studio.visual_dependence(ex) is None


def test_browser_explain_with_and_trust_card(server):
    from playwright.sync_api import expect, sync_playwright
    url, studio = server
    with sync_playwright() as p:
        browser = _browser(p)
        page = _captioned_page(browser, url, 90_000)
        expect(page.locator("#explain-with").get_by_text("occlusion (what it needed)")).to_be_visible()
        before = page.locator("#view canvas").get_attribute("data-shown")
        page.locator("#explain-with").get_by_text("occlusion (what it needed)").click()
        page.wait_for_function("(b) => document.querySelector('#view canvas').dataset.shown !== b", arg=before,
                               timeout=120_000)
        expect(page.locator("#panel .step-facts")).to_contain_text("the view shows occlusion")
        expect(page.locator("#scale input[value='stretch']")).to_be_checked()   # explanations: drawn stretched
        expect(page.locator("#view .av-title")).to_contain_text(": what the word needed (occlusion)")   # which word, which map
        page.get_by_text("Diagnose: grounding").click()
        page.locator("#trust-btn").click()
        n = len(studio.methods("sat-soft"))
        expect(page.locator("#trust .trust-tile")).to_have_count(n, timeout=300_000)
        numbers = page.locator("#trust .auc").all_inner_texts()
        assert len(numbers) == 2 * n and all(re.fullmatch(r"-?\d+\.\d\d", n) for n in numbers)   # blur and ROAD
        shown = page.locator("#view canvas").get_attribute("data-shown")   # a new caption: attention again, drawn
        page.locator("#photo input[type=file]").set_input_files(os.path.join(ASSETS, "rocket.jpg"))
        page.wait_for_timeout(1500)
        page.locator("#run").click()
        expect(page.locator("#view .av-title")).to_contain_text(": where the model looked", timeout=90_000)
        page.wait_for_function("(b) => { const c = document.querySelector('#view canvas');"
                               " return c && c.dataset.shown && c.dataset.shown !== b; }", arg=shown, timeout=90_000)
        browser.close()


def test_an_explanation_in_progress_does_not_hold_up_other_sessions(studio, explored, monkeypatch):
    """Occlusion takes seconds: meanwhile another session's caption runs, and a second session asking
    for the same maps waits for the first computation instead of starting its own."""
    import threading
    started, release, calls = threading.Event(), threading.Event(), []
    real = S.explain

    def slow(*a, **k):
        calls.append(1)
        started.set()
        assert release.wait(60)
        return real(*a, **k)

    monkeypatch.setattr(S, "explain", slow)
    ex = studio.explore(os.path.join(ASSETS, "coffee.jpg"), "sat-soft", DecodeSettings(beam_size=1, max_len=7))
    errors, results = [], []

    def session():   # a thread's exception must fail the test, not vanish with the thread
        try:
            results.append(studio.explain(ex, "gradcam"))
        except BaseException as err:   # noqa: BLE001
            errors.append(err)

    first = threading.Thread(target=session)
    second = threading.Thread(target=session)
    first.start()
    assert started.wait(60)
    second.start()
    other = studio.explore(os.path.join(ASSETS, "rocket.jpg"), "sat-soft", DecodeSettings(beam_size=2))
    assert other.trace.steps and first.is_alive()       # captioned while the explanation was still running
    release.set()
    first.join(60)
    second.join(60)
    assert not first.is_alive() and not second.is_alive() and errors == []
    assert calls == [1] and ("gradcam", ex.tokens) in ex.explained
    assert len(results) == 2 and results[0] is results[1]   # the second session got the first one's maps
