"""Train a decoder on cached image features: resumable, logged, early-stopped on dev CIDEr.

Speed matters on a 2-core CPU, so a batch is B images with ALL their captions: each image's
feature projections are computed once for its five captions, images are batched with others of
similar longest-caption length from the same random pool (`length_buckets`), and the loss is one
cross-entropy call per batch. `ground_weight` adds attention supervision toward the detector's
boxes of the objects the words name.

Files in --out: `last.safetensors` (fp32, with optimizer state in `last.optim.pt`, tensors
only), `best.safetensors` (fp16, the one to ship), `log.jsonl` (one line per epoch).
"""
from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm import tqdm

from ..engine import checkpoints
from ..data.cache import FeatureCache
from ..data.datasets import load_dataset
from ..engine.vocab import Vocabulary, tokenize
from ..data.world import PseudoPairs, gate_weights, pseudo_pairs
from ..engine.decoding import DecodeSettings
from ..analysis.evaluate import evaluate_split
from ..analysis.grounding import grid_units, inside_fractions, word_class
from ..engine.images import AttendsTo, GRID
from ..engine.models import REGISTRY, build_model
from ..engine.models.base import AttentionTargets
from .scst import CiderReward, scst_loss
from ..engine.vision import VisionStack, model_inputs
from ..engine.vision.regions import COCO_LABELS, MAX_REGIONS
from ..analysis.guide import CLASS_WORDS
from ..analysis.hallucination import named


@dataclass
class TrainConfig:
    model: str
    data: str
    out: str
    epochs: int = 20
    batch_images: int = 32
    lr: float = 4e-4
    lr_decay: float = 0.8          # per epoch without improvement
    warmup: int = 0                # batches over which the learning rate rises linearly (Transformers need it)
    min_freq: int = 5
    max_words: int = 22            # longer training captions are cut (95% of Flickr8k's are <= 18 words)
    patience: int = 4
    clip: float = 5.0
    dev_beam: int = 3
    dev_split: str = "dev-select"  # scored each epoch; the default keeps the report half ("dev-report") unseen
    dev_images: int = 0            # 0: the whole dev split
    seed: int = 0
    device: str = "cpu"
    cache: str | None = None
    resume: bool = False
    init_from: str | None = None   # warm start from a checkpoint of the same architecture
    scst: bool = False             # self-critical fine-tuning on CIDEr-D (start from a trained model)
    scst_samples: int = 5
    ground_weight: float = 0.0     # attention supervision on words naming a detected object (0: off)
    hold_out: tuple[str, ...] = ()  # COCO classes whose training captions are dropped (the novel-object protocol)
    world: str | None = None       # a world-data folder: its COCO pseudo-pairs join training, its vocabulary is used
    coco: str | None = None        # the COCO photos folder those pseudo-pairs name
    gate: float = 1.0              # loss weight of a pseudo-caption's words that name no detected object
    keep_epochs: bool = False      # also save each epoch's weights (epoch-N.safetensors, fp16), to choose on other data
    hparams: dict = field(default_factory=dict)


class FeatureTable:
    """All images' model inputs in memory (fp16), gathered per batch."""

    def __init__(self, paths, cache: FeatureCache, attends_to: AttendsTo, chunk: int = 256, labels: bool = False):
        self.index = {p: i for i, p in enumerate(paths)}
        feats, masks = [], []
        for i in range(0, len(paths), chunk):
            x, m = model_inputs([cache.load(p) for p in paths[i:i + chunk]], attends_to, labels=labels)
            if attends_to == AttendsTo.REGIONS:   # pad every chunk to the same region count
                x = torch.nn.functional.pad(x, (0, 0, 0, MAX_REGIONS - x.shape[1]))
                m = torch.nn.functional.pad(m, (0, MAX_REGIONS - m.shape[1]))
            feats.append(x.half()); masks.append(m)
        self.feats, self.mask = torch.cat(feats), torch.cat(masks)
        keep = self.mask.any(0)              # drop padding columns nobody uses
        self.feats, self.mask = self.feats[:, keep], self.mask[:, keep]

    def batch(self, paths, device):
        idx = torch.tensor([self.index[p] for p in paths])
        return self.feats[idx].to(device, torch.float32), self.mask[idx].to(device)


