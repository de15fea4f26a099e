"""The real-browser benchmark (`python -m viewer.measure.loadtest --browser`) measures and reports; no speed is asserted."""
import os
import shutil

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def test_browser_flag_dispatches_and_stays_on_loopback(capsys):
    from viewer.measure.loadtest import main
    assert main(["--browser", "--url", "http://example.com:7860/"]) == 2
    assert "only targets this machine" in capsys.readouterr().err


def test_browser_bench_records_caption_and_stepping(server):
    pytest.importorskip("playwright", reason="the browser benchmark needs playwright (pip install playwright)")
    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian chromium is not installed (apt-get install chromium; never `playwright install`)")
    from viewer.analysis.speed import browser_table as table
    from viewer.measure.browserbench import run_browser_bench
    url, _ = server
    result = run_browser_bench(url, models=["sat-soft"], n_photos=1, clicks=1, arrows=1, ticks=1, timeout_s=20,
                               caption_timeout_s=120, explain="gradcam", pair=True, ask=True)
    assert result["errors"] == []
    assert set(result["models"]) == {"sat-soft"} and "excluded" in result["note"]
    r = result["models"]["sat-soft"]
    assert r["warmup_ms"] > 0
    for key in ("caption_to_first_overlay", "stepping", "restyle", "hover", "hover_tinted", "explain_to_first_view",
                "explain_stepping", "ask_to_map"):
        stats = r[key]
        assert set(stats) >= {"n", "p50_ms", "p90_ms", "unchanged", "timeout"}
        assert stats["n"] >= 1 and 0 < stats["p50_ms"] <= stats["p90_ms"]
    shown = [s for s in r["samples"] if s["outcome"] == "shown"]
    assert {s["kind"] for s in shown} >= {"caption", "click", "restyle", "hover", "explain", "explain-click", "ask"}
    assert r["hover"]["unchanged"] == 0   # every place hovered on the photo tinted the words
    assert all(s["ms"] > 0 and s["photo"] == "astronaut.jpg" for s in shown)
    text = table(result)
    assert "| sat-soft |" in text and "Explain with gradcam" in text and "Ask -> answer's map" in text
    assert "Targets met: caption p90" in text
    pair = result["two_browsers"]   # one browser steps while the other captions
    assert pair["model"] == "sat-soft" and pair["a_alone"]["n"] == 10 and "Two browsers (sat-soft)" in text
    assert pair["a_alone"]["timeout"] == 0 and pair["a_while_b_captions"]["timeout"] == 0
