"""The viewer app (Gradio). `python launch.py` starts it on 127.0.0.1, offline."""
from __future__ import annotations

import argparse
import logging
import os
import socket
import threading
import sys

from ..paths import FLICKR8K
from .keys import MODEL_KEYS

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def create_app(device: str | None = None, checkpoint_dir: str | None = None, data: str | None = None,
               features: str | None = None, lecture: bool = False):
    """Build the Blocks app and its Studio (models load lazily on first use).

    `features`: precomputed features for imported models, found by the uploaded file's name;
    `lecture`: start in lecture mode (big type, the view filling the screen, keys for a projector)."""
    from ..data.datasets import load_dataset
    from ..engine.device import share_cpu_with_browser
    from ..engine.pipeline import Captioner
    from .session import Studio
    from .ui import build

    share_cpu_with_browser()
    studio = Studio(Captioner(device, checkpoint_dir=checkpoint_dir, feature_files=features),
                    dataset=load_dataset(data) if data else None)
    return build(studio, lecture=lecture), studio


class ImmutableViews:
    """ASGI middleware: rendered views are named by their content (session.view_path), so the
    browser may keep them for good. Without this, every view the page had preloaded was asked
    for again (a revalidation round trip to a busy server) each time stepping showed it."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        from .session import is_view_url
        if scope["type"] != "http" or not is_view_url(scope.get("path", "")):
            return await self.app(scope, receive, send)

        async def send_cached(message):
            if message["type"] == "http.response.start" and message["status"] == 200:
                message["headers"] = [*message.get("headers", []),
                                      (b"cache-control", b"private, max-age=86400, immutable")]
            await send(message)
        return await self.app(scope, receive, send_cached)


HERE = os.path.dirname(os.path.abspath(__file__))


def page_head() -> str:
    """The page's own script and lecture styles (viewer.js, lecture.css beside this file), for the
    page's head: lecture mode styles <body>, which Gradio's scoped `css` cannot reach."""
    with open(os.path.join(HERE, "lecture.css"), encoding="utf-8") as css, \
            open(os.path.join(HERE, "viewer.js"), encoding="utf-8") as js:
        return f"<style>\n{css.read()}</style>\n<script>\n{js.read()}</script>\n"


def launch(demo, host: str = "127.0.0.1", port: int | None = None, block: bool = True, share: bool = False):
    """Serve the app. No run history: Gradio would otherwise keep every event's inputs and outputs
    (photos, traces) in the browser's localStorage, re-serialising the whole list on each event
    (about 60 ms of the page's thread per caption, measured in chromium)."""
    from starlette.middleware import Middleware

    from .ui import THEME
    return demo.queue(default_concurrency_limit=8).launch(
        server_name=host, server_port=port or free_port(host), share=share, show_error=True, theme=THEME,
        css_paths=[os.path.join(HERE, "app.css")], head=page_head(), ssr_mode=False, prevent_thread_lock=not block, max_file_size="60mb", quiet=not block,
        run_history=False,
        app_kwargs={"middleware": [Middleware(ImmutableViews)]})


def parser(prog: str = "launch.py") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Start the attention viewer.")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default: this machine only)")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--checkpoints", help="folder of models (default: checkpoints/)")
    parser.add_argument("--data", default=FLICKR8K if os.path.isdir(FLICKR8K) else None,
                        help="a dataset (Flickr8k folder, Karpathy or COCO JSON): references and scores for its "
                             "photos, and the photos the grey 'guessed' words are measured against (default: "
                             "../shared/data/flickr8k where it exists; 'none' for no dataset)")
    parser.add_argument("--features", help="precomputed features for imported Up-Down models (.tsv, .hdf5 or a "
                                           "folder of .npz), looked up by the uploaded photo's file name")
    parser.add_argument("--share", action="store_true", help="ask Gradio for a public link (needs internet)")
    parser.add_argument("--lecture", action="store_true", help="start in lecture mode: big caption, the view "
                        f"filling the screen, dark; keys: space play/pause, arrows word, {MODEL_KEYS[0]}-{MODEL_KEYS[-1]} model, "
                        "P the photo picker, F full screen, "
                        "Esc back (the Lecture mode toggle switches it at any time)")
    return parser


def main(argv=None, prog: str = "launch.py") -> int:
    args = parser(prog).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)   # Gradio's own start-up requests
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: binding to {args.host}: anyone who can reach this machine can use the viewer",
              file=sys.stderr)
    try:
        data = None if args.data in (None, "none") else args.data
        demo, studio = create_app(args.device, args.checkpoints, data, args.features, lecture=args.lecture)
    except (ValueError, OSError) as err:   # a bad --data or --features: one line, no traceback
        print(f"error: {err}", file=sys.stderr)
        return 2
    studio.captioner.vision   # load the encoder and detector before the page is served
    threading.Thread(target=studio.warm_up, name="warm-up", daemon=True).start()   # every model, behind the page
    print(f"attention viewer on http://{args.host}:{args.port}  (Ctrl+C stops it)")
    launch(demo, args.host, args.port, block=True, share=args.share)
    return 0
