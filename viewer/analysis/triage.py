"""Batch triage: caption many photos, rank them by score, grounding or confidence, and write a
self-contained HTML report (thumbnails, captions, references, word strips), a CSV and the traces.
"""
from __future__ import annotations

import base64
import csv
import html
import io
import json
import os

import numpy as np
from PIL import Image

from ..engine.decoding import DecodeSettings
from .diagnose import sanity
from .explain import Pipeline, available_methods
from .grounding import grounding, grounding_summary, trace_caption, word_class
from .hallucination import unsupported_words
from .language_prior import caption_prior, said_not_seen
from .pixel_faithfulness import seen_dependence
from .evaluate import score_captions
from ..engine.images import ImageError, load_photo
from ..engine.render import render_strip
from ..engine.trace import AttentionTrace

SORT_KEYS = {"score": "CIDEr", "grounding": "grounding", "confidence": "confidence", "seen": "seen"}


def triage_records(captioner, model: str, items: list[dict], references: dict[str, list[str]] | None = None,
                   settings: DecodeSettings | None = None, prior_photos=None) -> list[dict]:
    """One record per photo of a chunk (`items`: index and id, the photo's path): caption, grounding,
    confidence, sanity flags, how much the object words were seen and which the model would have
    said of most `prior_photos` (language_prior.References; None: not measured), and what the report
    draws (its thumbnail, word strip and trace); a photo that does not open is an error record."""
    settings = settings or DecodeSettings()
    records, photos, indices = {}, [], []
    for item in items:
        try:
            photo = load_photo(item["id"])
        except ImageError as err:
            records[item["index"]] = {"index": item["index"], "id": item["id"], "error": str(err)}
            continue
        photo.name = item["id"]
        photos.append(photo)
        indices.append(item["index"])
    if photos:
        regions = [f.regions for f in captioner.features(photos, with_regions=True)]
        for index, photo, beams, reg in zip(indices, photos, captioner.caption(photos, model, settings), regions):
            trace = beams[0]
            found = grounding(trace, reg)
            looked, guessed = _looked_vs_used(captioner, photo, model, trace, prior_photos)
            unsupported = unsupported_words(trace_caption(trace, reg), references[photo.name] if references else [],
                                            guessed)
            records[index] = {
                "index": index, "id": photo.name, "caption": trace.caption,
                "confidence": round(float(np.mean([s.logprob for s in trace.steps])), 4),
                "grounding": grounding_summary(found)["mass_in_box"],
                "not_detected": " ".join(g.word for g in found if g.inside is None),
                "why_wrong": "; ".join(f"{w['word']}: {w['why']}" for w in unsupported),
                "static_attention": sanity(trace)["static"], **looked,
                "trace": trace.to_json()}
            # drawn from the trace as recorded (rounded), so equal records draw equal strips on any engine
            shown = AttentionTrace.from_json(records[index]["trace"])
            records[index].update(thumb=_data_uri(photo.rgb, 160),
                                  strip=_data_uri(render_strip(photo.rgb, shown, tile=80, per_row=8), 720))
            if references:
                records[index]["references"] = references[photo.name]
    return [records[item["index"]] for item in items]


def reduce_triage(records: list[dict]) -> list[dict]:
    """The report's rows from the sorted records (unranked): each photo's row, with its BLEU-4,
    METEOR and CIDEr when it has references (CIDEr's document frequencies from the whole set)."""
    rows = [{"image": r["id"], **{k: v for k, v in r.items() if k not in ("index", "id")}}
            for r in sorted(records, key=lambda r: r["index"])]
    scored = [r for r in rows if "references" in r]
    if scored:
        per_image: dict = {}
        score_captions({r["image"]: r["caption"] for r in scored}, {r["image"]: r["references"] for r in scored},
                       per_image=per_image)
        for r in scored:
            r.update({k: per_image[r["image"]][k] for k in ("BLEU-4", "METEOR", "CIDEr") if k in per_image[r["image"]]})
    return rows


