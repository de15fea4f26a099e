"""What a person feels, measured in a real browser: headless Debian chromium driven by Playwright.

For each model and a few photos: upload the photo, choose the model, click Caption, and time
from the click to the moment the main view (#view, drawn in the page: app/page_view.js) has drawn
the new trace ("caption to first overlay"). Then step through the words: click words of the caption and
press ArrowRight, each timed from the input event to the new word drawn; hover the photo, timed from the
pointer's event to the words re-tinted and to the frame that shows them; and let Play tick a few times,
timed as the interval between consecutive overlays (the page's timer ticks every 0.9 s). By default
Caption is clicked once the chosen photo is prepared (opened and encoded on the server, decoded in the
page), as a person's pause lets it be; --click-at-once clicks the moment the upload shows.
The first caption per model is a warm-up (model load) and is excluded from the statistics.
With --explain METHOD, each caption is then explained: the click on that "Explain with" choice is
timed to its first view (the whole caption's maps computed on the server), then a few words are
clicked again, timed as stepping through the explanation's views. With --pair, two browsers at once:
one keeps clicking words while the other captions, its steps timed as when it is alone.

    python -m viewer.measure.loadtest --browser [--url http://127.0.0.1:7860/] [--models sat-soft updown]
                              [--photos 3] [--pair] [--out bench.json]

Without --url the app is started as a subprocess on a free 127.0.0.1 port (shipped models, or
--checkpoints DIR) and stopped at the end. Loopback only; chromium is kept off the network.

Timing happens inside the page (performance.now() clock): the input's own event timestamp (a
capture listener on window records `event.timeStamp` of the trusted click / keydown), and the
view's canvas records when it finished drawing a trace, word and style other than the one shown
before the input (its data-shown and data-drawn-at). Playwright's own round trips are not
counted. JSON goes to stdout (and --out), a short table to stderr.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from urllib.parse import urlparse

import numpy as np

from ..analysis.speed import browser_table
from ..paths import ASSETS, ROOT

LOOPBACK = ("127.0.0.1", "localhost", "::1")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic",
                 "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"]
NOTE = ("The first caption per model (model load) is a warm-up: it is reported as warmup_ms and excluded from "
        "the statistics. Caption and stepping times are measured in the page, from the input event (click / "
        "keydown) to the new word drawn on the #view canvas; play_interval is the time between consecutive "
        "overlays while playing (the page's timer: 0.9 s), play_slider_to_overlay from the slider moving to the "
        "overlay drawn (the page's own timer moves both; no request).")

# How often Playwright asks the page whether a measurement is over. The time itself is taken by the
# page's own event listeners, so this only sets how soon the next input follows. Polling on every
# animation frame (Playwright's default) kept headless chromium drawing frames: over a caption it took
# more CPU than the server, on the same 2 cores, slowing what it measured.
POLL_MS = 50
ASK_QUESTIONS = ("what colour is the cup?", "what is the man riding?", "where is the dog running?")

# Installed once in the page. `arm(trigger)` starts one measurement: t0 is the timestamp of the next
# trusted click/keydown ('input') or of the next change of the word slider ('slider'); it ends when a
# #view canvas has drawn something other than what it showed at arm time. `check(grace)` is polled by
# Playwright: the result once shown, 'unchanged' when the step panel was re-rendered but the view kept
# the same (content-named) src for `grace` ms, else null.
PAGE_PROBE = """
() => {
  if (window.__bench) return true;
  const view = document.querySelector('#view'), step = document.querySelector('#step'),
        panel = document.querySelector('#panel');
  if (!view || !step) return false;     // #panel is optional: without it only the timeout spots 'unchanged'
  // what the view shows: the page's canvas names its trace, word and style once drawn (page_view.js)
  const canvas = () => view.querySelector('canvas');
  const src = () => { const c = canvas(); return c ? (c.dataset.shown || null) : null; };
  const pre = () => { const c = canvas(); return c ? (c.dataset.preview || null) : null; };
  const range = () => { const r = step.querySelector('input[type=range]'); return r ? r.value : null; };
  const B = window.__bench = {armed: null};
  let value = range();
  const onInput = (e) => {
    const a = B.armed;
    if (a && a.trigger === 'input' && a.t0 === null && e.isTrusted) a.t0 = e.timeStamp;
  };
  window.addEventListener('click', onInput, true);
  window.addEventListener('keydown', onInput, true);
  // the new view counts as shown when the canvas finished drawing it (its data-drawn-at), seen by the
  // attribute's mutation or by a 4 ms poll while armed; `first` is when the word first showed, as a
  // preview (its data-preview-at) or as the exact frame, whichever came first
  const look = (t, polled) => {
    const a = B.armed, s = src(), p = pre();
    if (!a || a.t0 === null || a.loaded !== null) return;
    if (a.first === null && p && p !== a.pbaseline) a.first = Number(canvas().dataset.previewAt) || t;
    if (!s || s === a.baseline) return;
    if (a.srcSet === null) a.srcSet = t;
    a.loaded = Number(canvas().dataset.drawnAt) || t; a.src = s; a.polled = polled;
    if (a.first === null || a.first > a.loaded) a.first = a.loaded;
  };
  new MutationObserver(() => look(performance.now(), false))
    .observe(view, {subtree: true, childList: true, attributes: true, attributeFilter: ['data-shown', 'data-preview']});
  setInterval(() => { const a = B.armed;
                      if (a && a.t0 !== null && a.loaded === null) look(performance.now(), true); }, 4);
  // the step panel is re-rendered by the same server answer as the view: a change of its content (not
  // of its progress indicator) with the view unchanged means this step's view is the one shown
  const inTracker = (n) => { const e = n.nodeType === 1 ? n : n.parentElement;
                             return !!(e && e.closest('[data-testid=status-tracker]')); };
  const panelWatch = new MutationObserver((records) => {
    const t = performance.now(), a = B.armed;
    if (a && a.t0 !== null && a.panel === null && records.some((r) => !inTracker(r.target))) a.panel = t;
  });
  if (panel) panelWatch.observe(panel, {subtree: true, childList: true, characterData: true});
  // the slider moved: by the page (Play; its 'input' reaches window first, before the page draws the
  // word) or by the server (its re-rendered attributes)
  const moved = () => {
    const t = performance.now(), v = range();
    if (v === value) return;
    value = v;
    const a = B.armed;
    if (a && a.trigger === 'slider' && a.t0 === null) { a.t0 = t; a.value = v; }
  };
  window.addEventListener('input', (e) => { if (e.target.closest?.('#step')) moved(); }, true);
  new MutationObserver(moved).observe(step, {subtree: true, childList: true, attributes: true});
  // hovering the photo: from the pointer's event to the words re-tinted (the view's own listener has
  // run when the event bubbles up to window) and to the frame that shows them (the next animation frame)
  B.hovers = [];
  window.addEventListener('pointermove', (e) => {
    if (!e.isTrusted || !e.target.closest?.('#view canvas')) return;
    const t0 = e.timeStamp, tinted = performance.now(), looked = document.querySelectorAll('#caption .token[data-looked]').length;
    requestAnimationFrame(() => B.hovers.push({tinted: tinted - t0, frame: performance.now() - t0, looked}));
  });
  B.arm = (trigger) => {
    B.armed = {trigger, baseline: src(), pbaseline: pre(), t0: null, srcSet: null, loaded: null, first: null,
               panel: null, src: null, polled: false};
  };
  B.check = (grace) => {
    const a = B.armed, now = performance.now();
    if (!a || a.t0 === null) return null;
    look(now, true);
    const r = (x) => x === null ? null : Math.round((x - a.t0) * 10) / 10;
    if (a.loaded !== null)
      return {outcome: 'shown', ms: r(a.first), exact_ms: r(a.loaded), src_ms: r(a.srcSet), polled: a.polled,
              src: a.src, at: a.first,
              value: a.value === undefined ? null : Number(a.value)};
    if (a.panel !== null && src() === a.baseline && now - a.panel > grace)
      return {outcome: 'unchanged', panel_ms: r(a.panel)};
    return null;
  };
  B.state = () => {
    const a = B.armed;
    return a && {t0: a.t0, src_set: a.srcSet !== null, same_src: src() === a.baseline};
  };
  return true;
}
"""


# --- the app under test ------------------------------------------------------------------------------

def check_loopback(url: str) -> None:
    if urlparse(url).hostname not in LOOPBACK:
        raise ValueError("the browser benchmark only targets this machine (127.0.0.1)")


def app_config(url: str) -> dict:
    with urllib.request.urlopen(url.rstrip("/") + "/config", timeout=10) as r:
        return json.load(r)


def dropdown_models(url: str) -> list[str]:
    """What the app's Model dropdown offers."""
    for comp in app_config(url)["components"]:
        props = comp.get("props", {})
        if props.get("elem_id") == "model":
            return [c[1] if isinstance(c, (list, tuple)) else c for c in props.get("choices") or []]
    raise RuntimeError("the page has no Model dropdown (#model)")