class GroundingTargets:
    """Attention supervision targets: per training image and COCO class, the fraction of each cell
    or region inside the detector's boxes of that class (`grounding.inside_fractions`)."""

    def __init__(self, paths, cache: FeatureCache, attends_to: AttendsTo, vocab: Vocabulary, weight: float):
        self.weight = weight
        self.token_class = {i: c for i, w in enumerate(vocab.words) if (c := word_class(w))}
        self.fractions: dict[str, dict[str, np.ndarray]] = {}
        for p in paths:
            regions = cache.regions(p)
            labels = np.array(regions.labels)
            units = grid_units(GRID * GRID) if attends_to == AttendsTo.GRID else regions.boxes
            self.fractions[p] = {c: inside_fractions(units, regions.boxes[labels == c]).astype(np.float32)
                                 for c in set(regions.labels) & set(self.token_class.values())}

    def batch(self, paths, tokens: torch.Tensor, image_index: torch.Tensor, k: int) -> AttentionTargets:
        emitted = tokens[:, 1:].cpu().numpy()                      # word emitted at each step
        inside = np.zeros((emitted.shape[1], emitted.shape[0], k), np.float32)
        valid = np.zeros(emitted.shape[::-1], bool)
        for n, j in enumerate(image_index.tolist()):
            fractions = self.fractions[paths[j]]
            for t, w in enumerate(emitted[n]):
                frac = fractions.get(self.token_class.get(w))
                if frac is not None:
                    inside[t, n, :len(frac)], valid[t, n] = frac, True
        return AttentionTargets(torch.from_numpy(inside).to(tokens.device), torch.from_numpy(valid).to(tokens.device),
                                self.weight)


def length_buckets(paths, encoded, batch_images: int, rng: random.Random, pool: int = 20) -> list[list[str]]:
    """Batches with little padding whose order is still random.

    The images are shuffled and cut into pools of `pool` batches; within a pool they are sorted
    by their longest caption and cut into batches; the batches of all pools are then shuffled.
    Nothing is sorted across pools, and the captions inside a batch keep their order.
    """
    order = paths[:]
    rng.shuffle(order)
    batches = []
    for i in range(0, len(order), batch_images * pool):
        chunk = sorted(order[i:i + batch_images * pool], key=lambda p: max(len(c) for c in encoded[p]))
        batches += [chunk[j:j + batch_images] for j in range(0, len(chunk), batch_images)]
    rng.shuffle(batches)
    return batches


def make_batch(paths, encoded, device, weights=None):
    """All captions of the given images: tokens (N, T) padded with 0 (<pad>), their image rows, and
    (when `weights` has any of these images) each emitted token's loss weight (N, T - 1), else None."""
    rows = [(j, c) for j, p in enumerate(paths) for c in encoded[p]]
    tokens = torch.zeros(len(rows), max(len(c) for _, c in rows), dtype=torch.long)
    for i, (_, c) in enumerate(rows):
        tokens[i, :len(c)] = torch.tensor(c)
    image_index = torch.tensor([j for j, _ in rows])
    token_weights = None
    if weights and any(p in weights for p in paths):
        token_weights = torch.ones(tokens.shape[0], tokens.shape[1] - 1)
        i = 0
        for p in paths:
            for n, c in enumerate(encoded[p]):
                if p in weights:
                    token_weights[i, :len(c) - 1] = torch.tensor(weights[p][n])
                i += 1
        token_weights = token_weights.to(device)
    return tokens.to(device), image_index.to(device), token_weights


