"""Train a question answering model (models/vqa.py) on cached features and questions generated from
captions (data/questions.py): cross-entropy over the answers, the epoch with the best dev-select
accuracy kept, resumable.

Files in --out: `last.safetensors` (fp32) with `last.optim.pt` (tensors only), `best.safetensors`
(fp16, the one to ship), `log.jsonl` (one line per epoch).
"""
from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass, field

import torch

from ..data import questions as qa
from ..data.cache import FeatureCache
from ..engine import checkpoints
from ..engine.models import REGISTRY, build_model
from ..engine.vision import VisionStack
from ..engine.vocab import SPECIALS, Vocabulary
from .train import FeatureTable


@dataclass
class QAConfig:
    model: str
    data: str
    questions: str
    out: str
    epochs: int = 20
    batch: int = 128
    lr: float = 1e-3
    patience: int = 4
    min_freq: int = 2             # question words seen fewer times in training read as <unk>
    seed: int = 0
    device: str = "cpu"
    cache: str | None = None
    resume: bool = False
    hparams: dict = field(default_factory=dict)


def encode(items: list[qa.Question], words: Vocabulary, answers: Vocabulary):
    """Questions (N, L) padded with 0 and answer ids (N,) (an answer the vocabulary lacks: <unk>)."""
    ids = [words.encode(q.question) or [words.unk] for q in items]
    out = torch.zeros(len(ids), max(map(len, ids)), dtype=torch.long)
    for i, row in enumerate(ids):
        out[i, :len(row)] = torch.tensor(row)
    return out, torch.tensor([answers.index.get(q.answer, answers.unk) for q in items])


@torch.no_grad()
def predict(model, table: FeatureTable, items: list[qa.Question], words: Vocabulary, answers: Vocabulary,
            device, batch: int = 256) -> list[str]:
    """The answer the model gives to each question (argmax over the answers)."""
    model.eval()
    out = []
    for i in range(0, len(items), batch):
        chunk = items[i:i + batch]
        q, _ = encode(chunk, words, answers)
        v, mask = table.batch([x.photo for x in chunk], device)
        logits, _ = model.answer(v, mask, model.read_question(q.to(device)))
        logits[:, :len(SPECIALS)] = float("-inf")
        out += answers.decode(logits.argmax(1).tolist())
    return out


def accuracy(predicted: list[str], items: list[qa.Question]) -> float:
    return sum(p == q.answer for p, q in zip(predicted, items)) / max(len(items), 1)


def _one_epoch(model, optim, table: FeatureTable, train: list, q_train: torch.Tensor, a_train: torch.Tensor,
               batch: int, rng: random.Random, device) -> float:
    """One pass over the training questions in a seeded order; the mean loss per question."""
    model.train()
    order, total = list(range(len(train))), 0.0
    rng.shuffle(order)
    for i in range(0, len(order), batch):
        rows = order[i:i + batch]
        v, mask = table.batch([train[r].photo for r in rows], device)
        loss = model.loss_on(v, mask, q_train[rows].to(device), a_train[rows].to(device))
        optim.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optim.step()
        total += loss.item() * len(rows)
    return total / len(train)


def train_qa(cfg: QAConfig, log=print) -> dict:
    if cfg.model not in REGISTRY or not getattr(REGISTRY[cfg.model][0], "answers", False):
        raise ValueError(f"{cfg.model!r} is not a question answering model; choose from "
                         f"{', '.join(n for n, (c, _) in sorted(REGISTRY.items()) if c.answers)}")
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    device = torch.device(cfg.device)
    sets = qa.read(cfg.questions, cfg.data)
    train, dev = sets["train"], sets["dev-select"]
    cache = FeatureCache(cfg.cache)
    photos = sorted({q.photo for q in train + dev})
    if cache.missing(photos):
        cache.build(photos, VisionStack(device), log=log)
    cls, config = REGISTRY[cfg.model]
    table = FeatureTable(photos, cache, cls.attends_to)
    os.makedirs(cfg.out, exist_ok=True)
    last, best_path, log_path = (os.path.join(cfg.out, n) for n in ("last.safetensors", "best.safetensors", "log.jsonl"))
    if cfg.resume and os.path.exists(last):
        loaded = checkpoints.load(last, device)
        model, answers, hparams = loaded.model, loaded.vocab, loaded.meta["hparams"]
        words = Vocabulary(loaded.meta["question_vocab"])
        history = [json.loads(line) for line in open(log_path, encoding="utf-8")]
    else:
        words = Vocabulary.build((q.question for q in train), cfg.min_freq)
        answers = Vocabulary(SPECIALS + sorted({q.answer for q in train}))
        hparams = {**config, **cfg.hparams, "vocab_size": len(answers), "feature_dim": table.feats.shape[-1],
                   "question_vocab_size": len(words)}
        model, history = build_model(cfg.model, **hparams), []
        open(log_path, "w").close()
    model.to(device)
    optim = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    if history and os.path.exists(last.replace(".safetensors", ".optim.pt")):
        optim.load_state_dict(torch.load(last.replace(".safetensors", ".optim.pt"), weights_only=True))
    q_train, a_train = encode(train, words, answers)
    best = max((h["dev_accuracy"] for h in history), default=-1.0)
    meta = {"task": "answer", "question_vocab": words.words, "training": {"data": cfg.data, "questions": cfg.questions,
            "config": {k: v for k, v in vars(cfg).items() if k not in ("out", "resume")}}}
    for epoch in range(len(history), cfg.epochs):
        if history and epoch - max(history, key=lambda h: h["dev_accuracy"])["epoch"] > cfg.patience:
            log(f"no dev improvement for {cfg.patience} epochs: stopped")
            break
        start = time.time()
        total = _one_epoch(model, optim, table, train, q_train, a_train, cfg.batch, rng, device)
        dev_acc = accuracy(predict(model, table, dev, words, answers, device), dev)
        entry = {"epoch": epoch, "loss": round(total, 4), "dev_accuracy": round(dev_acc, 4),
                 "seconds": round(time.time() - start, 1)}
        history.append(entry)
        with open(log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
        log(f"epoch {epoch}: loss {entry['loss']}, dev-select accuracy {dev_acc:.4f} ({entry['seconds']} s)")
        name = os.path.basename(os.path.normpath(cfg.out))
        checkpoints.save(last, model, answers, name, cfg.model, hparams, {**meta, "epoch": epoch}, half=False)
        torch.save(optim.state_dict(), last.replace(".safetensors", ".optim.pt"))
        if dev_acc > best:
            best = dev_acc
            checkpoints.save(best_path, model, answers, name, cfg.model, hparams,
                             {**meta, "epoch": epoch, "dev_select_accuracy": round(dev_acc, 4)})
    return {"best_dev_select_accuracy": best, "epochs": len(history)}