class AppProcess:
    """The app (`attention-viewer`, which launch.py also runs) on a free loopback port, as a subprocess;
    stopped on exit. Started as a module, so it also works from an installed copy, which has no launch.py."""

    def __init__(self, checkpoints: str | None = None, device: str | None = None, start_timeout_s: float = 300):
        from ..app import free_port
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        cmd = [sys.executable, "-m", "viewer.cli", "--host", "127.0.0.1", "--port", str(self.port)]
        cmd += ["--checkpoints", checkpoints] if checkpoints else []
        cmd += ["--device", device] if device else []
        self.log = tempfile.TemporaryFile()
        env = dict(os.environ, GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the app exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                app_config(self.url)
                return
            except OSError:
                time.sleep(0.5)
        self.close()
        raise RuntimeError(f"the app did not answer within {start_timeout_s:.0f} s:\n{self.tail()}")

    def tail(self, n: int = 3000) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-n:]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# --- photos ------------------------------------------------------------------------------------------

def asset_photos(folder: str = ASSETS) -> list[str]:
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.lower().endswith((".jpg", ".jpeg")))


class FreshCopies:
    """Each upload gets a lossless copy of the photo with two random pixels: the server caches features
    and decodes by pixel content, so without this a photo seen by an earlier model (or an earlier run
    against the same server) would skip the encoder and the timing would not be what a new photo costs."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.folder = tempfile.mkdtemp(prefix="browserbench-")
        self.count = 0

    def __call__(self, path: str) -> str:
        if not self.enabled:
            return path
        from PIL import Image
        self.count += 1
        stem = os.path.splitext(os.path.basename(path))[0]
        out = os.path.join(self.folder, f"{stem}-{self.count}.png")
        with Image.open(path) as img:
            rgb = img.convert("RGB")
        noise = os.urandom(6)
        rgb.putpixel((0, 0), tuple(noise[:3]))
        rgb.putpixel((1, 0), tuple(noise[3:]))
        rgb.save(out, compress_level=1)
        return out

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


# --- the page ----------------------------------------------------------------------------------------

class Page:
    """The viewer's Explore tab in one browser page, with the timing probe installed."""

    def __init__(self, page, url: str, timeout_s: float, grace_ms: float = 1000, pause: bool = True):
        self.page, self.timeout_ms, self.grace_ms, self.pause = page, timeout_s * 1000, grace_ms, pause
        page.set_default_timeout(60_000)
        page.goto(url)
        page.wait_for_selector("#run")
        page.wait_for_function(PAGE_PROBE)

    def choose_model(self, name: str) -> None:
        box = self.page.locator("#model input")
        if box.input_value() == name:
            return
        box.click()
        self.page.locator(f'[role=option][aria-label="{name}"]').click()
        self.page.wait_for_function("n => document.querySelector('#model input').value === n", arg=name)

    def upload(self, path: str) -> None:
        """Put a photo in #photo and wait until the upload is shown (the Caption click would otherwise
        race it); with `pause`, also until the page holds the photo, prepared (opened and encoded on
        the server, decoded in the page), as a person's pause before Caption lets it be. The same
        file name already shown is kept as it is."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout
        name = os.path.basename(path)
        shown = ("n => { const i = document.querySelector('#photo img');"
                 "       return !!i && decodeURIComponent(i.src).endsWith('/' + n); }")
        if self.page.evaluate(shown, name):
            return
        ready = "() => window.__viewerPhotos?.ready ?? null"
        before = self.page.evaluate(ready)
        self.page.locator("#photo input[type=file]").set_input_files(path)
        self.page.wait_for_function(shown, arg=name)
        if self.pause:
            with contextlib.suppress(PlaywrightTimeout):   # (a photo the server cannot read: Caption says so)
                self.page.wait_for_function(f"b => ({ready})() !== b", arg=before, timeout=10_000, polling=POLL_MS)

    def measure(self, action, trigger: str = "input", timeout_ms: float | None = None) -> dict:
        """Arm the probe, run `action` (real Playwright input), and wait for the new view image."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout
        self.page.evaluate("t => window.__bench.arm(t)", trigger)
        action()
        try:
            handle = self.page.wait_for_function("g => window.__bench.check(g)", arg=self.grace_ms, polling=POLL_MS,
                                                 timeout=timeout_ms or self.timeout_ms)
            return handle.json_value()
        except PlaywrightTimeout:
            state = self.page.evaluate("() => window.__bench.state()") or {}
            if state.get("t0") is None:
                return {"outcome": "timeout", "why": "the input never reached the page"}
            if state.get("same_src"):
                return {"outcome": "unchanged", "why": "timed out with the same view image"}
            return {"outcome": "timeout", "why": "the view image changed but did not finish loading"}

    def caption(self, timeout_ms: float) -> dict:
        """The caption timed to its first overlay, with the server's own share (the status line's
        "N caption(s) in X s": the encoder and the decoding) and when the trace reached the page."""
        import re
        r = self.measure(lambda: self.page.locator("#run").click(), timeout_ms=timeout_ms)
        if r.get("outcome") == "shown":
            said = re.search(r"caption\(s\) in ([\d.]+) s", self.page.locator("#status").inner_text())
            r["server_ms"] = round(float(said.group(1)) * 1000, 1) if said else None
            r["received_ms"] = self.page.evaluate(
                "() => { const c = document.querySelector('#view canvas').dataset, a = window.__bench.armed;"
                " return Math.round((Number(c.receivedAt) - a.t0) * 10) / 10; }")
        return r

    def words(self) -> int:
        return self.page.locator("#caption .token").count()

    def click_word(self, index: int) -> dict:
        return self.measure(lambda: self.page.locator("#caption .token").nth(index).click())

    def explain(self, method: str, timeout_ms: float) -> dict:
        from ..analysis.explain import METHOD_LABELS
        label = METHOD_LABELS[method]
        return self.measure(lambda: self.page.locator("#explain-with").get_by_text(label).click(),
                            timeout_ms=timeout_ms)

    def ask(self, question: str, timeout_ms: float) -> dict:
        """Type a question (not timed, as a person types), then Ask: timed from the click to the answer's map."""
        self.page.locator("#question textarea").fill(question)
        return self.measure(lambda: self.page.locator("#ask").click(), timeout_ms=timeout_ms)

    def restyle(self, upsampling: str) -> dict:
        """Choose another upsampling in the Overlay controls: the page redraws the view itself."""
        return self.measure(lambda: self.page.locator("#upsampling").get_by_text(upsampling, exact=True).click())

    def arrow_right(self) -> dict:
        return self.measure(lambda: self.page.keyboard.press("ArrowRight"))

    def hover(self, n: int) -> list[dict]:
        """Move the pointer to n places across the photo; each timed to its frame (`ms`) and to the
        words re-tinted (`tinted_ms`). A move that tints no word counts as 'unchanged'."""
        self.page.locator("#view canvas").scroll_into_view_if_needed()
        box = self.page.evaluate("() => window.__viewerMain.picture()")
        out = []
        for k in range(n):
            f = (k + 0.5) / n
            seen = self.page.evaluate("() => window.__bench.hovers.length")
            self.page.mouse.move(box["left"] + f * box["width"], box["top"] + (1 - f) * box["height"])
            self.page.wait_for_function("n => window.__bench.hovers.length > n", arg=seen, polling=POLL_MS)
            h = self.page.evaluate("() => window.__bench.hovers.at(-1)")
            out.append({"outcome": "shown" if h["looked"] else "unchanged", "ms": round(h["frame"], 1),
                        "tinted_ms": round(h["tinted"], 1)})
        self.page.mouse.move(1, 1)   # off the photo: the words untinted
        return out

    def step_value(self) -> int:
        return int(self.page.locator("#step input[type=range]").input_value())

    def settle(self, quiet_ms: float = 1000, timeout_ms: float = 20_000) -> None:
        """Wait until the view image has not changed for `quiet_ms` (a late play tick must not be taken
        for the next caption's overlay)."""
        self.page.wait_for_function("""q => { const c = document.querySelector('#view canvas'), s = c ? c.dataset.shown : null,
            w = window.__settle || (window.__settle = {s, t: performance.now()});
            if (w.s !== s) { w.s = s; w.t = performance.now(); }
            if (performance.now() - w.t < q) return false;
            delete window.__settle; return true; }""", arg=quiet_ms, timeout=timeout_ms, polling=POLL_MS)

    def play_ticks(self, n: int, n_words: int) -> list[dict]:
        """Start Play and time up to `n` ticks; then pause. Play starts from the selected word, or from the
        first when the last is selected. Each tick gets `ms`, from the word slider moving in the page to the
        overlay drawn, and (after the first) `interval_ms`, from the previous tick's overlay to this one's:
        the pace a person sees, ideally the timer's 0.9 s. The page draws the word once the slider has
        moved, so `ms` only covers the drawing."""
        play = self.page.locator("#play")
        at = self.step_value()
        n = min(n, n_words if at >= n_words else n_words - at)
        out, previous = [], None
        for k in range(n):
            r = self.measure(play.click if k == 0 else (lambda: None), trigger="slider",
                             timeout_ms=self.timeout_ms + 2000)
            if r["outcome"] == "shown":
                if previous and previous.get("value") is not None and r.get("value") == previous["value"] + 1:
                    r["interval_ms"] = round(r["at"] - previous["at"], 1)
                previous = r
            out.append(r)
            if r["outcome"] == "timeout":
                break
        if "Play" not in play.inner_text():      # still playing: its label is "Pause"
            play.click()
            self.page.wait_for_function("() => document.querySelector('#play').innerText.includes('Play')")
        self.settle()
        return out