def scored_dev_photos(data, cfg: TrainConfig) -> list[str]:
    """The dev photos scored after each epoch for early stopping: the first `dev_images` of `dev_split`."""
    paths = data.split(cfg.dev_split)
    return paths[: cfg.dev_images] if cfg.dev_images else paths


def check_config(cfg: TrainConfig) -> None:
    """Refuse settings that cannot mean what they say, before any data is read."""
    if cfg.model not in REGISTRY:
        raise ValueError(f"unknown model type {cfg.model!r}; known: {', '.join(sorted(REGISTRY))}")
    if cfg.scst and cfg.ground_weight > 0:
        raise ValueError("--scst does not use --ground-weight (self-critical batches have no grounding targets): "
                         "run them as two fine-tunes")
    if not 0 < cfg.gate <= 1:
        raise ValueError(f"--gate {cfg.gate}: a weight in (0, 1] (1: every word of a pseudo-caption counts fully)")
    if cfg.gate != 1 and not cfg.world:
        raise ValueError("--gate weighs the words of pseudo-captions: give --world too")
    if cfg.world and not cfg.coco:
        raise ValueError("--world needs --coco, the COCO photos folder its pseudo-captions name")
    unknown = [c for c in cfg.hold_out if c not in CLASS_WORDS]
    if unknown:
        raise ValueError(f"--hold-out: {', '.join(unknown)}: not a COCO class a caption word names "
                         f"(known: {', '.join(sorted(CLASS_WORDS))})")


@dataclass
class Run:
    """One training run's state, built by `_prepare` and `_build`; `train` loops over epochs with it."""
    cfg: TrainConfig
    device: torch.device
    data: object = None
    train_paths: list = field(default_factory=list)
    dev_paths: list = field(default_factory=list)
    cache: FeatureCache | None = None
    vocab: Vocabulary | None = None
    model: torch.nn.Module | None = None
    hparams: dict = field(default_factory=dict)
    resumed: checkpoints.LoadedModel | None = None
    pseudo: PseudoPairs | None = None   # --world: the COCO pseudo-pairs in training


def _prepare(cfg: TrainConfig, log) -> Run:
    """The splits (the dev photos scored each epoch stand in for "dev") and their cached features."""
    run = Run(cfg, torch.device(cfg.device))
    os.makedirs(cfg.out, exist_ok=True)
    run.data = load_dataset(cfg.data)
    run.train_paths, run.dev_paths = run.data.split("train"), scored_dev_photos(run.data, cfg)
    run.data.splits["dev"] = run.dev_paths
    if cfg.world:
        run.pseudo = pseudo_pairs(cfg.world, cfg.coco)
        run.data.captions.update(run.pseudo.captions)
        run.train_paths = run.train_paths + sorted(run.pseudo.captions)
    run.cache = FeatureCache(cfg.cache)
    if run.cache.missing(run.train_paths + run.dev_paths):
        run.cache.build(run.train_paths + run.dev_paths, VisionStack(run.device), log=log)
    return run


