"""One walk through the whole app in chromium, as a new user meets it, at a laptop's 1280x800 and a
projector's 1280x720 (Explore also at 1920x1080): Explore, every Explain method, Ask, every mode of Compare, Triage, lecture keys
and a bad file. It fails on any error toast where none is due, on Explore's caption, map or step
buttons outside the window, and on a Compare caption shorter than Explore's for the same model and
settings. A screenshot of each state is kept beside the test's files (tmp_path)."""
from __future__ import annotations

import os

import pytest

from viewer.analysis.explain import METHOD_LABELS
from viewer.app.ui import view_title

from test_app import _browser
from conftest import ASSETS

SIZES = [(1280, 800), (1280, 720)]
TOASTS = "() => [...document.querySelectorAll('.toast-body.error')].map((t) => t.innerText)"
IN_WINDOW = """(sels) => sels.map((s) => { const e = document.querySelector(s); if (!e) return [s, 'missing'];
  const r = e.getBoundingClientRect();
  return [s, r.width > 0 && r.top >= 0 && r.bottom <= window.innerHeight + 1 ? 'in' : `${r.top}-${r.bottom}`]; })"""
EXPLORE_PARTS = ["#caption .token", "#view canvas", "#prev", "#play", "#next"]


def _no_toast(page, state: str):
    assert page.evaluate(TOASTS) == [], f"an error toast after {state}"


def _words(text: str) -> list[str]:
    """A Compare line's caption words: "**model**: a dog runs" -> [a, dog, runs]."""
    return text.split(":", 1)[-1].split()


@pytest.mark.parametrize("width,height", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_a_walk_through_every_tab_and_mode(server, tmp_path, width, height):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout, expect, sync_playwright
    url, studio = server
    shots = iter(range(100))

    def shot(name):
        page.screenshot(path=str(tmp_path / f"{next(shots):02d}-{name}-{width}x{height}.png"))

    with sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page(viewport={"width": width, "height": height})
        page.set_default_timeout(90_000)
        page.goto(url)
        page.locator("#photo input[type=file]").set_input_files(os.path.join(ASSETS, "coffee.jpg"))
        page.locator("#run").click()
        expect(page.locator("#status")).to_contain_text("caption")
        page.locator("#caption .token").nth(1).click()
        page.evaluate("() => window.scrollTo(0, 0)")
        page.wait_for_function("() => document.querySelector('#view canvas')?.dataset.shown")
        placed = dict(page.evaluate(IN_WINDOW, EXPLORE_PARTS))
        assert set(placed.values()) == {"in"}, placed              # caption, map and stepping on one screen
        expect(page.locator("#view .av-title")).to_contain_text(":")   # the view names its word
        explored = [t.strip() for t in page.locator("#caption .token").all_inner_texts()]
        model = page.locator("#model input").input_value()
        shot("explore")
        if (width, height) == SIZES[0]:   # the same page on a 1920x1080 projector: still one screen
            page.set_viewport_size({"width": 1920, "height": 1080})
            page.wait_for_timeout(500)
            placed = dict(page.evaluate(IN_WINDOW, EXPLORE_PARTS))
            assert set(placed.values()) == {"in"}, placed
            shot("explore-1920x1080")
            page.set_viewport_size({"width": width, "height": height})
            page.wait_for_timeout(500)
        _no_toast(page, "a caption")

        methods = page.locator("#explain-with label").all_inner_texts()
        assert len(methods) >= 2
        for method in methods[1:] + methods[:1]:                  # every map, then attention again
            page.locator("#explain-with").get_by_text(method, exact=True).click()
            expect(page.locator("#explain-with input:checked")).to_have_value(method)
            key = next(m for m, text in METHOD_LABELS.items() if text == method)
            expect(page.locator("#view .av-title")).to_contain_text(view_title(key)[1:], timeout=180_000)   # drawn
            _no_toast(page, f"Explain with {method}")
        shot("explained")

        page.get_by_role("tab", name="Compare").click()
        page.get_by_text("Models and words").click()
        expect(page.locator("#cmp-mode label").first).to_be_visible()
        modes = page.locator("#cmp-mode label").all_inner_texts()
        assert len(modes) >= 4
        for mode in modes:
            page.locator("#cmp-mode").get_by_text(mode, exact=True).click()
            if "question" in mode:
                page.locator("#cmp-question textarea").fill("what is on the table?")
            page.locator("#cmp-caption-0").evaluate("(e) => e.dataset.before = e.innerText")
            page.locator("#cmp-run").click()
            try:   # (the first line is the same in two modes: the first model's own caption, forced on itself)
                page.wait_for_function("() => { const e = document.querySelector('#cmp-caption-0');"
                                       " return e.innerText.trim() && e.innerText !== e.dataset.before; }", timeout=30_000)
            except PlaywrightTimeout:
                assert page.locator("#cmp-caption-0").inner_text().strip()
            page.wait_for_timeout(500)
            _no_toast(page, f"Compare: {mode}")
            if mode == "Each model's own caption":
                lines = [page.locator(f"#cmp-caption-{i}").inner_text() for i in range(3)]
                own = next(line for line in lines if f"{model}" in line.split(":")[0])
                assert len(_words(own)) >= len(explored), (own, explored)   # Explore's settings, not the question's
            shot(f"compare-{modes.index(mode)}")
        page.keyboard.press("ArrowRight")                          # the arrows move Compare's word
        expect(page.locator("#cmp-step input[type=number]")).to_have_value("2")

        page.get_by_role("tab", name="Triage").click()
        page.wait_for_timeout(500)
        shot("triage")
        _no_toast(page, "Triage")

        page.get_by_role("tab", name="Explore").click()
        page.locator("#question textarea").fill("what is on the table?")
        page.locator("#ask").click()
        expect(page.locator("#status")).to_contain_text("→")
        shot("asked")
        _no_toast(page, "a question")

        page.locator("#lecture input").check()
        page.keyboard.press("ArrowRight")
        page.keyboard.press("2")
        expect(page.locator("#status")).to_contain_text("caption(s)")      # the second model's caption
        assert page.locator("#model input").input_value() != model
        shot("lecture")
        page.keyboard.press("Escape")
        _no_toast(page, "the lecture keys")

        bad = tmp_path / "holiday.jpg"
        bad.write_bytes(b"not really a jpeg")
        page.locator("#photo input[type=file]").set_input_files(str(bad))
        page.locator("#run").click()
        page.wait_for_function(f"() => ({TOASTS})().length > 0")
        toasts = page.evaluate(TOASTS)
        assert len(toasts) == 1 and "holiday.jpg" in toasts[0] and "went wrong" not in toasts[0], toasts
        shot("bad-file")
        browser.close()
