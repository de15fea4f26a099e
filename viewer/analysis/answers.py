"""How well a model answers questions generated from captions (data/questions.py): accuracy per
question type and overall, with image-level 95% intervals, beside the commonest-answer baseline.
Never comparable with VQA v2's accuracy: the questions are generated, their answers one word."""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import asdict

from ..data.questions import TYPES, Question
from ..engine.decoding import DecodeSettings, Hypothesis
from ..engine.images import AttendsTo
from ..engine.pipeline import question_ids
from .generation import generate
from .grounding import Grounding, bootstrap_ci, grid_units, ground_words, grounding_summary

ABOUT = ("questions generated from captions (COCO-QA's method on Flickr8k, viewer/data/questions.py); accuracy is "
         "exact match of one-word answers; intervals: image-level bootstrap 95%; never comparable with VQA v2's")


def answer_hypotheses(loaded, items: list[Question], cache, device="cpu", batch_size: int = 256) -> list[Hypothesis]:
    """The model's answer to every question through the one decoding loop (greedy: the argmax
    answer): its token and the map it was read from."""
    feats = [cache.load(q.photo) for q in items]
    prompts = question_ids(loaded, [q.question for q in items], device)
    hyps = generate(loaded, feats, list(range(len(items))), DecodeSettings(strategy="greedy", max_len=2),
                    batch_size=batch_size, device=device, prompts=prompts)
    return [hyps[i] for i in range(len(items))]


def answer_all(loaded, items: list[Question], cache, device="cpu", batch_size: int = 256) -> list[str]:
    """The model's answer to every question, as words."""
    return [loaded.vocab.words[h.tokens[0]] for h in answer_hypotheses(loaded, items, cache, device, batch_size)]


def answer_grounding(loaded, question: Question, hyp: Hypothesis, regions, size: tuple[int, int],
                     image: int) -> dict | None:
    """Where the map the answer was read from lies, when the captions' answer names a COCO class
    ("what is running?" -> dog): its mass in the detector's boxes of that class and pointing, beside
    the centre, uniform and top-detection baselines, as a caption word is grounded (grounding.py).
    None for other answers and for a model that does not look (blind, or the mean of the regions)."""
    if getattr(loaded.model, "look", "attention") != "attention":
        return None
    attention = hyp.attention[:1].double().numpy()
    units = grid_units(attention.shape[1]) if loaded.attends_to == AttendsTo.GRID else regions.boxes
    found = ground_words([question.answer], attention[:, :len(units)], units, regions, image=image, size=size)
    return asdict(found[0]) if found else None


def answer_grounding_block(groundings: list[dict]) -> dict:
    """The grounding block of a split's answers (`answer_grounding`), as the captions' block reads."""
    return grounding_summary([Grounding(**g) for g in groundings])


def commonest_answers(train: list[Question]) -> dict[str, str]:
    """The commonest training answer of each type: the guessing baseline."""
    return {t: Counter(q.answer for q in train if q.type == t).most_common(1)[0][0]
            for t in TYPES if any(q.type == t for q in train)}


def accuracy_block(predicted: list[str], items: list[Question]) -> dict:
    """Accuracy overall and per type, each with its interval and question count."""
    def figure(rows):
        values = [float(predicted[i] == items[i].answer) for i in rows]
        return {"accuracy": round(sum(values) / len(values), 4) if values else None,
                "ci": bootstrap_ci(values, [items[i].photo for i in rows]), "questions": len(values)}
    out = {"overall": figure(range(len(items)))}
    out.update((t, figure([i for i, q in enumerate(items) if q.type == t])) for t in TYPES)
    return out


def qa_report(name: str, predicted: list[str], items: list[Question], common: dict[str, str], split: str) -> dict:
    """One model's report on a split, with the commonest-answer baseline (`commonest_answers` of the
    training questions) on the same questions."""
    return {"about": ABOUT, "model": name, "split": split, "accuracy": accuracy_block(predicted, items),
            "commonest_answer": {"answers": common,
                                 "accuracy": accuracy_block([common.get(q.type, "") for q in items], items)},
            "answers": [{"photo": os.path.basename(q.photo), "type": q.type, "question": q.question, "answer": q.answer, "said": p}
                        for q, p in zip(items, predicted)]}


