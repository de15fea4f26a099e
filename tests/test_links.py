"""Deep links (app/links.py): `?photo=NAME&model=M&word=N` opens the app on that example photo, model and
word; only the example photos can be named, by their bytes, not their file name."""
from __future__ import annotations

import os
import shutil

import pytest
from PIL import Image

from viewer.app.links import link_query, read_link

from conftest import ASSETS
from test_app import _browser

MODELS = ["sat-soft", "sat-hard"]


def test_a_link_names_an_example_photo_a_model_and_a_word():
    assert read_link({}, MODELS) is None and read_link({"model": "sat-hard"}, MODELS) is None
    link = read_link({"photo": "chelsea.jpg", "model": "sat-hard", "word": "3"}, MODELS)
    assert link == (os.path.join(ASSETS, "chelsea.jpg"), "sat-hard", 3)
    assert read_link({"photo": "chelsea.jpg"}, MODELS) == (os.path.join(ASSETS, "chelsea.jpg"), "sat-soft", 1)
    for params, message in (({"photo": "../launch.py"}, "links can name an example photo: astronaut.jpg"),
                            ({"photo": "coffee.jpg", "model": "nosuch"}, "this app has sat-soft, sat-hard"),
                            ({"photo": "coffee.jpg", "word": "0"}, "no word number"),
                            ({"photo": "coffee.jpg", "word": "two"}, "no word number")):
        with pytest.raises(ValueError, match=message):
            read_link(params, MODELS)


def test_only_an_example_photos_bytes_get_a_link(tmp_path):
    same = tmp_path / "renamed.jpg"
    shutil.copy(os.path.join(ASSETS, "coffee.jpg"), same)
    assert link_query(str(same), "updown") == "?photo=coffee.jpg&model=updown"
    impostor = tmp_path / "coffee.jpg"            # an upload that only shares the name
    Image.new("RGB", (32, 32), "red").save(impostor)
    assert link_query(str(impostor), "updown") == "" and link_query(None, "updown") == ""


def test_a_link_opens_the_app_at_its_word_and_the_page_makes_one(server):
    from playwright.sync_api import expect, sync_playwright
    url, studio = server
    model = studio.models()[1]
    with sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.set_default_timeout(90_000)
        page.goto(f"{url}?photo=chelsea.jpg&model={model}&word=3")
        expect(page.locator("#status")).to_contain_text(model, timeout=90_000)
        assert page.locator("#model input").input_value() == model
        expect(page.locator("#step input[type=number]")).to_have_value("3", timeout=30_000)
        page.wait_for_function("() => [...document.querySelectorAll('#caption .token')]"
                               ".findIndex(t => t.classList.contains('av-selected')) === 2")
        page.locator("#link-btn").click()
        expect(page.locator("#link textarea")).to_have_value(f"{url}?photo=chelsea.jpg&model={model}&word=3", timeout=10_000)
        page.goto(f"{url}?photo=nosuch.jpg")
        expect(page.locator(".toast-body.error")).to_contain_text("links can name an example photo", timeout=30_000)
        browser.close()