def _build(run: Run, log) -> None:
    """The vocabulary and model: resumed from last.safetensors, or new (optionally warm-started)."""
    cfg, device = run.cfg, run.device
    last_path = os.path.join(cfg.out, "last.safetensors")
    if cfg.resume and os.path.exists(last_path):
        run.resumed = checkpoints.load(last_path, device)
        held = tuple(run.resumed.meta.get("training", {}).get("config", {}).get("hold_out", ()))
        if held != cfg.hold_out:   # other training captions: resuming would mix two protocols in one run
            raise ValueError(f"{last_path} was trained holding out {', '.join(held) or 'nothing'}, not "
                             f"{', '.join(cfg.hold_out) or 'nothing'}: give the same --hold-out, or another --out")
        run.vocab, run.model, run.hparams = run.resumed.vocab, run.resumed.model, run.resumed.meta["hparams"]
        return
    run.vocab = run.pseudo.vocab if run.pseudo else \
        Vocabulary.build((c for p in run.train_paths for c in run.data.captions[p]), cfg.min_freq)
    cls_config = REGISTRY[cfg.model][1]
    run.hparams = {**cls_config, **cfg.hparams, "vocab_size": len(run.vocab)}
    table_probe = run.cache.load(run.train_paths[0])
    cls = REGISTRY[cfg.model][0]
    x, _ = model_inputs([table_probe], cls.attends_to, labels=cls.reads_labels)
    run.hparams["feature_dim"] = x.shape[-1]
    run.model = build_model(cfg.model, **run.hparams).to(device)
    if cfg.init_from:
        init = checkpoints.load(cfg.init_from, device)
        state = init.model.state_dict()
        if init.vocab.words != run.vocab.words:
            if not run.pseudo:
                raise ValueError(f"{cfg.init_from}: its vocabulary differs from this data's; cannot warm-start")
            state = remap_vocabulary(state, init.vocab, run.vocab, run.model.state_dict())
            log(f"warm start: {sum(w in init.vocab.index for w in run.vocab.words)} of {len(run.vocab)} words "
                f"keep {cfg.init_from}'s rows, the rest start fresh")
        warm_start(run.model, init.model, log, state)
        log(f"warm start from {cfg.init_from}")
    if cls.reads_labels:
        run.model.label_words.copy_(label_words(run.vocab))


def held_out(caption: str, classes: tuple[str, ...]) -> bool:
    """Whether a caption names one of `classes` (Hendricks et al.'s novel-object protocol drops it)."""
    return bool(classes) and not named(caption).isdisjoint(classes)


def warm_start(model, init, log, state: dict | None = None) -> None:
    """`init`'s weights (or `state`, taken from it) into `model`: every weight, except where `model`
    extends `init`'s kind with parts of its own (`model.added`, e.g. updown-copy's gate), which start
    fresh; anything else missing or left over is an error, never a half-loaded model."""
    try:
        missing, unexpected = model.load_state_dict(init.state_dict() if state is None else state, strict=False)
    except RuntimeError as err:   # a weight of another shape
        raise ValueError(f"cannot warm-start {type(model).__name__} from {type(init).__name__}: "
                         f"{str(err).splitlines()[-1].strip()}") from None
    fresh = [k for k in missing if k.split(".")[0] in model.added]
    if unexpected or len(fresh) != len(missing):
        raise ValueError(f"cannot warm-start {type(model).__name__} from {type(init).__name__}: "
                         f"missing {sorted(set(missing) - set(fresh))}, unexpected {sorted(unexpected)}")
    if fresh:
        log(f"warm start: {', '.join(fresh)} start fresh ({type(model).__name__}'s own)")


def remap_vocabulary(state: dict, old: Vocabulary, new: Vocabulary, fresh: dict) -> dict:
    """`state`, whose word-indexed weights (embedding, output layer, label words) run over `old`'s
    words, re-indexed over `new`'s: a word both know keeps its trained rows, a new word keeps its
    row of `fresh` (the new model's own initialisation). Any other change of shape is an error."""
    kept = [i for i, w in enumerate(new.words) if w in old.index]
    new_rows, old_rows = torch.tensor(kept), torch.tensor([old.index[new.words[i]] for i in kept])
    out = {}
    for name, value in state.items():
        target = fresh.get(name)
        if target is None or value.shape == target.shape:
            out[name] = value
            continue
        dims = [d for d in range(value.dim()) if value.shape[d] == len(old) and target.shape[d] == len(new)]
        if len(dims) != 1 or value.dim() != target.dim() or any(
                value.shape[d] != target.shape[d] for d in range(value.dim()) if d != dims[0]):
            raise ValueError(f"cannot warm-start: {name} is {tuple(value.shape)} there and {tuple(target.shape)} "
                             "here, not a change of vocabulary")
        d = dims[0]
        out[name] = target.clone().index_copy_(d, new_rows.to(target.device),
                                               value.index_select(d, old_rows.to(value.device)).to(target.dtype))
    return out


