"""The app's panels as HTML and SVG: a word's facts and next words, raw numbers, Diagnose (grounding
beside its chance levels, the deletion curve, hiding), steering, scores, Compare's line, the lecture
line. Pure functions of an Exploration (and the Studio, for what must be computed); no Gradio.
"""
from __future__ import annotations

import base64
import html
import os

import numpy as np

from ..analysis.diagnose import occlude, sanity
from ..analysis.explain import METHOD_LABELS
from ..analysis.faithfulness import DRAWS, LEVELS, trace_faithfulness
from ..analysis.grounding import grid_units, ground_words, grounding, grounding_summary, trace_units
from ..analysis.hallucination import why_unsupported
from ..analysis.steer import SteerResult, steer, steer_map
from ..engine.images import AttendsTo
from ..engine.render import render_heatmap
from ..engine.trace import AttentionTrace
from .keys import MODEL_KEYS
from ..analysis.language_prior import verdict
from .session import Exploration, Studio, Style, jpeg, thumbnail, unit_at


TRIAGE_COLUMNS = ["rank", "image", "caption", "CIDEr", "grounding", "confidence", "seen", "said_not_seen"]


def triage_note(has_runs: bool, model: str | None) -> str:
    """Triage's line above the table: how to make a run (the command, from the project folder) and, with
    none yet, that the table stays empty until one is made."""
    command = f"python -m viewer triage --model {model or 'MODEL'} --data ../shared/data/flickr8k"
    lead = ("Click a row to open that photo in Explore (an answer's row: with its question, ready to Ask)."
            if has_runs else "No triage runs yet: the table fills once you make one.")
    return f"{lead} A run ranks photos worst first: run `{command}` in the project folder, then *Refresh the list*."


def triage_table(rows: list[dict]) -> list[list]:
    """The triage table's cells (TRIAGE_COLUMNS): photos by file name, missing values blank."""
    return [[os.path.basename(r.get(c, "")) if c == "image" else r.get(c, "") for c in TRIAGE_COLUMNS] for r in rows]


def score_html(caption: str, scores: dict, corpus: bool) -> str:
    """The caption's scores against the typed references, escaped (a forced caption is typed text)."""
    note = "" if corpus else " (CIDEr needs a corpus: start the app with --data DIR)"
    return (f'<div class="step-facts">"{html.escape(caption)}": '
            + " &middot; ".join(f"{html.escape(k)} {v:.1f}" for k, v in scores.items()) + html.escape(note) + "</div>")


def compare_line(trace: AttentionTrace, step: int) -> str:
    """Compare's line for one model: its name, the caption's total log-probability, the words with
    word `step` (0-based) in bold; <end> is left out (the trace keeps its step)."""
    chosen = trace.word_at(step)
    words = [f"**[{w.text}]**" if w == chosen else w.text for w in trace.word_spans if w.text != "<end>"]
    asked = f"{trace.question} → " if trace.question else ""   # an answer: its question first
    return f"**{trace.model}** (log p {sum(s.logprob for s in trace.steps):.2f}): {asked}" + " ".join(words)


def step_label(trace: AttentionTrace, t: int) -> str:
    """Step t as a person reads it: its word, and for a word of several tokens which piece this is."""
    w = trace.word_at(t)
    if w.first == w.last:
        return w.text
    piece = (trace.pieces[t] if trace.pieces is not None else trace.steps[t].word).strip()
    return f'{w.text} (token {t - w.first + 1} of {w.last - w.first + 1}: "{piece}")'


def step_panel(ex: Exploration, t: int | None = None) -> str:
    """HTML: step t's word (the selected one by default), its probability, beta or p(copy), entropy, and the
    top-k next words as bars. The page holds every step's (`Handlers._view`) and shows the word's."""
    t = ex.step if t is None else t
    s = ex.trace.steps[t]
    facts = [f"<b>{html.escape(step_label(ex.trace, t))}</b> at step {t + 1} of {ex.n_steps}",
             f"p = {np.exp(s.logprob):.1%}", f"attention entropy {s.entropy:.2f} nats"]
    if s.beta is not None:
        facts.append(f"beta (gate) {s.beta:.2f}")
    if s.copy is not None:   # updown-copy: how much of the word was copied from the labels of the regions looked at
        facts.append(f"p(copy) {s.copy:.2f}")
    if s.sample is not None:
        facts.append("sampled cell (row {}, col {})".format(*divmod(s.sample, ex.trace.grid_side)))
    if s.outside is not None:   # hf: ViTs: the map is the patches' share, renormalised
        facts.append(f"class token {s.outside:.0%} of the last layer's attention (not drawn)")
    if ex.method != "attention":
        facts.append(f"the view shows <b>{html.escape(METHOD_LABELS[ex.method])}</b>, not attention")
    return (f'<div class="step-facts">{" &middot; ".join(facts)}</div>'
            + _bars("What the model could have said here", s.alternatives))