def word_targets(n_words: int, k: int) -> list[int]:
    """k distinct word indices to click, never the first (selected after captioning), in descending
    order so consecutive clicks always move and ArrowRight has room afterwards."""
    if n_words < 2 or k < 1:
        return []
    picks = np.unique(np.linspace(1, n_words - 1, num=min(k, n_words - 1)).round().astype(int))
    return [int(i) for i in picks[::-1]]


# --- the run -----------------------------------------------------------------------------------------

def _stats(samples: list[dict], key: str = "ms") -> dict:
    """`ms`: to the word's first overlay on screen (a preview or the exact frame); `exact_ms`: to render.py's pixels."""
    ms = np.array([s.get(key, s["ms"]) for s in samples if s["outcome"] == "shown"], dtype=float)
    out = {"n": int(ms.size),
           "p50_ms": round(float(np.percentile(ms, 50)), 1) if ms.size else None,
           "p90_ms": round(float(np.percentile(ms, 90)), 1) if ms.size else None,
           "max_ms": round(float(ms.max()), 1) if ms.size else None}
    for outcome in ("unchanged", "timeout", "error"):
        out[outcome] = sum(s["outcome"] == outcome for s in samples)
    return out


def run_browser_bench(url: str, models: list[str] | None = None, photos: list[str] | None = None, n_photos: int = 3,
                      clicks: int = 3, arrows: int = 3, ticks: int = 3, timeout_s: float = 10,
                      caption_timeout_s: float = 60, warmup_timeout_s: float = 300, fresh: bool = True,
                      viewport: tuple[int, int] = (1280, 800), chromium: str | None = None, log=None,
                      explain: str | None = None, pair: bool = False, pause: bool = True,
                      ask: bool = False) -> dict:
    """Drive the app at `url` in headless chromium; returns per-model timings (see the module doc), and
    with `pair` the two-browsers measurement of the first model (`two_browsers`). `pause`: Caption is
    clicked once the chosen photo is prepared (else the moment its upload shows). `ask`: also time a
    question per photo, Ask to the answer's map, by the first question answering model offered."""
    from playwright.sync_api import sync_playwright

    check_loopback(url)
    log = log or (lambda *a: None)
    chromium = chromium or shutil.which("chromium") or "/usr/bin/chromium"
    if not os.path.exists(chromium):
        raise FileNotFoundError(f"{chromium}: Debian's chromium is needed (apt-get install chromium)")
    offered = dropdown_models(url)
    models = list(models or offered)
    unknown = [m for m in models if m not in offered]
    if unknown:
        raise ValueError(f"the app does not offer {unknown}; it offers {offered}")
    every = asset_photos()
    photos = list(photos or every[:n_photos])
    warm_photo = next((p for p in reversed(every) if p not in photos), every[-1])
    copies = FreshCopies(fresh)
    result = {"url": url, "note": NOTE, "browser": None, "viewport": list(viewport),
              "settings": {"photos": [os.path.basename(p) for p in photos],
                           "warmup_photo": os.path.basename(warm_photo),
                           "clicks": clicks, "arrows": arrows, "ticks": ticks, "timeout_s": timeout_s,
                           "caption_timeout_s": caption_timeout_s, "fresh_photos": fresh, "explain": explain,
                           "pause_before_caption": pause, "ask": ask},
              "models": {}, "errors": []}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            result["browser"] = f"chromium {browser.version}"
            page = Page(browser.new_page(viewport={"width": viewport[0], "height": viewport[1]}), url, timeout_s,
                        pause=pause)
            for model in models:
                result["models"][model] = _bench_model(page, model, photos, warm_photo, copies, clicks, arrows, ticks,
                                                       caption_timeout_s, warmup_timeout_s, log, explain, ask)
            if pair and models:
                result["two_browsers"] = two_browsers(browser, url, models[0], photos, copies, viewport, timeout_s,
                                                      caption_timeout_s, log)
            browser.close()
    finally:
        copies.close()
    for model, r in result["models"].items():
        result["errors"] += [f"{model}: {e}" for e in r.pop("errors")]
    return result


