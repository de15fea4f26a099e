"""The app: session logic without a browser, the HTTP API through gradio_client, and a real browser.

The browser tests need Debian's chromium (`.ci/run` installs it); they FAIL when it is missing.
"""
from __future__ import annotations

import json
import os
import re
import shutil

import numpy as np
import pytest
from PIL import Image

from viewer.app import session as S
from viewer.app.ui import GUIDES_BY_DEFAULT

from viewer.app import panels as P
from viewer.engine.decoding import DecodeSettings
from viewer.engine.images import cell_boxes

from conftest import ASSETS

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="module")
def studio(captioner):
    from viewer.app.session import Studio
    return Studio(captioner)


# --- session logic -------------------------------------------------------------------------------

def test_stepping_and_restyling_never_rerun_the_model(studio, photo):
    ex = studio.explore(photo, "sat-soft", DecodeSettings())
    calls = []
    original = studio.captioner.caption
    studio.captioner.caption = lambda *a, **k: calls.append(1) or original(*a, **k)
    try:
        panels = []
        for t in range(ex.n_steps):
            ex.step = t
            for style in (S.Style(), S.Style("blocky", "jet", 0.3), S.Style("bilinear", "gray", 1.0, "stretch")):
                assert S.overlay(ex, style).shape == ex.display.shape
            panels.append(P.step_panel(ex))
        again = studio.explore(photo, "sat-soft", DecodeSettings())
    finally:
        studio.captioner.caption = original
    assert calls == [] and again.trace.caption == ex.trace.caption
    assert len(set(panels)) == ex.n_steps
    assert panels == [P.step_panel(ex, t) for t in range(ex.n_steps)]   # what the page holds for each word


