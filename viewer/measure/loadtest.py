"""Load generator for a running viewer: N concurrent gradio_client sessions, each uploading its own
photo and captioning it (every word's view and panel come in that reply: stepping makes no request).
Bounded in requests and time; loopback addresses only.

    python -m viewer.measure.loadtest [http://127.0.0.1:7860/] --clients 20 [--photos DIR] [--out FILE]

(without a URL it starts the app on a free loopback port, and stops it after)

With --browser it times what a person feels instead, in headless chromium (viewer/browserbench.py):

    python -m viewer.measure.loadtest --browser [--url URL] [--models M ...] [--photos N] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

import numpy as np

from ..paths import ASSETS


def one_session(url: str, photo: str, model: str) -> dict:
    """Caption one photo; returns the latency and what came back: the size of the photo the view is
    drawn on, and the step each word's panel names (the page steps through these itself)."""
    import re

    from gradio_client import Client, handle_file

    from ..app.session import Style
    from ..app.ui import GUIDES_BY_DEFAULT
    client = Client(url, verbose=False)
    start = time.perf_counter()
    out = client.predict(handle_file(photo), model, "Greedy", 3, 1.0, 0, 20, "", GUIDES_BY_DEFAULT, *Style().inputs(),
                         api_name="/caption_photo")
    latencies = [time.perf_counter() - start]
    view = out[3]   # beams, status, word slider, the page's view of the trace, the caption
    steps = [int(re.search(r"at step (\d+)", panel).group(1)) for panel in view["panels"]]
    client.close()
    return {"photo": photo, "latencies": latencies, "view_sizes": [(view["width"], view["height"])], "steps": steps}


def run_load(url: str, photos: list[str], model: str, clients: int = 20, timeout_s: float = 600) -> dict:
    host = urlparse(url).hostname
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError("the load test only targets this machine (127.0.0.1)")
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        futures = [pool.submit(one_session, url, photos[i % len(photos)], model) for i in range(clients)]
        results, errors = [], []
        for f in futures:
            try:
                results.append(f.result(timeout=max(1.0, timeout_s - (time.perf_counter() - start))))
            except Exception as err:  # noqa: BLE001 - every failure is counted, not raised
                errors.append(f"{type(err).__name__}: {err}")
    lat = np.array([x for r in results for x in r["latencies"]]) * 1000
    return {"clients": clients, "model": model, "photos": len(photos), "errors": errors, "requests": int(lat.size),
            "median_ms": round(float(np.median(lat)), 1) if lat.size else None,
            "p95_ms": round(float(np.percentile(lat, 95)), 1) if lat.size else None,
            "wall_s": round(time.perf_counter() - start, 1), "sessions": results}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--browser" in argv:
        from .browserbench import main as browser_main
        return browser_main([a for a in argv if a != "--browser"])
    parser = argparse.ArgumentParser(prog="python -m viewer.measure.loadtest",
                                     epilog="python -m viewer.measure.loadtest --browser --help: the real-browser timings")
    parser.add_argument("url", nargs="?", help="a running app on this machine (default: start one on a free port)")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--model", default="sat-soft")
    parser.add_argument("--photos", default=ASSETS)
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)
    photos = sorted(os.path.join(args.photos, n) for n in os.listdir(args.photos) if n.endswith(".jpg"))
    app = None
    try:
        if args.url is None:
            from .browserbench import AppProcess
            app = AppProcess()
        result = run_load(args.url or app.url, photos, args.model, args.clients)
    except (ValueError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        if app is not None:
            app.close()
    result.pop("sessions")
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 1 if result["errors"] else 0

if __name__ == "__main__":
    raise SystemExit(main())