def _summary(samples: list[dict], explain: str | None, ask: bool, ticks: int) -> dict:
    """One model's samples as p50/p90 figures per kind of step."""
    found = {}
    for name, kinds in (("caption_to_first_overlay", ("caption",)), ("stepping", ("click", "arrow")), ("restyle", ("restyle",))):
        found[name] = _stats([s for s in samples if s["kind"] in kinds])
        found[name + "_exact"] = _stats([s for s in samples if s["kind"] in kinds], "exact_ms")
    found["hover"] = _stats([s for s in samples if s["kind"] == "hover"])
    found["hover_tinted"] = _stats([s for s in samples if s["kind"] == "hover"], "tinted_ms")
    found["stepping_by_input"] = {k: _stats([s for s in samples if s["kind"] == k]) for k in ("click", "arrow")}
    captions = [s for s in samples if s["kind"] == "caption" and s.get("server_ms") is not None]
    found["caption_server"] = _stats([{"outcome": "shown", "ms": s["server_ms"]} for s in captions])
    found["caption_trace_received"] = _stats([{"outcome": "shown", "ms": s["received_ms"]} for s in captions])
    if ask:
        found["ask_to_map"] = _stats([s for s in samples if s["kind"] == "ask"])
    if explain:
        found["explain_to_first_view"] = _stats([s for s in samples if s["kind"] == "explain"])
        found["explain_stepping"] = _stats([s for s in samples if s["kind"] == "explain-click"])
    if ticks:
        play = [s for s in samples if s["kind"] == "play"]
        intervals = [{"outcome": "shown", "ms": s["interval_ms"]} for s in play if "interval_ms" in s]
        found["play_interval"] = _stats(intervals)
        found["play_slider_to_overlay"] = _stats(play)
    return found


