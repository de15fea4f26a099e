"""Caption metrics through the standard COCO caption evaluation code (PyPI pycocoevalcap).

BLEU-1..4, METEOR, ROUGE-L and CIDEr-D on PTB-tokenised text, exactly as the COCO server did;
beside them, the split's attention grounding (`grounding.py`) on the model's own captions and on
the references forced through it.
METEOR and the PTB tokenizer run on Java; without Java, METEOR is skipped with a warning and
our own tokenizer stands in for PTB.
"""
from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys
import time

import numpy as np

from ..engine.vocab import tokenize
from ..engine.decoding import DecodeSettings, Hypothesis, decode
from .faithfulness import faithfulness_block, measure
from .grounding import PROXY_BOXES, Caption, detector_recall, grid_units, grounding_block, trace_units
from ..engine.images import AttendsTo, load_photo
from ..engine.vision import model_inputs
from ..engine.words import first_step_words


def java_available() -> bool:
    return shutil.which("java") is not None


def score_captions(predictions: dict[str, str], references: dict[str, list[str]], meteor: bool = True,
                   per_image: dict | None = None) -> dict:
    """Corpus metrics of predicted captions (one per id) against their references.

    Pass a dict as `per_image` to also receive each id's own scores (CIDEr's document
    frequencies still come from the whole set, as in the COCO evaluation).
    """
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.rouge.rouge import Rouge

    ids = list(predictions)
    gts = {i: [{"caption": c} for c in references[i]] for i in ids}
    res = {i: [{"caption": predictions[i]}] for i in ids}
    if java_available():
        from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer
        tok = PTBTokenizer()
        gts, res = tok.tokenize(gts), tok.tokenize(res)
    else:
        print("warning: java not found: using the viewer's tokenizer and skipping METEOR", file=sys.stderr)
        gts = {i: [" ".join(tokenize(c["caption"])) for c in v] for i, v in gts.items()}
        res = {i: [" ".join(tokenize(c["caption"])) for c in v] for i, v in res.items()}
        meteor = False
    scorers = [(Bleu(4), ["BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4"]), (Rouge(), ["ROUGE-L"]), (Cider(), ["CIDEr"])]
    if meteor:
        from pycocoevalcap.meteor.meteor import Meteor
        scorers.insert(1, (Meteor(), ["METEOR"]))
    out = {}
    for scorer, names in scorers:
        with contextlib.redirect_stdout(io.StringIO()):   # the scorers print their internals
            score, scores = scorer.compute_score(gts, res)
        multi = isinstance(score, list)
        for j, (name, value) in enumerate(zip(names, score if multi else [score])):
            out[name] = round(float(value) * 100, 2)
            if per_image is not None:
                for i, v in zip(ids, scores[j] if multi else scores):
                    per_image.setdefault(i, {})[name] = round(float(v) * 100, 2)
    return out


def caption_scores(caption: str, references: list[str], corpus: dict[str, list[str]] | None = None) -> dict:
    """BLEU-4, METEOR and CIDEr of ONE caption against its references.

    CIDEr weighs n-grams by their document frequency over a corpus, which a single image does
    not have: with `corpus` (image -> references, e.g. the dataset the app was pointed at) the
    caption is scored inside it; without one CIDEr is left out.
    """
    if not references:
        raise ValueError("type at least one reference caption")
    per_image: dict = {}
    score_captions({"this": caption}, {"this": references}, per_image=per_image)
    out = {k: per_image["this"][k] for k in ("BLEU-4", "METEOR") if k in per_image["this"]}
    if corpus:
        others = {k: v for k, v in corpus.items() if v}
        preds = {k: v[0] for k, v in others.items()}
        preds["this"], others["this"] = caption, references
        per_image = {}
        score_captions(preds, others, meteor=False, per_image=per_image)
        out["CIDEr"] = per_image["this"]["CIDEr"]
    return out