# --- diagnosis (grounding, sanity, occlusion) ------------------------------------------------------

def diagnosis(studio: Studio, ex: Exploration) -> str:
    """HTML: attention sanity of the caption and the grounding of each object word."""
    regions = studio.captioner.features([ex.photo], with_regions=True)[0].regions
    report = sanity(ex.trace)
    items = grounding(ex.trace, regions)
    flags = [f"mean map-to-map similarity {report['mean_pairwise_similarity']:.2f}"
             + (" &mdash; <b>attention barely moves from word to word</b>" if report["static"] else ""),
             f"largest coverage {report['coverage_max']:.2f}",
             f"{report['share_never_attended']:.0%} of {ex.trace.attends_to.unit}s "
             "never attended"]
    if "hard_left_argmax" in report:
        flags.append(f"the hard sample left alpha's argmax at {report['hard_left_argmax']:.0%} of the words")
    guessed, units = studio.guessed(ex), trace_units(ex.trace)

    def why(g) -> str:   # an object word whose class the detector did not find: what went wrong
        return html.escape(why_unsupported(g.word, ex.trace.steps[g.step].attention, units, regions,
                                           None if guessed is None else bool(guessed[g.step])))
    rows = "".join(
        f"<tr><td>{html.escape(g.word)}</td><td>{html.escape(g.coco_class)}</td><td>"
        + (f"not detected: {why(g)}" if g.inside is None else f"{g.inside:.0%} inside its boxes")
        + "</td></tr>" for g in items)
    summary = grounding_summary(items)
    if summary["detected"]:
        flags.append(f"object words put {summary['mass_in_box']:.0%} of their attention in their objects' boxes "
                     f"(uniform attention: {summary['mass_uniform_baseline']:.0%}); the peak lies in a box for "
                     f"{summary['pointing']:.0%} of them (always pointing at the centre: "
                     f"{summary['pointing_centre_baseline']:.0%})")
    table = (f'<table class="regions"><tr><th>word</th><th>COCO class</th><th>attention on it</th></tr>{rows}</table>'
             if items else "<p>No word of this caption names a COCO object class.</p>")
    return f'<div class="step-facts">{" &middot; ".join(flags)}</div>{table}{deletion_curve(studio, ex)}'


# Hiding is per unit: a region model's 5 context regions (the whole image, its quarters) are pooled
# from the photo's grid, so they still hold a hidden detection's pixels (measured in the model card).
CONTEXT_NOTE = (" Hiding is per region: unless hidden too, the whole-image and quarter regions still contain "
                "a hidden detection's pixels.")


def deletion_curve(studio: Studio, ex: Exploration) -> str:
    """HTML + SVG: how the selected word's log-probability falls as more of what the model could
    look at is hidden, most attended first vs at random (faithfulness.py)."""
    w = trace_faithfulness(studio.captioner, ex.photo, ex.model, ex.trace, [ex.step])[0]
    at_step = trace_faithfulness(studio.captioner, ex.photo, ex.model, ex.trace, [ex.step], levels=(),
                                 step_only=True)[0]
    levels = [round(100 * f) for f in LEVELS]
    top = max([1.0, *w.curve_top, *w.curve_random])
    point = (lambda i, d: f"{20 + 260 * levels[i] / 100:.1f},{10 + 100 * (1 - max(d, 0) / top):.1f}")  # noqa: E731
    line = (lambda ds, colour: f'<polyline fill="none" stroke="{colour}" stroke-width="2.5" '  # noqa: E731
            f'points="{" ".join(point(i, d) for i, d in enumerate(ds))}"/>')
    ticks = "".join(f'<text x="{20 + 2.6 * lv:.0f}" y="126" font-size="10" text-anchor="middle">{lv}%</text>'
                    for lv in levels)
    word = html.escape(w.word)
    return (f'<div class="step-facts">Does <b>{word}</b> depend on where the model looked? Hiding the '
            f"{w.hidden} {ex.trace.attends_to.unit}(s) that hold half its attention "
            f"lowers log p({word}) by {w.drop_top:.2f} nats; as many random ones by {w.drop_random:.2f} "
            f"(hidden for {w.hidden_for}, so the drop also holds what the earlier words lost). Hidden at "
            f"{at_step.hidden_for}: {at_step.drop_top:.2f} nats; random: {at_step.drop_random:.2f}."
            f"{CONTEXT_NOTE if ex.trace.attends_to == AttendsTo.REGIONS else ''}</div>"
            f'<svg id="deletion-curve" width="300" height="150" viewBox="0 0 300 150" role="img" '
            f'aria-label="deletion curve">'
            f'<line x1="20" y1="110" x2="280" y2="110" stroke="#999"/><line x1="20" y1="10" x2="20" y2="110" stroke="#999"/>'
            f'<text x="22" y="9" font-size="10">{top:.1f} nats</text>{ticks}'
            f'{line(w.curve_top, "#f59e0b")}{line(w.curve_random, "#64748b")}'
            f'<text x="150" y="143" font-size="10" text-anchor="middle">share of the {ex.trace.attends_to.unit}s hidden</text>'
            f'</svg><div style="font-size:.9rem"><span style="color:#f59e0b">&#9632;</span> most attended first '
            f'&nbsp; <span style="color:#64748b">&#9632;</span> random (mean of {DRAWS} draws): the drop in '
            f"log p({word}), teacher-forced on this caption</div>")


