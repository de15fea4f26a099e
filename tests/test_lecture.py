"""Lecture mode: `launch.py --lecture` or the Lecture toggle; big caption, the view filling the screen,
advanced panels folded away, and keys for a lecturer (space, arrows, 1-5, P, F, Escape).

The browser tests need Debian's chromium, like tests/test_app.py. Set LECTURE_SCREENSHOTS=DIR to keep
the screenshots (the README's assets/lecture-*.png are made that way, on the shipped models).
"""
from __future__ import annotations

import os

import pytest

from viewer.app import parser
from viewer.app import MODEL_KEYS
from viewer.app import session as S
from viewer.app import panels as P
from viewer.engine.checkpoints import shipped

from conftest import ASSETS
from test_app import _browser

SIZES = [(1920, 1080), (1280, 720)]


def test_the_flag_and_the_helpers():
    assert parser().parse_args(["--lecture"]).lecture and not parser().parse_args([]).lecture
    assert MODEL_KEYS == (1, 2, 3, 4, 5)                    # one key per shipped captioner
    models = shipped()
    assert models == ["sat-soft", "sat-hard", "updown", "transformer", "updown-copy"]
    assert [S.model_for_key(models, k) for k in MODEL_KEYS] == models
    for k in MODEL_KEYS:                                     # a key past the list names no model
        with pytest.raises(ValueError, match=f"no model {k}"):
            S.model_for_key(models[:k - 1], k)
    with pytest.raises(ValueError, match="no model 6"):
        S.model_for_key(models, 6)
    assert "1-5 model" in P.LECTURE_KEYS
    line = P.lecture_line("<sat-hard>")
    assert "&lt;sat-hard&gt;" in line and "Esc" in line


@pytest.fixture(scope="module")
def lecture_server(tiny_checkpoints):
    """The app started like `launch.py --lecture`, on the tiny models."""
    from viewer.app import create_app, free_port, launch
    demo, studio = create_app("cpu", tiny_checkpoints, lecture=True)
    port = free_port()
    launch(demo, "127.0.0.1", port, block=False)
    yield f"http://127.0.0.1:{port}/", studio
    demo.close()