def test_overlay_shows_the_attention_used_for_that_word(studio, photo):
    ex = studio.explore(photo, "sat-soft", DecodeSettings(strategy="greedy"))
    forced = studio.force(photo, "sat-soft", ex.trace.caption)
    style = S.Style("blocky", "paper", 1.0, "stretch")
    views = []
    for t in range(ex.n_steps):
        ex.step = t
        a = S.overlay(ex, style)
        b = S.overlay(S.Exploration(photo, "sat-soft", ex.settings, [forced], step=t), style)
        assert np.array_equal(a, b)                # the word's map is the one forcing that caption gives
        light = a.astype(float).mean(-1)
        h, w = light.shape
        light[-h // 4:, : w // 3] = 0              # not the colour bar
        peak = int(np.argmax(ex.trace.steps[t].attention))
        x1, y1, x2, y2 = cell_boxes(photo.width, photo.height)[peak] * a.shape[1] / photo.width
        y, x = np.unravel_index(np.argmax(light), light.shape)
        assert x1 - 1 <= x <= x2 + 1 and y1 - 1 <= y <= y2 + 1   # the brightest place is the attention peak
        views.append(a)
    assert all(not np.array_equal(views[i], views[i + 1]) for i in range(len(views) - 1))


def test_caption_tokens_and_panel_lists_alternatives(studio, photo):
    ex = studio.explore(photo, "sat-hard", DecodeSettings(strategy="greedy"))
    ex.step = 1
    tokens = S.caption_tokens(ex)
    assert all(lab is None for _, lab in tokens)     # the page marks the selected word itself
    assert "".join(w for w, _ in tokens).split() == [s.word for s in ex.trace.steps if s.word != "<end>"]
    panel = P.step_panel(ex)
    assert "beta" in panel and "sampled cell" in panel
    assert all(w in panel for w, _ in ex.trace.steps[1].alternatives[:3])


def test_branch_back_and_reset(studio, photo):
    ex = studio.explore(photo, "sat-soft", DecodeSettings(strategy="greedy"))
    alt = next(w for w, _ in ex.trace.steps[2].alternatives if w != ex.trace.steps[2].word and not w.startswith("<"))
    branched = studio.branch(ex, 2, alt)
    assert branched.trace.steps[2].word == alt
    assert [s.word for s in branched.trace.steps[:2]] == [s.word for s in ex.trace.steps[:2]]
    assert studio.unbranch(branched).trace.caption == ex.trace.caption
    assert studio.reset(studio.branch(branched, 1, alt)).prefixes == []


def test_compare_same_caption_gives_identical_words(studio, photo):
    traces = studio.compare(photo, ["sat-soft", "sat-hard", "updown"], DecodeSettings(), "a cup of coffee on a table")
    assert [[s.word for s in t.steps] for t in traces] == [["a", "cup", "of", "coffee", "on", "a", "table", "<end>"]] * 3
    assert {t.attends_to for t in traces} == {"grid", "regions"}


def test_exports(studio, photo):
    ex = studio.explore(photo, "updown", DecodeSettings())
    gif = Image.open(studio.export_gif(ex, S.Style()))
    assert gif.n_frames == ex.n_steps
    with open(studio.export_json(ex)) as f:
        assert json.load(f)["caption"] == ex.trace.caption
    png = Image.open(studio.export_png(ex, S.strip(ex, S.Style()), "strip"))
    assert png.width > 500
    assert os.path.dirname(os.path.dirname(studio.export_json(ex))) == studio.export_dir


def test_decode_cache_is_bounded(captioner, photo):
    from viewer.app.session import Studio
    small = Studio(captioner, max_decodes=2)
    for seed in range(5):
        small.decode(photo, "sat-soft", DecodeSettings(strategy="sample", seed=seed))
    assert len(small._decodes) == 2


# --- the HTTP API --------------------------------------------------------------------------------

def test_api_captions_a_photo_and_steps(server):
    from gradio_client import Client, handle_file
    url, _ = server
    client = Client(url, verbose=False)
    api = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    assert "/caption_photo" in api
    out = client.predict(handle_file(os.path.join(ASSETS, "chelsea.jpg")), "updown", "Greedy", 3, 1.0, 0, 20, "",
                         GUIDES_BY_DEFAULT, *S.Style().inputs(), api_name="/caption_photo")
    assert "updown" in out[1]
    payload = out[3]          # the page's view: every word's map comes with the caption, drawn in the page
    assert (payload["width"], payload["height"]) == (960, 639) and payload["kind"] == "regions"   # the photo, enlarged
    n_words = int(re.search(r"at step 1 of (\d+)", payload["panels"][0]).group(1))
    maps = S.unpacked(payload["maps"])   # numbers travel as base64 float32s (session.packed)
    assert len(maps) == len(payload["first"]) == len(payload["tokens"]) == n_words
    assert np.allclose(maps.sum(1), 1, atol=1e-4)          # region weights: a distribution
    assert all(f"at step {t} of" in p for t, p in enumerate(payload["panels"], 1))   # every word's panel, for the page
    assert [len(a) for a in payload["alternatives"]] == [len(p.split('class="bar-row"')) - 1 for p in payload["panels"]]


def test_the_servers_own_views_are_served_immutable(server):
    """A view the server still draws (the steered one) is a content-named file served with a cache
    header that lets the page keep it."""
    import urllib.request
    url, studio = server
    ex = studio.explore(os.path.join(ASSETS, "coffee.jpg"), "sat-soft", DecodeSettings(strategy="greedy"))
    coverage = studio.view(ex, S.Style(), 1)
    assert os.path.dirname(coverage) == studio.view_dir and S.is_view_url(f"/gradio_api/file={coverage}")
    with urllib.request.urlopen(f"{url}gradio_api/file={coverage}") as r:
        assert "immutable" in r.headers["cache-control"] and r.read()[:2] == b"\xff\xd8"
    assert not S.is_view_url(f"/gradio_api/file={studio.view_dir}/../secret.jpg")
    assert not S.is_view_url("/gradio_api/file=/tmp/gradio/abc/coffee.jpg")   # an upload may change: no promise


def test_api_gives_a_readable_error_for_a_bad_photo(server, tmp_path):
    from gradio_client import Client, handle_file
    url, _ = server
    bad = tmp_path / "holiday.jpg"
    bad.write_bytes(b"not really a jpeg")
    client = Client(url, verbose=False)
    with pytest.raises(Exception) as info:
        client.predict(handle_file(str(bad)), "sat-soft", "Greedy", 3, 1.0, 0, 20, "", GUIDES_BY_DEFAULT, *S.Style().inputs(),
                       api_name="/caption_photo")
    assert "holiday.jpg: not an image file" in str(info.value)
    assert "Traceback" not in str(info.value)


# --- a real browser ------------------------------------------------------------------------------

def _browser(playwright):
    assert os.path.exists(CHROMIUM), "Debian chromium is required for the browser tests (.ci/run installs it)"
    from viewer.measure.browserbench import CHROMIUM_ARGS
    # (the heap read exactly, after a collection the test asks for: test_page_view's memory test)
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS + [
        "--enable-precise-memory-info", "--js-flags=--expose-gc"])