def _bench_model(page: Page, model: str, photos, warm_photo, copies, clicks, arrows, ticks, caption_timeout_s,
                 warmup_timeout_s, log, explain: str | None = None, ask: bool = False) -> dict:
    out = {"warmup_ms": None, "samples": [], "errors": []}
    try:
        page.choose_model(model)
        page.upload(copies(warm_photo))
        warm = page.caption(warmup_timeout_s * 1000)
    except Exception as err:  # noqa: BLE001 - reported; the other models still run
        warm = {"outcome": "error", "error": f"{type(err).__name__}: {err}"}
    out["warmup_ms"] = warm.get("ms")
    log(f"{model}: warm-up caption {warm.get('ms')} ms ({warm['outcome']})")
    if warm["outcome"] != "shown":
        out["errors"].append(f"warm-up caption: {warm}")
        photos = []
    for photo in photos:
        name = os.path.basename(photo)

        def add(kind, r, **extra):
            out["samples"].append({"photo": name, "kind": kind, **extra,
                                   **{k: v for k, v in r.items() if k not in ("src", "at", "value")}})
            if r["outcome"] == "error":
                out["errors"].append(f"{name} {kind}: {r['error']}")
        try:
            page.upload(copies(photo))
            page.settle(300)
            r = page.caption(caption_timeout_s * 1000)
            add("caption", r)
            if r["outcome"] in ("shown", "unchanged"):     # else the page may still show the last caption
                _step_through(page, add, clicks, arrows, ticks)
                if explain:   # before asking: the caption's words are the ones to step through (an answer is one)
                    page.settle(300)
                    add("explain", page.explain(explain, caption_timeout_s * 1000), method=explain)
                    at = page.step_value()   # clicking the word shown changes nothing: the others
                    for index in [i for i in word_targets(page.words(), clicks + 1) if i + 1 != at][:clicks]:
                        add("explain-click", page.click_word(index), word=index + 1)
                if ask:
                    page.settle(300)
                    question = ASK_QUESTIONS[len(out["samples"]) % len(ASK_QUESTIONS)]
                    add("ask", page.ask(question, caption_timeout_s * 1000), question=question)
        except Exception as err:  # noqa: BLE001 - one photo's failure is reported, the run goes on
            out["errors"].append(f"{name}: {type(err).__name__}: {err}")
        log(f"{model}: {name} " + " ".join(f"{s['kind']}={s.get('ms', s['outcome'])}" for s in out["samples"]
                                           if s["photo"] == name))
    out.update(_summary(out["samples"], explain, ask, ticks))
    return out