def triage(captioner, model: str, paths: list[str], references: dict[str, list[str]] | None = None,
           settings: DecodeSettings | None = None, batch_size: int = 16, log=print, prior_photos=None) -> list[dict]:
    """In this process: one row per photo (`triage_records` a chunk at a time, then `reduce_triage`)."""
    records = []
    for i in range(0, len(paths), batch_size):
        chunk = [{"index": j, "id": p} for j, p in enumerate(paths[i:i + batch_size], i)]
        records += triage_records(captioner, model, chunk, references, settings, prior_photos)
        log(f"triage: {min(i + batch_size, len(paths))}/{len(paths)} photos")
    return reduce_triage(json.loads(json.dumps(records)))


def _looked_vs_used(captioner, photo, model: str, trace, prior_photos) -> tuple[dict, np.ndarray | None]:
    """`seen`: the lowest visual dependence of the caption's object words (nats, a figure: the larger
    drop of the photo blurred away and removed, `seen_dependence`); `said_not_seen`: the object
    words the model would have said of most reference photos (language_prior.py; not measured
    without `prior_photos`); and per step, that verdict. Nothing for models that do not read our encoder."""
    if available_methods(captioner, model) == ("attention",):
        return {}, None
    pipe = Pipeline(captioner, photo, model, trace.token_ids)
    dependence = seen_dependence(pipe)
    words = trace.step_words()   # each word once, at its first token
    objects = [d for w, d in zip(words, dependence) if word_class(w)]
    prior = None if prior_photos is None else caption_prior(pipe, prior_photos)
    return {"seen": round(float(min(objects)), 4) if objects else None,
            "said_not_seen": "not measured" if prior is None else " ".join(said_not_seen(words, prior))}, \
        None if prior is None else prior.said_of_most


def answer_rows(captioner, model: str, records: list[dict]) -> list[dict]:
    """The answers worth a look, from `evaluate --questions --dependence` records: the wrong ones,
    then those right but guessed (the same answer to the same question of most reference photos:
    `said_of_others`, language_prior.py), each least seen first; one row per question, drawn as a
    caption's row is (its caption: the question and the answer said). The records keep no maps, so
    the listed questions are asked again here (milliseconds each)."""
    from .language_prior import SHARE
    answered = [(r["id"], a) for r in records if "error" not in r for a in r["answers"]]
    guessed = lambda a: (a.get("said_of_others") or 0.0) >= SHARE   # noqa: E731 - None: not measured
    listed = [(p, a) for p, a in answered if a["said"] != a["answer"] or guessed(a)]
    listed.sort(key=lambda pa: (pa[1]["said"] == pa[1]["answer"], pa[1]["dependence"]))
    by_photo: dict[str, list[int]] = {}
    for i, (p, _) in enumerate(listed):
        by_photo.setdefault(p, []).append(i)
    traces, thumbs = {}, {}
    for path, rows in by_photo.items():
        photo = load_photo(path)
        thumbs[path] = (photo.rgb, _data_uri(photo.rgb, 160))
        for i, trace in zip(rows, captioner.ask([photo] * len(rows), model, [listed[i][1]["question"] for i in rows])):
            traces[i] = trace
    out = []
    for i, (path, a) in enumerate(listed):
        trace, (rgb, thumb) = traces[i], thumbs[path]
        out.append({"image": path, "question": a["question"], "caption": f"{a['question']} -> {a['said']} (the captions: {a['answer']})",
                    "answer": a["answer"], "right": a["said"] == a["answer"], "references": [f"answer from the captions: {a['answer']}"],
                    "confidence": round(trace.steps[0].logprob, 4), "seen": a["dependence"],
                    "said_not_seen": a["said"] if guessed(a) else "", "trace": trace.to_json(),
                    "thumb": thumb, "strip": _data_uri(render_strip(rgb, trace, tile=160, per_row=1), 320)})
    return out