def occlusion(studio: Studio, ex: Exploration, hidden: list[int] | None = None) -> str:
    """HTML: hide what the current word looked at (or the given cells/regions) and re-decode."""
    result = occlude(studio.captioner, ex.photo, ex.model, ex.trace, ex.step, hidden, ex.settings)
    what = ex.trace.attends_to.unit
    names = ["(row {}, col {})".format(*divmod(h, ex.trace.grid_side)) if ex.trace.attends_to == AttendsTo.GRID else ex.trace.region_labels[h]
             for h in result.hidden]
    return (f'<div class="step-facts">Hid {what} {html.escape(", ".join(names))}: p(<b>{html.escape(result.word)}</b>) '
            f"went from {result.prob_before:.1%} to {result.prob_after:.1%}.</div>"
            f"<div>New caption: <b>{html.escape(result.new_caption)}</b></div>"
            + (f"<div>{CONTEXT_NOTE}</div>" if ex.trace.attends_to == AttendsTo.REGIONS else ""))


# --- steering (the complement of occlusion) ---------------------------------------------------------

def steering(studio: Studio, ex: Exploration, x: float, y: float) -> tuple[str, SteerResult]:
    """HTML: make the current word attend where the photo was clicked (display pixel x, y): the
    model's own next words beside those under the steered map, and the caption it goes on to write.
    Also the viewer.analysis.steer.SteerResult, whose trace (step `ex.step` steered) draws the steered map."""
    unit = unit_at(ex, x, y)
    result = steer(studio.captioner, ex.photo, ex.model, ex.trace, ex.step, steer_map(ex.trace, unit), ex.settings)
    where = ("(row {}, col {})".format(*divmod(unit, ex.trace.grid_side)) if ex.trace.attends_to == AttendsTo.GRID
             else f"region {html.escape(ex.trace.region_labels[unit])}")
    word = html.escape(result.word)
    page = (f'<div class="step-facts">Made <b>{word}</b> (word {ex.step + 1}) look at {where}: p(<b>{word}</b>) '
            f"went from {result.prob_before:.1%} to {result.prob_after:.1%}.</div>"
            f'<div style="display:flex;gap:1.5em">{_bars("Where the model looked", result.own)}'
            f'{_bars("Where you steered it", result.steered)}</div>'
            f"<div>Caption from there: <b>{html.escape(result.caption)}</b></div>")
    return page, result


def _bars(title: str, alternatives: list[tuple[str, float]]) -> str:
    """HTML: next words as probability bars under a title (the look of `step_panel`'s top-k)."""
    rows = "".join(
        f'<div class="bar-row"><span class="bar-word">{html.escape(w)}</span>'
        f'<span class="bar" style="width:{max(1.0, p * 100):.1f}%"></span><span class="bar-p">{p:.1%}</span></div>'
        for w, p in alternatives)
    return f'<div class="topk" style="flex:1"><div class="topk-title">{html.escape(title)}</div>{rows}</div>'