def generate(loaded, items, names, settings: DecodeSettings, batch_size: int = 100, device="cpu",
             prefixes: list[list[int]] | None = None) -> dict[str, Hypothesis]:
    """The best hypothesis for each image (features already computed), batched; with `prefixes`
    (and a forced strategy), the given token sequences scored instead."""
    out = {}
    for i in range(0, len(items), batch_size):
        x, mask = model_inputs(items[i:i + batch_size], loaded.attends_to, device)
        chunk = None if prefixes is None else prefixes[i:i + batch_size]
        hyps = decode(loaded.model, x, mask, settings, loaded.vocab, chunk)
        out.update((name, hs[0]) for name, hs in zip(names[i:i + batch_size], hyps))
    return out


def caption_text(loaded, hyp: Hypothesis) -> str:
    return loaded.vocab.text(hyp.tokens)


def _captions(loaded, items, images: list[int], hyps: list[Hypothesis], head: tuple[int, int] | None = None):
    """`grounding.Caption`s of decoded hypotheses (items[i] is photo images[i]); with `head`
    (layer, head), that head's cross-attention instead of the summary map."""
    for item, image, hyp in zip(items, images, hyps):
        attention = (hyp.attention if head is None else hyp.heads[:, head[0], head[1]]).double().numpy()
        units = grid_units(attention.shape[1]) if loaded.attends_to == AttendsTo.GRID else item.regions.boxes
        yield Caption(image, first_step_words(loaded.vocab.word_spans(hyp.tokens), len(hyp.tokens)), attention, units,
                      item.regions,
                      None if hyp.sample is None or head is not None else hyp.sample.numpy(),
                      loaded.attends_to == AttendsTo.REGIONS)


def grounding_report(loaded, data, paths, items, generated: dict[str, Hypothesis], device="cpu",
                     heads: bool = False, faithfulness: bool = False) -> dict:
    """Grounding on the model's own captions and on every reference forced through it (same words for
    all models); with `heads`, also every head of a multi-head model on the forced references; with
    `faithfulness`, how much the forced references' object words depend on where the model looked."""
    rows = [(i, loaded.vocab.encode(ref) + [loaded.vocab.end]) for i, p in enumerate(paths)
            for ref in data.captions[p]]
    repeated = [items[i] for i, _ in rows]
    forced = list(generate(loaded, repeated, list(range(len(rows))), DecodeSettings(strategy="forced"),
                           device=device, prefixes=[ids for _, ids in rows]).values())
    images = [i for i, _ in rows]
    report = _report([data.captions[p] for p in paths], [it.regions for it in items],
                     _captions(loaded, items, list(range(len(items))), [generated[p] for p in paths]),
                     _captions(loaded, repeated, images, forced))
    if heads and forced[0].heads is not None:
        n_layers, n_heads = forced[0].heads.shape[1:3]
        keep = ("mass_in_box", "pointing", "pointing_off_centre", "entropy")
        report["heads_forced"] = {
            f"layer {i + 1} head {j + 1}": {k: block[k] for k in keep}
            for i in range(n_layers) for j in range(n_heads)
            for block in [grounding_block(_captions(loaded, repeated, images, forced, (i, j)))]}
    if faithfulness:
        report["faithfulness"] = faithfulness_report(loaded, items, rows, forced, device)
    return report


def faithfulness_report(loaded, items, rows, forced: list[Hypothesis], device="cpu", batch_images: int = 100) -> dict:
    """`faithfulness.measure` on the forced references' object words, a chunk of photos at a time
    (one random draw per level of the deletion curve: its mean over thousands of words is steady)."""
    words = []
    for start in range(0, len(items), batch_images):
        feats, mask = model_inputs(items[start:start + batch_images], loaded.attends_to, device)
        chosen = [r for r, (i, _) in enumerate(rows) if start <= i < start + batch_images]
        found = measure(loaded.model, loaded.vocab, feats, mask, [(rows[r][0] - start, rows[r][1]) for r in chosen],
                        [forced[r].attention.numpy() for r in chosen], seed=start, curve_draws=1)
        for w in found:
            w.image += start
        words += found
    return faithfulness_block(words)


