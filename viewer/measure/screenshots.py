"""The README's pictures of the app, made by one command: the app on the shipped models in headless
Debian chromium, the example cup captioned in Explore with a word chosen, at a laptop's 1280x800,
a projector's 1280x720 and 1920x1080, and Compare at 1280x800; each PNG into --out.

    python -m viewer.measure.screenshots [--out assets] [--photo assets/coffee.jpg]
"""
from __future__ import annotations

import argparse
import os
import shutil

from ..paths import ASSETS, CHECKPOINT_DIR
from .browserbench import CHROMIUM_ARGS

SIZES = [(1280, 800), (1280, 720), (1920, 1080)]


def explore(page, url: str, photo: str) -> None:
    """The photo captioned by the first model, its second word chosen, the page at its top."""
    from playwright.sync_api import expect
    page.goto(url)
    page.locator("#photo input[type=file]").set_input_files(photo)
    page.locator("#run").click()
    expect(page.locator("#status")).to_contain_text("caption", timeout=180_000)
    page.locator("#caption .token").nth(1).click()
    page.wait_for_function("() => document.querySelector('#view canvas')?.dataset.shown")
    page.evaluate("() => window.scrollTo(0, 0)")
    page.wait_for_timeout(500)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=ASSETS)
    ap.add_argument("--photo", default=os.path.join(ASSETS, "coffee.jpg"))
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright
    from ..app import create_app, free_port, launch
    demo, _ = create_app("cpu", CHECKPOINT_DIR)
    port = free_port()
    launch(demo, "127.0.0.1", port, block=False)
    url = f"http://127.0.0.1:{port}/"
    os.makedirs(args.out, exist_ok=True)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium") or "/usr/bin/chromium",
                                        args=CHROMIUM_ARGS)
            for width, height in SIZES:
                page = browser.new_page(viewport={"width": width, "height": height})
                explore(page, url, args.photo)
                page.screenshot(path=os.path.join(args.out, f"explore-{width}x{height}.png"))
                if (width, height) == SIZES[0]:
                    page.get_by_role("tab", name="Compare").click()
                    page.locator("#cmp-run").click()
                    page.wait_for_function("() => document.querySelector('#cmp-caption-0').innerText.trim()",
                                           timeout=180_000)
                    page.wait_for_timeout(1500)
                    page.screenshot(path=os.path.join(args.out, f"compare-{width}x{height}.png"))
                page.close()
            browser.close()
    finally:
        demo.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
