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
from dataclasses import asdict, replace

from ..engine.vocab import tokenize
from ..engine.decoding import DecodeSettings, Hypothesis
from .guide import guidance
from .hallucination import hallucination_block, novel_block, unsupported_block, unsupported_words
from ..engine.constraints import avoid_tokens, constraint_tokens
from .faithfulness import WordFaithfulness, faithfulness_block, measure
from .generation import generate
from .grounding import PROXY_BOXES, Caption, block_of, caption_part, detector_found, detector_recall, grid_units, trace_caption
from ..engine.images import AttendsTo, load_photo, photo_size
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


def caption_text(loaded, hyp: Hypothesis) -> str:
    return loaded.vocab.text(hyp.tokens)


CHUNK = 16   # photos decoded together; fixed, so a record does not depend on how a run was split


def _captions(loaded, items, images: list[int], hyps: list[Hypothesis], sizes: list[tuple[int, int]],
              head: tuple[int, int] | None = None):
    """`grounding.Caption`s of decoded hypotheses (items[i] is photo images[i], `sizes[i]` its
    width and height); with `head` (layer, head), that head's cross-attention instead of the summary map."""
    for item, image, hyp, size in zip(items, images, hyps, sizes):
        attention = (hyp.attention if head is None else hyp.heads[:, head[0], head[1]]).double().numpy()
        units = grid_units(attention.shape[1]) if loaded.attends_to == AttendsTo.GRID else item.regions.boxes
        yield Caption(image, first_step_words(loaded.vocab.word_spans(hyp.tokens), len(hyp.tokens)), attention, units,
                      item.regions, size,
                      None if hyp.sample is None or head is not None else hyp.sample.numpy(),
                      loaded.attends_to == AttendsTo.REGIONS)


def _record(index: int, path: str, caption: str, references: list[str], regions, seconds: float,
            own: Caption, forced: list[Caption]) -> dict:
    """One photo's record: its caption and references (the reduce scores them over the whole set),
    the grounding parts of its own caption and of each forced reference, the detector's recall, and
    why each object word nothing supports went wrong."""
    return {"index": index, "id": path, "caption": caption, "references": list(references), "seconds": seconds,
            "detector_found": detector_found(references, regions), "unsupported": unsupported_words(own, references),
            "generated": caption_part(own), "forced": [caption_part(c) for c in forced]}


def split_records(loaded, data, paths: list[str], indices: list[int], cache, settings: DecodeSettings,
                  device="cpu", vision=None, heads: bool = False, faithfulness: bool = False,
                  guide: dict | None = None) -> list[dict]:
    """The records of a chunk of a split's photos (`paths[j]` is item `indices[j]`), from the feature
    cache (filled first when `vision` is given). Every reference is forced through the model (the
    same words for all models); `heads`: each head's grounding on them too; `faithfulness`: how much
    their object words depend on where the model looked (seeded by the chunk's first index);
    `guide` ({"threshold", "most", "rule_out"}): captions must name the detector's top classes and
    must not say the words of the `rule_out` classes it does not see (guide.py)."""
    if vision is not None:
        cache.build(paths, vision, log=lambda *a: None)
    items = [cache.load(p) for p in paths]
    start = time.perf_counter()
    own = guided_generate(loaded, items, paths, settings, device, guide)
    seconds = (time.perf_counter() - start) / len(paths)
    rows = [(j, loaded.vocab.encode(ref) + [loaded.vocab.end]) for j, p in enumerate(paths) for ref in data.captions[p]]
    repeated = [items[j] for j, _ in rows]
    forced = list(generate(loaded, repeated, list(range(len(rows))), DecodeSettings(strategy="forced"),
                           device=device, prefixes=[ids for _, ids in rows]).values())
    images = [indices[j] for j, _ in rows]
    sizes = [photo_size(p) for p in paths]
    forced_caps = list(_captions(loaded, repeated, images, forced, [sizes[j] for j, _ in rows]))
    own_caps = _captions(loaded, items, indices, [own[p] for p in paths], sizes)
    records = [_record(i, p, caption_text(loaded, own[p]), data.captions[p], item.regions, seconds, c,
                       [f for f in forced_caps if f.image == i])
               for i, p, item, c in zip(indices, paths, items, own_caps)]
    if heads and forced and forced[0].heads is not None:
        n_layers, n_heads = forced[0].heads.shape[1:3]
        for layer in range(n_layers):
            for head in range(n_heads):
                for c in _captions(loaded, repeated, images, forced, [sizes[j] for j, _ in rows], (layer, head)):
                    rec = records[indices.index(c.image)]
                    rec.setdefault("heads", {}).setdefault(f"layer {layer + 1} head {head + 1}", []).append(caption_part(c))
    if faithfulness:
        feats, mask = loaded.batch(items, device)
        found = measure(loaded.model, loaded.vocab, feats, mask, rows, [f.attention.numpy() for f in forced],
                        seed=indices[0], curve_draws=1)   # one random draw per level: steady over thousands of words
        for rec in records:
            rec["faithfulness"] = []
        for w in found:
            w.image = indices[w.image]
            records[indices.index(w.image)]["faithfulness"].append(asdict(w))
    return records