def _image_size(page, elem_id):
    """Natural size of the image shown in a component, once it has loaded."""
    size = f"""() => {{ const i = document.querySelector('#{elem_id} img');
        return i && i.complete && i.naturalWidth > 0 ? [i.naturalWidth, i.naturalHeight] : null; }}"""
    page.wait_for_function(size)
    return page.evaluate(size)


def _page_with_photo(browser, url: str, timeout_ms: int = 60_000, photo: str = "coffee.jpg"):
    """A page of the app at `url` that has uploaded an example photo."""
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.set_default_timeout(timeout_ms)
    page.goto(url)
    page.locator("#photo input[type=file]").set_input_files(os.path.join(ASSETS, photo))
    page.wait_for_timeout(1500)
    return page


def _captioned_page(browser, url: str, timeout_ms: int):
    """A page of the app at `url` that has uploaded coffee.jpg and captioned it with the first model."""
    from playwright.sync_api import expect
    page = _page_with_photo(browser, url, timeout_ms)
    page.locator("#run").click()
    expect(page.locator("#status")).to_contain_text("caption", timeout=90_000)
    return page


def test_browser_session(server, tmp_path):
    from playwright.sync_api import expect, sync_playwright
    url, studio = server
    with sync_playwright() as p:
        browser = _browser(p)
        page = _captioned_page(browser, url, 60_000)
        words = page.locator("#caption .token")
        expect(words.first).to_be_visible()
        n_words = words.count()
        assert n_words >= 2
        # click the second word: it becomes the selected one and the panel names it
        second = words.nth(1).inner_text().strip()
        words.nth(1).click()
        expect(page.locator("#panel .step-facts")).to_contain_text(f"{second} at step 2")
        assert page.evaluate("() => { const c = document.querySelector('#view canvas'); return [c.width, c.height]; }") \
            == [960, 640]                                    # the 600x400 photo, enlarged (display_copy)
        # the slider moves the step
        page.locator("#step input[type=range]").fill("1")
        expect(page.locator("#panel .step-facts")).to_contain_text("at step 1")
        # keyboard arrow
        page.locator("body").press("ArrowRight")
        expect(page.locator("#panel .step-facts")).to_contain_text("at step 2")
        # play animates the words, pause stops it
        page.locator("#play").click()
        expect(page.locator("#panel .step-facts")).to_contain_text("at step 3", timeout=20_000)
        page.locator("#play").click()
        expect(page.locator("#play")).to_contain_text("Play")
        # overlay types: the page redraws the view
        before = page.locator("#view canvas").get_attribute("data-shown")
        page.locator("#upsampling").get_by_text("blocky").click()
        page.wait_for_function(f"() => document.querySelector('#view canvas').dataset.shown !== {json.dumps(before)}")
        assert "|blocky|" in page.locator("#view canvas").get_attribute("data-shown")
        # export a GIF
        page.locator("#export-gif").click()
        link = page.locator("#download a").first
        expect(link).to_be_visible()
        assert ".gif" in (link.get_attribute("href") or "")
        # diagnose: sanity and grounding, then occlusion by clicking the photo
        page.get_by_text("Diagnose: grounding").click()
        page.locator("#diagnose").click()
        expect(page.locator("#diagnosis")).to_contain_text("map-to-map similarity", timeout=60_000)
        expect(page.locator("#diagnosis svg polyline")).to_have_count(2)   # the word's deletion curve
        # ... and they plot that word's curves as the session computes them
        step = int(re.search(r"at step (\d+)", page.locator("#panel .step-facts").inner_text()).group(1))
        model = page.locator("#model input").input_value()
        ex = studio.explore(os.path.join(ASSETS, "coffee.jpg"), model, DecodeSettings(beam_size=3))
        ex.go_to(step)
        _assert_curves_plot(page.locator("#diagnosis").inner_html(), studio, ex)
        # steering (the default click): the word looks where the photo was clicked
        at = page.evaluate("""(side) => { const b = window.__viewerMain.picture(),   // the photo's box in the canvas
            r = document.querySelector('#view canvas').getBoundingClientRect();
            return {x: b.left - r.left + 1.5 * b.width / side, y: b.top - r.top + 1.5 * b.height / side}; }""",
                           ex.trace.grid_side)
        page.locator("#view canvas").click(position=at)
        # near the top-left corner: the click lands on the right cell although the view is shown scaled
        expect(page.locator("#clicked")).to_contain_text("look at (row 1, col 1)", timeout=60_000)
        expect(page.locator("#clicked")).to_contain_text("Where you steered it")
        assert _image_size(page, "steered-view") == [960, 640]
        # hiding by clicking the photo
        page.locator("#click-mode").get_by_text("Hide that place").click()
        page.locator("#view canvas").click()
        expect(page.locator("#clicked")).to_contain_text("Hid cell (row", timeout=60_000)
        shot = tmp_path / "explore.png"
        page.screenshot(path=str(shot), full_page=True)
        pixels = np.asarray(Image.open(shot).convert("L"))
        assert pixels.std() > 20, "the screenshot is blank"
        # compare
        page.get_by_role("tab", name="Compare").click()
        page.locator("#cmp-run").click()
        expect(page.locator("#cmp-caption-2")).to_contain_text("updown", timeout=90_000)
        texts = [page.locator(f"#cmp-caption-{i}").inner_text() for i in range(3)]
        plain = [t.split(": ", 1)[1].replace("**", "").replace("[", "").replace("]", "") for t in texts]
        assert plain[0] == plain[1] == plain[2]          # same words for every model
        page.wait_for_function("() => [...document.querySelectorAll('[id^=cmp-view] canvas')]"
                               ".filter((c) => c.dataset.shown).length === 3")   # drawn in the page
        page.locator("#cmp-step input[type=range]").fill("2")   # the same word in every view, at its first token
        page.wait_for_function("() => [...document.querySelectorAll('[id^=cmp-view] canvas')]"
                               ".every((c) => c.dataset.step === String(window.__attentionViews[c.closest('[id^=cmp-view]').id]"
                               ".payload.word_firsts[1]))")
        # the paper's soft-vs-hard figure: one row per model, one column per word
        page.locator("#cmp-figure").click()
        link = page.locator("#cmp-download a").first
        expect(link).to_be_visible(timeout=60_000)
        assert "_figure.png" in (link.get_attribute("href") or "")
        browser.close()


