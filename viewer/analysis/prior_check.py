"""Check the language-prior verdict ("would have said it of most photos", language_prior.py) by hand:
sample 50 caption words and 50 answers, draw them on contact sheets WITHOUT the verdict, and keep
the verdicts in a separate file, to be joined with the blind judgements afterwards.

Words: `sat-soft` and `updown` greedy captions of seeded dev-select photos (15 per model, none of
them a reference photo nor a photo prior_choice.py chose K and SHARE on); 25 content words per
model drawn with a fixed seed (function words skipped). Answers: `vqa-regions` on 50 seeded
dev-select questions about photos outside the same excluded set. Each item's share is the rule's
(K reference photos, the word forced after its caption's words before it, the answer after its
question); its verdict is "guessed" at SHARE or more, else "looked".

    python -m viewer.analysis.prior_check --data ../shared/data/flickr8k

writes reports/guessed/sheet-words-N.png, sheet-answers-N.png (photo, caption with the word in
CAPS or question and answer, and an id; no verdict) and reports/guessed/items.json (each item's id,
photo, text, share and verdict). Judgements go to reports/guessed/hand_check.json by hand;
`--join` then adds the agreement table (rule verdict x judgement) to it.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import textwrap

import torch

from ..data import questions as Q
from ..data.datasets import load_dataset
from ..engine.decoding import DecodeSettings
from ..engine.images import load_photo
from ..engine.pipeline import Captioner
from .answers import looked_or_guessed
from .language_prior import K, SHARE, References, language_prior, reference_paths

OUT = "reports/guessed"
SEED = 8
N_WORDS, N_ANSWERS, PHOTOS_PER_MODEL = 50, 50, 15
CAPTIONERS = ("sat-soft", "updown")
SKIP = {"a", "an", "the", "is", "are", "of", "in", "on", "with", "and", "at", "to",
        # other function words: not nouns, verbs or adjectives
        "his", "her", "their", "its", "it", "he", "she", "they", "while", "for", "from", "by", "into",
        "through", "over", "under", "near", "next", "behind", "down", "up", "out", "as", "that", "who",
        "some", "another", "other", "has", "<end>", "<unk>", ","}
JUDGEMENTS = ("looked", "guessed", "unsure")


def excluded_photos(data, choice: str) -> set[str]:
    """The reference photos and the photos prior_choice.py chose K and SHARE on (basenames matched)."""
    out = set(reference_paths(data, K))
    if os.path.exists(choice):
        with open(choice, encoding="utf-8") as f:
            report = json.load(f)
        names = {r["photo"] for r in report.get("answers", []) + report.get("words", [])}
        out |= {p for p in data.split("dev-select") if os.path.basename(p) in names}
    return out


def sample_words(captioner, data, refs: References, excluded: set, rng: random.Random) -> list[dict]:
    pool = sorted(set(data.split("dev-select")) - excluded)
    photos = rng.sample(pool, PHOTOS_PER_MODEL * len(CAPTIONERS))
    items = []
    for m, model in enumerate(CAPTIONERS):
        lm = captioner.model(model)
        candidates = []
        for path in photos[m * PHOTOS_PER_MODEL:(m + 1) * PHOTOS_PER_MODEL]:
            trace = captioner.caption([load_photo(path)], model, DecodeSettings(strategy="greedy"))[0][0]
            share = language_prior(lm, refs.inputs(captioner, lm), torch.tensor(trace.token_ids)[None]).share[0]
            steps = trace.step_words()
            words = [(t, w) for t, w in enumerate(steps) if w and w != "<end>"]
            for i, (t, w) in enumerate(words):
                if w.lower() in SKIP or not w.isalpha():
                    continue
                text = " ".join(x.upper() if j == i else x for j, (_, x) in enumerate(words))
                candidates.append({"kind": "word", "model": model, "photo_path": path, "word": w,
                                   "position": i, "text": text, "share": round(float(share[t]), 4)})
        items += rng.sample(candidates, N_WORDS // len(CAPTIONERS))
    return items


def sample_answers(captioner, data, refs: References, excluded: set, rng: random.Random) -> list[dict]:
    qs = [q for q in Q.generate(data, splits=("dev-select",))["dev-select"] if q.photo not in excluded]
    picked = rng.sample(qs, N_ANSWERS)
    said = [captioner.ask([load_photo(q.photo)], "vqa-regions", [q.question])[0].words[0] for q in picked]
    shares = looked_or_guessed(captioner, "vqa-regions", picked, said, refs)
    return [{"kind": "answer", "model": "vqa-regions", "photo_path": q.photo, "question": q.question,
             "answer": a, "reference_answer": q.answer, "text": f"Q: {q.question}  A: {a.upper()}",
             "share": s} for q, a, s in zip(picked, said, shares)]


def contact_sheets(items: list[dict], stem: str, cols: int = 4, rows: int = 3, tile: int = 380) -> list[str]:
    """PNG sheets of `cols` x `rows` tiles: the photo small, the item's id and text under it."""
    from PIL import Image, ImageDraw, ImageFont
    try:
        font = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", 17)
        bold = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf", 20)
    except OSError:
        font = bold = ImageFont.load_default()
    photo_h, text_h = int(tile * 0.72), 96
    paths = []
    per = cols * rows
    for s in range(0, len(items), per):
        sheet = Image.new("RGB", (cols * tile, rows * (photo_h + text_h)), "white")
        draw = ImageDraw.Draw(sheet)
        for n, item in enumerate(items[s:s + per]):
            x, y = (n % cols) * tile, (n // cols) * (photo_h + text_h)
            im = Image.open(item["photo_path"]).convert("RGB")
            im.thumbnail((tile - 8, photo_h - 6))
            sheet.paste(im, (x + (tile - im.width) // 2, y + 3))
            draw.rectangle([x + 4, y + 4, x + 52, y + 30], fill="yellow")
            draw.text((x + 8, y + 6), str(item["id"]), fill="black", font=bold)
            lines = textwrap.wrap(item["text"], 38)[:4]
            draw.multiline_text((x + 6, y + photo_h + 2), "\n".join(lines), fill="black", font=font, spacing=3)
            draw.rectangle([x, y, x + tile - 1, y + photo_h + text_h - 1], outline="grey")
        path = f"{stem}-{s // per + 1}.png"
        sheet.save(path)
        paths.append(path)
    return paths


def agreement(items: list[dict], hand: dict) -> dict:
    """Per kind, the rule's verdict (rows) x the hand judgement (columns)."""
    judged = hand["judgements"]
    out = {}
    for kind in ("word", "answer"):
        table = {v: {j: 0 for j in JUDGEMENTS} for v in ("guessed", "looked")}
        for item in items:
            if item["kind"] == kind and str(item["id"]) in judged:
                table[item["verdict"]][judged[str(item["id"])]["judgement"]] += 1
        out[kind + "s"] = table
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="../shared/data/flickr8k")
    p.add_argument("--out", default=OUT)
    p.add_argument("--join", action="store_true", help="add the agreement table to hand_check.json")
    args = p.parse_args(argv)
    items_path, hand_path = os.path.join(args.out, "items.json"), os.path.join(args.out, "hand_check.json")
    if args.join:
        with open(items_path, encoding="utf-8") as f:
            items = json.load(f)["items"]
        with open(hand_path, encoding="utf-8") as f:
            hand = json.load(f)
        hand["agreement"] = agreement(items, hand)
        with open(hand_path, "w", encoding="utf-8") as f:
            json.dump(hand, f, indent=1)
        print(json.dumps(hand["agreement"], indent=1))
        return 0
    data, captioner = load_dataset(args.data), Captioner("cpu")
    refs = References(reference_paths(data, K))
    excluded = excluded_photos(data, os.path.join(args.out, "choice.json"))
    rng = random.Random(SEED)
    words = sample_words(captioner, data, refs, excluded, rng)
    answers = sample_answers(captioner, data, refs, excluded, rng)
    rng.shuffle(words)   # the two models mixed on the sheets
    for n, item in enumerate(words + answers, 1):
        item["id"] = n
        item["verdict"] = "guessed" if item["share"] is not None and item["share"] >= SHARE else "looked"
    os.makedirs(args.out, exist_ok=True)
    sheets = contact_sheets(words, os.path.join(args.out, "sheet-words")) + \
        contact_sheets(answers, os.path.join(args.out, "sheet-answers"))
    for item in words + answers:
        item["photo"] = os.path.basename(item.pop("photo_path"))
    with open(items_path, "w", encoding="utf-8") as f:
        json.dump({"about": __doc__.split("\n\n")[1], "k": K, "share": SHARE, "seed": SEED,
                   "items": words + answers}, f, indent=1)
    print("wrote", items_path, *sheets)   # no verdicts printed: the sheets are judged blind
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