def two_browsers(browser, url: str, model: str, photos, copies, viewport, timeout_s: float, caption_timeout_s: float,
                 log) -> dict:
    """Two people at once: browser A keeps clicking between two words of its caption while browser B
    captions each photo; A's steps are timed as usual, beside A's steps with B idle. (Both pages share
    this machine's cores with the server, as two people on one laptop would not: the worst case.)"""
    a, b = (Page(browser.new_context(viewport={"width": viewport[0], "height": viewport[1]}).new_page(), url, timeout_s)
            for _ in range(2))
    for page in (a, b):
        page.choose_model(model)
    a.upload(copies(photos[0]))
    a.caption(caption_timeout_s * 1000)
    a.settle()
    n = a.words()
    words, clicked = ([1, n - 1] if n > 2 else [0, 1]), []

    def steps(k):   # each click moves: the two words in turn
        for _ in range(k):
            clicked.append(a.click_word(words[len(clicked) % 2]))
        return clicked[-k:]
    alone, during = steps(10), []
    for photo in photos * 2:   # fresh copies: each caption runs the encoder
        b.upload(copies(photo))
        b.settle(300)
        b.page.evaluate("t => window.__bench.arm(t)", "input")
        b.page.locator("#run").click()
        deadline = time.perf_counter() + caption_timeout_s
        while b.page.evaluate("g => window.__bench.check(g)", b.grace_ms) is None and time.perf_counter() < deadline:
            during += steps(1)
    out = {"model": model, "a_alone": _stats(alone), "a_while_b_captions": _stats(during),
           "a_alone_exact": _stats(alone, "exact_ms"), "a_while_b_captions_exact": _stats(during, "exact_ms")}
    log(f"two browsers ({model}): A's steps alone {out['a_alone']}, while B captions {out['a_while_b_captions']}")
    return out