def guided_generate(loaded, items, paths: list[str], settings: DecodeSettings, device="cpu",
                    guide: dict | None = None) -> dict[str, Hypothesis]:
    """`generate`'s captions of cached photos, guided by the detector as `guide` says
    ({"threshold", "most", "rule_out", "no_repeat"}: split_records; None: plain)."""
    said = [] if guide is None else [guidance(loaded.vocab, it.regions, guide["threshold"], guide["most"],
                                              guide.get("rule_out", ())) for it in items]
    required = None if guide is None else [[constraint_tokens(loaded.vocab, words) for words, _ in must]
                                           for must, _ in said]
    avoid = None if guide is None or "rule_out" not in guide else \
        [avoid_tokens(loaded.vocab, unseen) for _, unseen in said]
    settings = replace(settings, no_repeat=guide["no_repeat"]) if guide and guide.get("no_repeat") else settings
    return generate(loaded, items, paths, settings, device=device, constraints=required, avoid=avoid)


def pipeline_records(captioner, model: str, data, paths: list[str], indices: list[int], settings: DecodeSettings
                     ) -> list[dict]:
    """`split_records` for any model, imported ones included, from the photos through the pipeline
    (its own encoder, or the precomputed features it was given); the proxy boxes are this viewer's
    detector run on each photo."""
    photos = [load_photo(p) for p in paths]
    for photo, p in zip(photos, paths):
        photo.name = p
    regions = [captioner.vision.detector.detect(photo.rgb) for photo in photos]   # proxy boxes only: no grid
    start = time.perf_counter()
    own = [beams[0] for beams in captioner.caption(photos, model, settings)]
    seconds = (time.perf_counter() - start) / len(paths)
    refs = [(j, ref) for j, p in enumerate(paths) for ref in data.captions[p]]
    forced = captioner.force([photos[j] for j, _ in refs], model, [ref for _, ref in refs])
    return [_record(i, p, trace.caption, data.captions[p], reg, seconds, trace_caption(trace, reg, i),
                    [trace_caption(f, reg, i) for (j2, _), f in zip(refs, forced) if j2 == j])
            for j, (i, p, trace, reg) in enumerate(zip(indices, paths, own, regions))]


def reduce_records(records: list[dict], meteor: bool = True) -> tuple[dict, dict[str, str]]:
    """(metrics, captions by photo) from the photos' records, sorted by index: corpus scores through
    pycocoevalcap, grounding on the own captions and on the forced references, per head and
    faithfulness when the records have them. The same whichever engine made the records."""
    records = sorted((r for r in records if "error" not in r), key=lambda r: r["index"])
    captions = {r["id"]: r["caption"] for r in records}
    metrics = score_captions(captions, {r["id"]: r["references"] for r in records}, meteor=meteor)
    metrics["images_per_s"] = round(len(records) / max(sum(r["seconds"] for r in records), 1e-9), 1)
    metrics["hallucination"] = hallucination_block(captions, {r["id"]: r["references"] for r in records})
    metrics["hallucination"]["why"] = unsupported_block(records)
    metrics["hallucination"]["novel_objects"] = novel_block(captions, {r["id"]: r["references"] for r in records})
    found = [f for r in records for f in r["detector_found"]]
    report = {"boxes": PROXY_BOXES, "detector_recall": detector_recall(found),
              "generated": block_of(r["generated"] for r in records),
              "references_forced": block_of(p for r in records for p in r["forced"])}
    if records and "heads" in records[0]:
        keep = ("mass_in_box", "pointing", "pointing_off_centre", "entropy")
        report["heads_forced"] = {name: {k: block[k] for k in keep} for name in records[0]["heads"]
                                  for block in [block_of(p for r in records for p in r["heads"][name])]}
    if records and "faithfulness" in records[0]:
        report["faithfulness"] = faithfulness_block([WordFaithfulness(**w) for r in records for w in r["faithfulness"]])
    metrics["grounding"] = report
    return metrics, captions


def evaluate_split(loaded, data, split: str, cache, settings: DecodeSettings, device="cpu",
                   meteor: bool = True, vision=None, heads: bool = False, faithfulness: bool = False
                   ) -> tuple[dict, dict[str, str]]:
    """Generate captions for a split and score them in this process (`split_records` chunk by
    chunk, then `reduce_records`); returns (metrics, captions by image path)."""
    paths = data.split(split)
    records = [rec for i in range(0, len(paths), CHUNK)
               for rec in split_records(loaded, data, paths[i:i + CHUNK], list(range(i, min(i + CHUNK, len(paths)))),
                                        cache, settings, device, vision, heads, faithfulness)]
    return reduce_records(json.loads(json.dumps(records)), meteor)


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