def rank(rows: list[dict], by: str = "score") -> list[dict]:
    """Worst first: lowest CIDEr, least grounded, least confident, or an object least seen; failed photos last."""
    key = SORT_KEYS[by]
    return sorted(rows, key=lambda r: (r.get(key) is None, r.get(key) if r.get(key) is not None else 0.0))


def _data_uri(rgb: np.ndarray, max_side: int) -> str:
    img = Image.fromarray(rgb)
    img.thumbnail((max_side, max_side))
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=70)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()


def write_report(rows: list[dict], out_dir: str, model: str, sort: str, what: str = "photos") -> dict[str, str]:
    """report.html (self-contained), results.csv and traces.jsonl in out_dir (`what` the rows are)."""
    os.makedirs(out_dir, exist_ok=True)
    fields = ["rank", "model", "image", "question", "answer", "right", "caption", "CIDEr", "BLEU-4", "METEOR", "grounding", "confidence", "seen",
              "said_not_seen", "not_detected", "why_wrong", "static_attention", "error"]
    paths = {k: os.path.join(out_dir, n) for k, n in
             (("html", "report.html"), ("csv", "results.csv"), ("traces", "traces.jsonl"))}
    with open(paths["csv"], "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        for n, r in enumerate(rows, 1):
            writer.writerow({**r, "rank": n, "model": model})
    with open(paths["traces"], "w") as f:
        for r in rows:
            if r.get("trace"):
                f.write(json.dumps(r["trace"]) + "\n")
    cards = []
    for n, r in enumerate(rows, 1):
        esc = html.escape
        if r.get("error"):
            cards.append(f'<tr><td>{n}</td><td colspan="3">{esc(r["image"])}: {esc(r["error"])}</td></tr>')
            continue
        facts = " &middot; ".join(f"{k} {r[k]}" for k in ("CIDEr", "BLEU-4", "METEOR", "grounding", "confidence", "seen")
                                  if r.get(k) is not None)
        refs = "".join(f"<li>{esc(c)}</li>" for c in r.get("references", []))
        if r.get("why_wrong"):
            facts += f'<div class="why">not there: {esc(r["why_wrong"])}</div>'
        cards.append(
            f'<tr id="row-{n}"><td>{n}</td><td><img src="{r["thumb"]}"></td>'
            f'<td><div class="cap">{esc(r["caption"])}</div><div class="facts">{facts}</div>'
            f'<div class="file">{esc(r["image"])}</div><ul>{refs}</ul></td>'
            f'<td><img src="{r["strip"]}"></td></tr>')
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>Triage: {html.escape(model)}</title>
<style>body{{font-family:sans-serif;margin:1.5rem}} td{{vertical-align:top;padding:6px;border-bottom:1px solid #ddd}}
.cap{{font-size:1.2rem;font-weight:600}} .facts{{color:#444;margin:.3rem 0}} .file{{color:#888;font-size:.8rem}}
ul{{margin:.3rem 0;color:#333}}</style></head><body>
<h1>Triage of {html.escape(model)}: {len(rows)} {html.escape(what)}, worst {html.escape(sort)} first</h1>
<table><tr><th>#</th><th>photo</th><th>caption, scores, references</th><th>every word</th></tr>
{''.join(cards)}</table></body></html>"""
    with open(paths["html"], "w", encoding="utf-8") as f:
        f.write(page)
    return paths


def list_runs(folder: str) -> list[str]:
    """Triage runs (sub-folders holding a results.csv) under `folder`, newest first."""
    if not os.path.isdir(folder):
        return []
    runs = [d for d in os.listdir(folder) if os.path.isfile(os.path.join(folder, d, "results.csv"))]
    return sorted(runs, key=lambda d: -os.path.getmtime(os.path.join(folder, d, "results.csv")))


def read_run(folder: str, name: str) -> list[dict]:
    """The rows of a triage run, by name only: a name that tries to leave `folder` is refused."""
    if name not in list_runs(folder):
        raise ValueError(f"no triage run named {name!r} in {folder}")
    with open(os.path.join(folder, name, "results.csv"), newline="") as f:
        return list(csv.DictReader(f))