def _assert_curves_plot(page, studio, ex):
    """The two polylines are the word's deletion curves: x at each level's share of units, y the drop
    (clipped at 0) on the axis from 0 (y=110) to the top label (y=10)."""
    import re
    from viewer.analysis.faithfulness import LEVELS, trace_faithfulness
    w = trace_faithfulness(studio.captioner, ex.photo, ex.model, ex.trace, [ex.step])[0]
    top = float(re.search(r'>([\d.]+) nats</text>', page).group(1))
    assert np.isclose(top, max([1.0, *w.curve_top, *w.curve_random]), atol=0.051)
    lines = re.findall(r'<polyline[^>]*points="([^"]+)"', page)
    assert len(lines) == 2
    for points, curve in zip(lines, (w.curve_top, w.curve_random)):
        xy = np.array([[float(v) for v in p.split(",")] for p in points.split()])
        assert np.allclose(xy[:, 0], [20 + 260 * f for f in LEVELS], atol=0.051)
        drops = (110 - xy[:, 1]) / 100 * max([1.0, *w.curve_top, *w.curve_random])
        assert np.allclose(drops, np.maximum(curve, 0), atol=0.002 * top + 1e-3), (drops, curve)
    assert f"by {w.drop_top:.2f} nats" in page


def test_diagnosis_and_occlusion_panels(studio, photo):
    ex = studio.explore(photo, "sat-hard", DecodeSettings(strategy="greedy"))
    page = P.diagnosis(studio, ex)
    assert "map-to-map similarity" in page and "hard sample left" in page
    assert ("cup" in page) == ("cup" in ex.trace.words)          # object words get a grounding row
    assert page.count("<polyline") == 2 and 'id="deletion-curve"' in page   # the selected word's two curves
    _assert_curves_plot(page, studio, ex)
    assert f"Does <b>{ex.trace.steps[0].word}</b> depend" in page
    ex.step = 1
    report = P.occlusion(studio, ex)
    assert f"p(<b>{ex.trace.steps[1].word}</b>)" in report and "New caption" in report
    assert S.unit_at(ex, 0, 0) == 0
    h, w = ex.display.shape[:2]                                     # clicks come in view pixels
    assert S.unit_at(ex, w - 1, h - 1) == 195
    regions = studio.explore(photo, "updown", DecodeSettings(strategy="greedy"))
    unit = S.unit_at(regions, w / 2, h / 2)
    x1, y1, x2, y2 = regions.trace.boxes_pixels()[unit]
    assert x1 <= photo.width / 2 <= x2 and y1 <= photo.height / 2 <= y2
    assert "Hid region" in P.occlusion(studio, regions, [unit])