FONT = "parseFloat(getComputedStyle(document.querySelector('#caption .token')).fontSize)"
QUESTION_FONT = "parseFloat(getComputedStyle(document.querySelector('#question textarea')).fontSize)"
LECTURE = "() => document.body.classList.contains('lecture')"
# the selected word: amber (the other labels, guessed / said not seen, have their own colours)
SELECTED = "() => [...document.querySelectorAll('#caption .token')].findIndex(t => t.classList.contains('av-selected'))"
VIEW_BOX = "() => window.__viewerMain?.payload ? window.__viewerMain.picture() : null"   # the photo as drawn


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_lecture_mode_in_a_browser(size, request, tmp_path):
    """1920x1080: started with --lecture; 1280x720: switched on with the toggle."""
    from playwright.sync_api import expect, sync_playwright
    width, height = size
    flag = width == 1920
    url, studio = request.getfixturevalue("lecture_server" if flag else "server")
    models = studio.models()
    with sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page(viewport={"width": width, "height": height})
        page.set_default_timeout(60_000)
        page.goto(url)
        page.locator("#photo input[type=file]").set_input_files(os.path.join(ASSETS, "coffee.jpg"))
        page.wait_for_timeout(1500)
        if flag:
            page.wait_for_function(LECTURE)               # on at load; the photo panel is folded away,
            expect(page.locator("#lecture input")).to_be_checked()
            expect(page.locator("#inputs")).to_be_hidden()
            page.locator("body").press("p")                # P opens the photo picker over the view,
            expect(page.locator("#inputs")).to_be_visible()
            expect(page.locator("#run")).to_be_in_viewport()
            page.locator("body").press("Escape")           # Escape closes it (still in lecture mode)
            expect(page.locator("#inputs")).to_be_hidden()
            assert page.evaluate(LECTURE)
            page.locator("body").press("1")                # and key 1 captions the photo with the first model
        else:
            assert not page.evaluate(LECTURE)
            page.locator("#run").click()
            expect(page.locator("#status")).to_contain_text("caption", timeout=90_000)
            # keys do nothing while typing in a field
            page.wait_for_function(f"() => ({SELECTED})() === 0")
            page.locator("#model input").focus()
            page.keyboard.press("ArrowRight")
            page.wait_for_timeout(1000)
            assert page.evaluate(SELECTED) == 0
            page.locator("#model input").blur()
            page.locator("#lecture input").click()
            page.wait_for_function(LECTURE)
        expect(page.locator("#status")).to_contain_text(models[0], timeout=90_000)
        expect(page.locator("#lecture-line")).to_contain_text(models[0])
        page.wait_for_function(f"() => ({SELECTED})() === 0")

        # big type, the view filling the screen, the rest folded away
        page.wait_for_function(f"() => {FONT} >= 48")   # (after the switch's transition)
        page.wait_for_function(VIEW_BOX)
        box = page.evaluate(VIEW_BOX)
        assert box["height"] >= 0.6 * height, box
        assert box["top"] >= 0 and box["top"] + box["height"] <= height + 1, box
        assert box["left"] >= 0 and box["left"] + box["width"] <= width + 1, box
        assert page.evaluate("() => document.documentElement.scrollHeight") <= height + 1
        for hidden in ("Decoding", "Overlay", "Raw attention numbers"):
            expect(page.get_by_text(hidden, exact=True)).to_be_hidden()
        expect(page.get_by_text("Branch: choose another word")).to_be_hidden()
        expect(page.get_by_text("Diagnose: grounding")).to_be_hidden()
        for elem_id in ("inputs", "panel", "strip", "export-gif", "beams"):
            expect(page.locator(f"#{elem_id}")).to_be_hidden()
        for elem_id in ("caption", "view", "play", "speed", "lecture", "question", "ask"):
            expect(page.locator(f"#{elem_id}")).to_be_visible()
        expect(page.locator("#ask-examples")).to_be_hidden()         # a typed question, in big type
        assert page.evaluate(f"() => {QUESTION_FONT}") >= 24
        page.screenshot(path=str(tmp_path / f"lecture-{width}x{height}.png"))
        if os.environ.get("LECTURE_SCREENSHOTS"):
            page.screenshot(path=os.path.join(os.environ["LECTURE_SCREENSHOTS"], f"lecture-{width}x{height}.png"))

        # the keys: arrows move the word, space plays and pauses, 2 switches the model
        page.keyboard.press("ArrowRight")
        page.wait_for_function(f"() => ({SELECTED})() === 1")
        page.locator("#speed input[type=range]").fill("0.4")    # the fastest speed
        page.keyboard.press(" ")
        expect(page.locator("#play")).to_contain_text("Pause")
        page.wait_for_function(f"() => ({SELECTED})() >= 2", timeout=20_000)
        page.keyboard.press(" ")
        expect(page.locator("#play")).to_contain_text("Play")
        page.keyboard.press("2")
        expect(page.locator("#status")).to_contain_text(models[1], timeout=90_000)
        expect(page.locator("#lecture-line")).to_contain_text(models[1])
        assert page.locator("#model input").input_value() == models[1]
        page.wait_for_function(f"() => ({SELECTED})() === 0")

        # F: full screen; Escape leaves it, then leaves lecture mode
        page.keyboard.press("f")
        page.wait_for_function("() => document.fullscreenElement !== null")
        page.keyboard.press("Escape")
        page.wait_for_function("() => document.fullscreenElement === null")
        page.keyboard.press("Escape")
        page.wait_for_function(f"() => !({LECTURE})()")
        expect(page.locator("#lecture input")).not_to_be_checked()
        expect(page.locator("#inputs")).to_be_visible()
        expect(page.locator("#panel")).to_be_visible()
        page.wait_for_function(f"() => {FONT} < 48")
        assert page.evaluate(f"() => {QUESTION_FONT}") < 24
        expect(page.locator("#ask-examples")).to_be_visible()
        browser.close()