def looked_or_guessed(captioner, model: str, items: list[Question], said: list[str], references,
                      chunk: int = 64) -> list[float | None]:
    """Each answer's share of the reference photos (language_prior.References) on which the model
    gives the same answer to the same question: at SHARE or more it would have said it of most
    photos, i.e. guessed it from the question. None: not measured (no reference photos)."""
    import torch
    from .language_prior import language_prior
    if references is None:
        return [None] * len(items)
    lm = captioner.model(model)
    inputs = references.inputs(captioner, lm)
    out: list[float | None] = []
    for i in range(0, len(items), chunk):
        rows = range(i, min(i + chunk, len(items)))
        tokens = torch.tensor([[lm.vocab.index[said[j]], lm.vocab.end] for j in rows], device=captioner.device)
        prompts = question_ids(lm, [items[j].question for j in rows], captioner.device)
        out += [round(float(s), 4) for s in language_prior(lm, inputs, tokens, prompt=prompts).share[:, 0]]
    return out


def answer_dependence(captioner, model: str, items: list[Question], said: list[str], log=None) -> list[float]:
    """Each answer's visual dependence (nats): the larger fall of its log-prob when the photo is
    blurred away and when it is removed (`seen_dependence`). A figure, not the guessed verdict: the
    hidden photos are out of distribution, so nearly every answer falls (`looked_or_guessed`). Per
    photo, the hidden photos are encoded once and all its questions forced on them in one batch."""
    import torch
    from ..engine.forcing import forced
    from ..engine.images import GRID, load_photo
    from .explain import Pipeline
    lm = captioner.model(model)
    rows_of: dict[str, list[int]] = {}
    for i, q in enumerate(items):
        rows_of.setdefault(q.photo, []).append(i)
    out = [0.0] * len(items)
    for n, (path, rows) in enumerate(rows_of.items()):
        pipe = Pipeline(captioner, load_photo(path), model, [lm.vocab.index[said[rows[0]]], lm.vocab.end],
                        question=items[rows[0]].question)
        tokens = torch.tensor([[lm.vocab.index[said[i]], lm.vocab.end] for i in rows], device=captioner.device)
        prompts = question_ids(lm, [items[i].question for i in rows], captioner.device)

        def answer_logprob(feats, mask):
            with torch.inference_mode():
                return forced(pipe.model, feats.expand(len(rows), -1, -1), mask.expand(len(rows), -1), tokens,
                              lm.vocab, soft=True, prompt=prompts).logprobs[:, 0].cpu()
        base = answer_logprob(*pipe.inputs_from_grid(pipe.features.grid[None]))
        hidden = torch.zeros(1, GRID, GRID)
        drops = [base - answer_logprob(*next(pipe.hidden_inputs(hidden, imputer))) for imputer in ("blur", "road")]
        for i, d in zip(rows, torch.maximum(*drops).tolist()):
            out[i] = round(d, 4)
        if log and (n + 1) % 50 == 0:
            log(f"visual dependence: {n + 1} of {len(rows_of)} photos")
    return out


def dependence_block(dependence: list[float], said: list[str], items: list[Question],
                     blind: list[str] | None = None, shares: list[float | None] | None = None) -> dict:
    """How many answers were guessed (`looked_or_guessed`: the same answer to the same question of
    at least SHARE of the reference photos; "not measured" without them), their accuracy beside the
    others', the mean visual dependence (nats: a figure, never the verdict), and how often the blind
    model says the same, and how many of those are called guessed."""
    from .language_prior import K, SHARE
    out = {"rule": f"guessed: the model gives the same answer to the same question of at least {SHARE:.0%} of "
                   f"{K} other photos (a seeded sample of dev-select)",
           "mean_dependence": round(sum(dependence) / max(len(dependence), 1), 4)}
    if blind is not None:
        out["same_as_blind"] = round(sum(a == b for a, b in zip(said, blind)) / max(len(said), 1), 4)
    if shares is None or None in shares:
        return {**out, "guessed": "not measured"}
    guessed = [s >= SHARE for s in shares]
    right = [s == q.answer for s, q in zip(said, items)]
    share = lambda rows, of: round(sum(of[i] for i in rows) / len(rows), 4) if rows else None  # noqa: E731
    out.update(guessed=share(range(len(guessed)), guessed),
               guessed_ci=bootstrap_ci([float(g) for g in guessed], [q.photo for q in items]),
               accuracy_guessed=share([i for i, g in enumerate(guessed) if g], right),
               accuracy_seen=share([i for i, g in enumerate(guessed) if not g], right))
    if blind is not None:
        out["same_as_blind_guessed"] = share([i for i, (a, b) in enumerate(zip(said, blind)) if a == b], guessed)
    return out