def test_views_are_drawn_between_the_view_limits(photo):
    """Small photos are enlarged (a browser maps clicks right only on an image shown no larger than
    it is), big ones reduced, both keeping the aspect ratio."""
    small = S.display_copy(photo)
    assert max(small.shape[:2]) == S.MIN_VIEW_SIDE
    assert abs(small.shape[1] / small.shape[0] - photo.width / photo.height) < 0.01
    big = S.display_copy(photo, side=300, min_side=200)
    assert max(big.shape[:2]) == 300


def test_references_and_scores(captioner, tiny_data, photo):
    from viewer.app.session import Studio
    from viewer.data.datasets import load_dataset
    studio = Studio(captioner, dataset=load_dataset(tiny_data))
    refs = studio.references_for("/somewhere/uploaded/coffee.jpg")
    assert refs and "coffee" in refs[0]
    ex = studio.explore(photo, "sat-soft", DecodeSettings(strategy="greedy"))
    scores = studio.score(ex, refs)
    assert set(scores) == {"BLEU-4", "METEOR", "CIDEr"} and all(v >= 0 for v in scores.values())
    perfect = studio.score(ex, [ex.trace.caption])
    assert perfect["METEOR"] > 50
    without_corpus = Studio(captioner).score(ex, refs)
    assert "CIDEr" not in without_corpus and without_corpus["BLEU-4"] == scores["BLEU-4"]
    studio.close()


def test_session_logic_step_beam_score_triage_compare(studio, photo):
    """What the handlers used to do inline: clamped word selection, beam choice, escaped scores,
    triage cells, Compare's line."""
    ex = studio.explore(photo, "sat-soft", DecodeSettings(strategy="beam", beam_size=2))
    assert ex.go_to(0) == 0 and ex.go_to(999) == ex.n_steps - 1 and ex.go_to(2) == 1 and ex.step == 1
    ex.choose_beam(1)
    assert (ex.beam, ex.step) == (1, 0) and ex.trace is ex.beams[1]
    page = P.score_html('a <script>alert(1)</script> "dog"', {"BLEU-4": 12.345}, corpus=False)
    assert "<script>" not in page and "&lt;script&gt;" in page and "BLEU-4 12.3" in page and "--data" in page
    assert "--data" not in P.score_html("a dog", {"CIDEr": 1.0}, corpus=True)
    rows = [{"rank": 1, "image": "/far/away/dog.jpg", "caption": "a dog", "CIDEr": 0.5}]
    assert P.triage_table(rows) == [[1, "dog.jpg", "a dog", 0.5, "", "", "", ""]]
    line = P.compare_line(ex.trace, 1)
    total = sum(s.logprob for s in ex.trace.steps)
    assert line.startswith(f"**{ex.trace.model}** (log p {total:.2f}): ")
    assert f"**[{ex.trace.steps[1].word}]**" in line and line.count("**[") == 1
    assert studio.compare_caption(ex, ["sat-soft"], "  a red bus ") == "a red bus"
    assert studio.compare_caption(ex, ["sat-soft"], " ") == studio.decode(ex.photo, "sat-soft", ex.settings)[0].caption