def _step_through(page: Page, add, clicks: int, arrows: int, ticks: int) -> None:
    """Click words (last to second), then ArrowRight, then the three upsamplings, hover the photo, then a
    few play ticks."""
    n = page.words()
    for index in word_targets(n, clicks):
        add("click", page.click_word(index), word=index + 1)
    for _ in range(arrows):
        at = page.step_value()
        if at >= n:
            break
        add("arrow", page.arrow_right(), word=at + 1)
    for upsampling in ("bilinear", "blocky", "smooth"):   # back to the default last
        add("restyle", page.restyle(upsampling))
    for r in page.hover(6):
        add("hover", r)
    if ticks and n >= 2:
        for r in page.play_ticks(ticks, n):
            add("play", r)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m viewer.measure.loadtest --browser",
        description="Time the viewer as a person feels it, in headless chromium: caption to first overlay, and "
                    "each word step (click, ArrowRight, play) to its overlay loaded. JSON to stdout, a table to "
                    "stderr.")
    parser.add_argument("--url", help="a running app on this machine (default: start one on a free port)")
    parser.add_argument("--models", nargs="+", help="default: every model the Model dropdown offers")
    parser.add_argument("--photos", type=int, default=3, help="how many photos from assets/ (default 3)")
    parser.add_argument("--photo-files", nargs="+", metavar="FILE", help="these photos instead of assets/")
    parser.add_argument("--clicks", type=int, default=3, help="words clicked per caption (default 3)")
    parser.add_argument("--arrows", type=int, default=3, help="ArrowRight presses per caption (default 3)")
    parser.add_argument("--ticks", type=int, default=3, help="play ticks per caption (default 3; 0: no play)")
    parser.add_argument("--timeout", type=float, default=10, help="seconds per step before it counts as a timeout")
    parser.add_argument("--caption-timeout", type=float, default=60, help="seconds per caption (default 60)")
    parser.add_argument("--reuse-photos", action="store_true",
                        help="upload the photo files as they are (the server's feature cache may then be warm)")
    parser.add_argument("--viewport", default="1280x800", help="browser window, WIDTHxHEIGHT")
    parser.add_argument("--explain", metavar="METHOD", help="also time Explain with METHOD (occlusion, gradcam, "
                        "relevancy) on each caption, and stepping through its views")
    parser.add_argument("--ask", action="store_true", help="also time a question per photo: Ask to the answer's map")
    parser.add_argument("--pair", action="store_true", help="also time two browsers at once: one steps through its "
                        "words while the other captions (the first model)")
    parser.add_argument("--click-at-once", action="store_true", help="click Caption the moment the upload shows, "
                        "not once the photo is prepared (opened and encoded on the server, in the page)")
    parser.add_argument("--checkpoints", help="when starting the app: its --checkpoints folder")
    parser.add_argument("--device", help="when starting the app: cpu or cuda")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.viewport.lower().split("x"))

    def log(msg):
        print(msg, file=sys.stderr, flush=True)
    app = None
    try:
        if args.url:
            check_loopback(args.url)
            url = args.url
        else:
            log("starting the app on a free 127.0.0.1 port ...")
            app = AppProcess(args.checkpoints, args.device)
            url = app.url
        result = run_browser_bench(url, args.models, args.photo_files, args.photos, args.clicks, args.arrows,
                                   args.ticks, args.timeout, args.caption_timeout, fresh=not args.reuse_photos,
                                   viewport=(width, height), log=log, explain=args.explain, pair=args.pair,
                                   pause=not args.click_at_once, ask=args.ask)
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        if app is not None:
            app.close()
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    log(browser_table(result))
    measured = all(r["caption_to_first_overlay"]["n"] and r["stepping"]["n"] for r in result["models"].values())
    return 1 if result["errors"] or not measured else 0


if __name__ == "__main__":
    raise SystemExit(main())
