"""What every tab of the app shares: handlers that show a person one readable line and never a stack trace,
the decode and style controls read into their values, the view's title, and the event queues."""
from __future__ import annotations

import functools
import logging

import gradio as gr

from ..analysis.explain import METHOD_LABELS
from ..engine.checkpoints import CheckpointError
from ..engine.decoding import DecodeSettings
from ..engine.images import ImageError
from . import session as S

log = logging.getLogger("viewer.app")
# Events that only read (another head's maps, a beam, Compare's words) take no turn in the model's queue; the events
# that run a model share one limit, so a second user's light event never waits behind another's caption.
LIGHT = {"concurrency_limit": None}
MODEL = {"concurrency_id": "model", "concurrency_limit": 4}


def friendly(fn):
    """Show a readable message for anything a person can cause; never a stack trace."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except gr.Error:
            raise
        except (ImageError, CheckpointError, ValueError) as err:
            raise gr.Error(str(err), print_exception=False) from None
        except Exception as err:  # noqa: BLE001 - the UI must never show a traceback
            log.exception("unexpected error in %s", fn.__name__)
            raise gr.Error(f"Something went wrong ({type(err).__name__}); the server log has details.",
                           print_exception=False) from None
    return wrapper


def decode_settings(strategy, beam, temperature, seed, max_len) -> DecodeSettings:
    return DecodeSettings(strategy=S.STRATEGY_LABELS[strategy], beam_size=int(beam), temperature=float(temperature),
                          seed=int(seed or 0), max_len=int(max_len))


VIEW_LABELS = {"attention": "Where the model looked", "occlusion": "What the word needed (occlusion)",
               "gradcam": "What the word used (Grad-CAM)", "relevancy": "What the word used (relevancy)"}


def view_title(method: str) -> str:
    """What the view says it shows: attention, or the explanation method's map."""
    return VIEW_LABELS.get(method) or f"What the word used ({METHOD_LABELS[method]})"


def style_of(upsampling, colormap, opacity, scale, show_alpha, hard_samples, head) -> S.Style:
    return S.Style(upsampling, colormap, float(opacity), scale, bool(show_alpha), int(hard_samples), head)