def _report(references, regions, own_captions, forced_captions) -> dict:
    return {"boxes": PROXY_BOXES, "detector_recall": detector_recall(references, regions),
            "generated": grounding_block(own_captions), "references_forced": grounding_block(forced_captions)}


def evaluate_split(loaded, data, split: str, cache, settings: DecodeSettings, device="cpu",
                   meteor: bool = True, vision=None, heads: bool = False, faithfulness: bool = False
                   ) -> tuple[dict, dict[str, str]]:
    """Generate captions for a split and score them (captions and grounding, per head with `heads`,
    faithfulness with `faithfulness`); returns (metrics, captions by image path)."""
    paths = data.split(split)
    if vision is not None:
        cache.build(paths, vision)
    items = [cache.load(p) for p in paths]
    start = time.time()
    hyps = generate(loaded, items, paths, settings, device=device)
    seconds = time.time() - start
    captions = {p: caption_text(loaded, h) for p, h in hyps.items()}
    metrics = score_captions(captions, {p: data.captions[p] for p in paths}, meteor=meteor)
    metrics["images_per_s"] = round(len(paths) / max(seconds, 1e-9), 1)
    metrics["grounding"] = grounding_report(loaded, data, paths, items, hyps, device, heads, faithfulness)
    return metrics, captions


def evaluate_photos(captioner, model: str, data, split: str, settings: DecodeSettings, batch: int = 16,
                    meteor: bool = True) -> tuple[dict, dict[str, str]]:
    """Any model, imported ones included, scored from the photos through the pipeline (its own
    encoder, or the precomputed features it was given), with the same metrics and grounding as
    `evaluate_split`; the proxy boxes are this viewer's detector run on each photo."""
    paths = data.split(split)
    captions, own, forced = {}, [], []
    start = time.time()
    for i in range(0, len(paths), batch):
        chunk = paths[i:i + batch]
        photos = [load_photo(p) for p in chunk]
        for photo, p in zip(photos, chunk):
            photo.name = p
        regions = [captioner.vision.detector.detect(photo.rgb) for photo in photos]   # proxy boxes only: no grid
        for p, traces, reg in zip(chunk, captioner.caption(photos, model, settings), regions):
            captions[p] = traces[0].caption
            own.append((len(own), traces[0], reg))
        refs = [(i + j, photo, ref, reg) for j, (photo, p, reg) in enumerate(zip(photos, chunk, regions))
                for ref in data.captions[p]]
        traces = captioner.force([r[1] for r in refs], model, [r[2] for r in refs])
        forced += [(r[0], trace, r[3]) for trace, r in zip(traces, refs)]
    seconds = time.time() - start
    metrics = score_captions(captions, {p: data.captions[p] for p in paths}, meteor=meteor)
    metrics["images_per_s"] = round(len(paths) / max(seconds, 1e-9), 1)
    metrics["grounding"] = _report([data.captions[p] for p in paths], [reg for _, _, reg in own],
                                   _trace_captions(own), _trace_captions(forced))
    return metrics, captions


def _trace_captions(pairs):
    """`grounding.Caption`s of (photo index, trace, proxy regions)."""
    for image, trace, regions in pairs:
        drawn = None if trace.steps[0].sample is None else np.array([s.sample for s in trace.steps])
        yield Caption(image, trace.step_words(), np.stack([s.attention for s in trace.steps]),
                      trace_units(trace), regions, drawn, trace.attends_to == AttendsTo.REGIONS)


def report_half_seen(data, split: str, report: str = "dev-report") -> dict:
    """Whether scoring `split` looks at the held-out report half (`dev-report`, and so also the whole `dev`),
    and at how many of its photos: the record that those figures are no longer untouched."""
    try:
        held_out = set(data.split(report))
    except ValueError:   # a dataset without that split has no report half
        held_out = set()
    n = len(held_out & set(data.split(split)))
    return {"looked_at_report_half": n > 0, "report_half_photos": n}


def write_captions(path: str, captions: dict[str, str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump([{"image": k, "caption": v} for k, v in captions.items()], f, indent=1)