def label_words(vocab: Vocabulary) -> torch.Tensor:
    """(COCO classes, vocabulary) 0/1: the words that name each detector class (the grounding
    synonyms and their plurals, guide.CLASS_WORDS), which updown-copy may copy from a region."""
    table = torch.zeros(len(COCO_LABELS), len(vocab))
    for c, label in enumerate(COCO_LABELS):
        for word in CLASS_WORDS.get(label, ()):
            if word in vocab.index:
                table[c, vocab.index[word]] = 1.0
    return table


def _optimizer(run: Run, log) -> tuple[torch.optim.Optimizer, dict]:
    """Adam and the progress record, both restored when resuming."""
    cfg = run.cfg
    opt = torch.optim.Adam(run.model.parameters(), lr=cfg.lr)
    progress = {"epoch": 0, "best": -1.0, "bad_epochs": 0, "lr": cfg.lr, "batches": 0}
    if run.resumed is not None:
        progress.update(run.resumed.meta.get("progress", {}))
        optim_path = os.path.join(cfg.out, "last.optim.pt")
        if os.path.exists(optim_path):
            opt.load_state_dict(torch.load(optim_path, map_location=run.device, weights_only=True))
        log(f"resumed after epoch {progress['epoch']} (best dev CIDEr {progress['best']})")
    for group in opt.param_groups:
        group["lr"] = progress["lr"]
    return opt, progress


def _train_epoch(run: Run, epoch: int, encoded, table, targets, reward, opt, progress,
                 weights=None) -> tuple[dict, int, int]:
    """One pass over the training images; returns (summed batch logs, captions seen, batches)."""
    cfg, model, device = run.cfg, run.model, run.device
    model.train()
    batches = length_buckets(run.train_paths, encoded, cfg.batch_images, random.Random(cfg.seed + epoch))
    start, n_caps, sums = time.time(), 0, {}
    bar = tqdm(batches, desc=f"epoch {epoch}", unit="batch", mininterval=10)
    for paths in bar:
        feats, mask = table.batch(paths, device)
        if reward is not None:
            loss, logs = scst_loss(model, feats, mask, paths, run.vocab, reward, cfg.scst_samples, cfg.max_words)
            n_caps += len(paths) * cfg.scst_samples
        else:
            tokens, image_index, token_weights = make_batch(paths, encoded, device, weights)
            supervised = targets and targets.batch(paths, tokens, image_index, feats.shape[1])
            loss, logs = model.loss(feats, mask, tokens, image_index, supervised, token_weights)
            n_caps += len(tokens)
        if progress["batches"] < cfg.warmup:
            for group in opt.param_groups:
                group["lr"] = progress["lr"] * (progress["batches"] + 1) / cfg.warmup
        progress["batches"] += 1
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        opt.step()
        for k, v in logs.items():
            sums[k] = sums.get(k, 0.0) + v
        bar.set_postfix(loss=f"{loss.item():.3f}", caps_s=f"{n_caps / (time.time() - start):.0f}")
    return sums, n_caps, len(batches)


