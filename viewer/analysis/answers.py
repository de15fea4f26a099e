"""How well a model answers questions generated from captions (data/questions.py): accuracy per
question type and overall, with image-level 95% intervals, beside the commonest-answer baseline.
Never comparable with VQA v2's accuracy: the questions are generated, their answers one word."""
from __future__ import annotations

from collections import Counter

from ..data.questions import TYPES, Question
from ..engine.decoding import DecodeSettings
from ..engine.pipeline import question_ids
from .generation import generate
from .grounding import bootstrap_ci

ABOUT = ("questions generated from captions (COCO-QA's method on Flickr8k, viewer/data/questions.py); accuracy is "
         "exact match of one-word answers; intervals: image-level bootstrap 95%; never comparable with VQA v2's")


def answer_all(loaded, items: list[Question], cache, device="cpu", batch_size: int = 256) -> list[str]:
    """The model's answer to every question, through the one decoding loop (greedy: the argmax answer)."""
    feats = [cache.load(q.photo) for q in items]
    prompts = question_ids(loaded, [q.question for q in items], device)
    hyps = generate(loaded, feats, list(range(len(items))), DecodeSettings(strategy="greedy", max_len=2),
                    batch_size=batch_size, device=device, prompts=prompts)
    return [loaded.vocab.words[hyps[i].tokens[0]] for i in range(len(items))]


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


def qa_report(name: str, predicted: list[str], items: list[Question], train: list[Question], split: str) -> dict:
    """One model's report on a split, with the commonest-answer baseline on the same questions."""
    common = commonest_answers(train)
    return {"about": ABOUT, "model": name, "split": split, "accuracy": accuracy_block(predicted, items),
            "commonest_answer": {"answers": common,
                                 "accuracy": accuracy_block([common.get(q.type, "") for q in items], items)},
            "answers": [{"photo": q.photo, "type": q.type, "question": q.question, "answer": q.answer, "said": p}
                        for q, p in zip(items, predicted)]}