def trust_card(studio: Studio, ex: Exploration, style: Style, report=None) -> str:
    """HTML: "which map to trust" for the selected word, by the reports' rule: each method's map, how
    much hiding the photo in its order costs the word (deletion AUC, most relevant first) under both
    imputers (the blur, which occlusion and superpixels build their maps with, and ROAD's noisy linear
    imputation, which no method optimises); a map is named the one to trust only when both agree.
    Whether its peak lies on the detector's boxes of the object the word names, and how much the word
    depends on the photo at all (visual dependence, blurred away and removed: a figure; "guessed" only
    when the model would have said it of most reference photos, `Studio.guessed`). A plain verdict comes
    first; `report` hears of each method's map as it is made (`Studio.trust`)."""
    found, curves = studio.trust(ex, report)
    t, word = ex.step, ex.trace.word_at(ex.step).text
    regions = studio.captioner.features([ex.photo], with_regions=True)[0].regions
    small = thumbnail(ex.display, 200)
    tiles = []
    for m, e in found.items():
        grid = e.maps[m][t]
        hit = ground_words([word], grid.reshape(1, -1), grid_units(grid.size), regions,
                           size=(ex.photo.width, ex.photo.height))
        point = ("no object named" if not hit else "object not detected" if hit[0].hit is None
                 else "peak on the object" if hit[0].hit else "peak off the object")
        img = base64.b64encode(jpeg(render_heatmap(small, grid, style.upsampling, style.colormap, style.opacity,
                                                   style.scale, bar=False), 85)).decode()
        aucs = " &middot; ".join(f'<span title="{IMPUTER_TIPS[imp]}">{IMPUTER_NAMES[imp]}</span> '
                                 f'<b class="auc" data-imputer="{imp}">{c.auc(m)[t]:.2f}</b>'
                                 for imp, c in curves.items())
        tiles.append(f'<div class="trust-tile" data-method="{m}"><img src="data:image/jpeg;base64,{img}" '
                     f'alt="{html.escape(m)}"/><div><b>{html.escape(METHOD_LABELS[m])}</b></div>'
                     f'<div>deletion AUC {aucs} nats</div><div>{point}</div></div>')
    best = {imp: max(found, key=lambda m, c=c: c.auc(m)[t]) for imp, c in curves.items()}
    w = html.escape(word)
    if len(set(best.values())) == 1:
        plain = (f"Trust <b>{html.escape(METHOD_LABELS[next(iter(best.values()))])}</b> for <b>{w}</b>: hiding the photo "
                 f"where its map points lowers the word's probability most, whichever way the photo is hidden.")
        ranked = (f"<b>{html.escape(METHOD_LABELS[next(iter(best.values()))])}</b>'s order costs "
                  f"log p({w}) most under both imputers: its map holds most of what the word used")
    else:
        plain = (f"No one map to trust for <b>{w}</b>: the two ways of hiding the photo disagree on which map holds "
                 f"what the word used, so read them side by side.")
        ranked = ("The imputers disagree on which map holds what the word used (" + ", ".join(
            f"{IMPUTER_NAMES[imp]}: {html.escape(METHOD_LABELS[m])}" for imp, m in best.items()) + "): trust neither alone")
    dep = {imp: float(c.visual_dependence[t]) for imp, c in curves.items()}
    needs = ("The word needs the photo: without it the model is much less sure of it." if min(dep.values()) >= 1 else
             "The word hardly needs the photo: without it the model says it about as readily."
             if max(dep.values()) < 0.3 else "The word needs the photo a little.")
    guessed = studio.guessed(ex)
    said = None if guessed is None else verdict(word, bool(guessed[ex.trace.word_at(t).first]))
    label = (" (guessed or not: not measured without --data's photos)" if guessed is None
             else f" ({said}: the model would have said it of most photos)" if said else "")
    random = " / ".join(f"{c.auc()[t]:.2f}" for c in curves.values())
    return (f'<div class="trust-verdict">{plain} {needs}</div>'
            f'<div class="step-facts">Hiding the photo in each map\'s order '
            f"(most relevant first, up to 90%; blurred, or filled by ROAD's noisy linear imputation) lowers "
            f"log p({w}) on average by the deletion AUC; a random order: {random} nats. {ranked}. "
            f"Visual dependence: log p({w}) falls by {dep['blur']:.2f} nats when the whole photo is blurred away "
            f"and by {dep['road']:.2f} when it is removed{label}.</div>"
            f'<div class="trust">{"".join(tiles)}</div>')


IMPUTER_NAMES = {"blur": "blur", "road": "ROAD imputer"}
IMPUTER_TIPS = {"blur": "The hidden parts of the photo are blurred.",
                "road": "The hidden parts are filled in from their neighbours, with a little noise."}


# --- lecture mode --------------------------------------------------------------------------------

LECTURE_KEYS = (f"space play/pause · ← → word · {MODEL_KEYS[0]}-{MODEL_KEYS[-1]} model · P photo · F full screen · "
                "Esc back")


def lecture_line(model: str | None) -> str:
    """The line above the caption in lecture mode: which model speaks, and the keys."""
    name = html.escape(model or "no model")
    return f'<div class="lecture-line"><b>{name}</b><span>{html.escape(LECTURE_KEYS)}</span></div>'