def _end_epoch(run: Run, epoch: int, record: dict, metrics: dict, opt, progress, log) -> None:
    """Log the epoch, keep the best weights (or decay the learning rate), save the resumable state."""
    cfg = run.cfg
    with open(os.path.join(cfg.out, "log.jsonl"), "a") as f:
        f.write(json.dumps(record) + "\n")
    log(json.dumps(record))
    improved = metrics["CIDEr"] > progress["best"]
    progress.update(epoch=epoch, bad_epochs=0 if improved else progress["bad_epochs"] + 1)
    data = os.path.abspath(cfg.data)
    if run.pseudo:
        data = (f"{os.path.basename(data)} + {len(run.pseudo.captions):,} COCO photos with pseudo-captions "
                "from COCO and Flickr30k caption text")
    meta = {"training": {"data": data, "epochs": epoch, "config": {**cfg.__dict__}},
            "dev_metrics": metrics, "dev_settings": {"beam": cfg.dev_beam},
            "dev_split": cfg.dev_split, "chosen_on": {"epoch": f"{cfg.dev_split} ({len(run.dev_paths)} photos)"}}
    if improved:
        progress["best"] = metrics["CIDEr"]
        checkpoints.save(os.path.join(cfg.out, "best.safetensors"), run.model, run.vocab, cfg.model, cfg.model,
                         run.hparams, {**meta, "progress": dict(progress)})
    else:
        progress["lr"] *= cfg.lr_decay
        for group in opt.param_groups:
            group["lr"] = progress["lr"]
    checkpoints.save(os.path.join(cfg.out, "last.safetensors"), run.model, run.vocab, cfg.model, cfg.model,
                     run.hparams, {**meta, "progress": dict(progress)}, half=False)
    if cfg.keep_epochs:
        checkpoints.save(os.path.join(cfg.out, f"epoch-{epoch}.safetensors"), run.model, run.vocab, cfg.model,
                         cfg.model, run.hparams, {**meta, "progress": dict(progress)})
    torch.save(opt.state_dict(), os.path.join(cfg.out, "last.optim.pt"))


def train(cfg: TrainConfig, log=print) -> dict:
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    check_config(cfg)
    run = _prepare(cfg, log)
    _build(run, log)
    vocab, model, train_paths = run.vocab, run.model, run.train_paths
    encoded = {p: [[vocab.start] + vocab.encode(c)[: cfg.max_words] + [vocab.end] for c in run.data.captions[p]
                   if not held_out(c, cfg.hold_out)] for p in train_paths}
    if cfg.hold_out:
        dropped = sum(len(run.data.captions[p]) - len(encoded[p]) for p in train_paths)
        run.train_paths = train_paths = [p for p in train_paths if encoded[p]]
        log(f"held out {', '.join(cfg.hold_out)}: {dropped} training captions that name them dropped "
            f"(their words stay in the vocabulary); {len(train_paths)} photos keep a caption")
    log(f"{cfg.model}: vocabulary {len(vocab)}, {len(train_paths)} train images, {len(run.dev_paths)} dev images, "
        f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters")
    table = FeatureTable(train_paths, run.cache, model.attends_to, labels=model.reads_labels)
    targets = GroundingTargets(train_paths, run.cache, model.attends_to, vocab, cfg.ground_weight) \
        if cfg.ground_weight > 0 else None
    reward = CiderReward({p: run.data.captions[p] for p in train_paths}) if cfg.scst else None
    weights = None if not run.pseudo or cfg.gate == 1.0 else {
        p: [gate_weights(tokenize(c)[: cfg.max_words], run.pseudo.labels[p], cfg.gate) + [cfg.gate]
            for c in run.data.captions[p]] for p in run.pseudo.captions}
    opt, progress = _optimizer(run, log)
    dev_settings = DecodeSettings(strategy="beam", beam_size=cfg.dev_beam, max_len=cfg.max_words)
    while progress["epoch"] < cfg.epochs and progress["bad_epochs"] < cfg.patience:
        epoch = progress["epoch"] + 1
        start = time.time()
        sums, n_caps, n_batches = _train_epoch(run, epoch, encoded, table, targets, reward, opt, progress, weights)
        train_seconds = time.time() - start
        lm = checkpoints.LoadedModel(model, vocab, {"name": cfg.model})
        metrics, _ = evaluate_split(lm, run.data, "dev", run.cache, dev_settings, device=run.device)
        record = {"epoch": epoch, **{k: round(v / n_batches, 4) for k, v in sums.items()},
                  "captions_per_s": round(n_caps / train_seconds, 1), "train_s": round(train_seconds, 1),
                  "lr": progress["lr"], "dev": metrics}
        _end_epoch(run, epoch, record, metrics, opt, progress, log)
    return progress
