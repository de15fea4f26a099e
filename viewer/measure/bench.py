"""Benchmark: where the time goes from photo to trace, per model, on the same photos in one run.

Reports median and p95 end-to-end latency with a per-stage breakdown (preprocess, encoder,
detector, decode, trace), one overlay render at 1024x768, evaluate-style batch throughput from
cached features, the batched decoder's speed-up over stepping one beam at a time, and peak memory;
with `startup`, the seconds from starting the app to its first page. `hf:` models run through their
own image processor and ViT, and are also timed against their own `model.generate` (`hf_generate`).
"""
from __future__ import annotations

import os
import platform
import resource
import subprocess
import sys
import time
import urllib.request

import cv2
import numpy as np
import torch

from ..engine.decoding import DecodeSettings, decode
from ..engine.images import AttendsTo, load_photo, squash
from ..engine.pipeline import Captioner
from ..engine.render import render_step
from ..engine.trace import build_trace
from ..engine.vision import ImageFeatures


def _stats(seconds: list[float]) -> dict:
    ms = np.asarray(seconds) * 1000
    return {"median_ms": round(float(np.median(ms)), 1), "p95_ms": round(float(np.percentile(ms, 95)), 1)}


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def image_encoder(captioner: Captioner, lm):
    """(preprocess photo -> input batch, encode batch -> features): ours, or an hf: model's own."""
    own = getattr(lm, "image_encoder", None)
    if own is None:
        return (lambda photo: torch.from_numpy(squash(photo)[None])), captioner.vision.encoder
    return (lambda photo: own.preprocess([photo])), own.encode


def end_to_end(captioner: Captioner, model: str, photos, settings: DecodeSettings, repeats: int) -> dict:
    """Latency of one photo from pixels to trace, stage by stage (features not cached)."""
    lm = captioner.model(model)
    vision = captioner.vision
    preprocess, encode = image_encoder(captioner, lm)
    stages = {k: [] for k in ("preprocess", "encoder", "detector", "decode", "trace", "total")}
    for _ in range(repeats):
        for photo in photos:
            image, t_pre = _timed(lambda: preprocess(photo))
            grid, t_enc = _timed(lambda: encode(image).cpu())
            regions, t_det = (None, 0.0)
            if lm.attends_to == AttendsTo.REGIONS:
                regions, t_det = _timed(lambda: vision.detector.detect(photo.rgb))
            feats = [ImageFeatures(grid[0], regions)]

            def run_decode():
                x, mask = lm.batch(feats, captioner.device)
                return decode(lm.model, x, mask, settings, lm.vocab)
            hyps, t_dec = _timed(run_decode)
            _, t_tr = _timed(lambda: [build_trace(h, lm.vocab, model, lm.attends_to, photo.width, photo.height,
                                                  regions=regions) for h in hyps[0]])
            for key, t in zip(stages, (t_pre, t_enc, t_det, t_dec, t_tr, t_pre + t_enc + t_det + t_dec + t_tr)):
                stages[key].append(t)
    return {k: _stats(v) for k, v in stages.items()}


def render_latency(captioner: Captioner, model: str, photo, repeats: int = 20) -> dict:
    trace = captioner.caption([photo], model)[0][0]
    rgb = cv2.resize(photo.rgb, (1024, 768), interpolation=cv2.INTER_AREA)
    times = [_timed(lambda: render_step(rgb, trace, min(1, len(trace.steps) - 1)))[1] for _ in range(repeats)]
    return _stats(times)


def throughput(captioner: Captioner, model: str, photos, settings: DecodeSettings, n_images: int = 200,
               batch: int = 50) -> float:
    """Images per second for evaluate-style work: features cached, decoding batched."""
    lm = captioner.model(model)
    feats = captioner.inputs(lm, photos)
    items = [feats[i % len(feats)] for i in range(n_images)]
    start = time.perf_counter()
    for i in range(0, n_images, batch):
        x, mask = lm.batch(items[i:i + batch], captioner.device)
        decode(lm.model, x, mask, settings, lm.vocab)
    return round(n_images / (time.perf_counter() - start), 1)


@torch.no_grad()
def one_beam_at_a_time(lm, x, mask, beam: int, max_len: int) -> list[int]:
    """Reference beam search that calls the model once per beam per step (what batching avoids)."""
    state = lm.model.init_state(x, mask)
    beams = [(0.0, [lm.vocab.start], state)]
    done = []
    for _ in range(max_len):
        candidates = []
        for score, words, st in beams:
            step, new = lm.model.forward_step(st, torch.tensor([words[-1]], device=x.device))
            logp = torch.log_softmax(step.logits[0], -1)
            logp[[lm.vocab.pad, lm.vocab.start]] = float("-inf")
            top = logp.topk(beam)
            candidates += [(score + v, words + [i], new) for v, i in zip(top.values.tolist(), top.indices.tolist())]
        candidates.sort(key=lambda c: -c[0])
        beams = []
        for c in candidates:
            (done if c[1][-1] == lm.vocab.end else beams).append(c)
            if len(beams) == beam:
                break
        if len(done) >= beam or not beams:
            break
    return max(done or beams, key=lambda c: c[0])[1][1:]


def guided_cost(captioner: Captioner, model: str, photos, settings: DecodeSettings, repeats: int = 3) -> dict:
    """Decoding guided by the detector (constrained beam search over its top classes' words, never
    a class it does not see nor <unk>, no trigram twice) beside plain beam search, per photo, features ready (the issue's
    target: at most 1.5x)."""
    from ..analysis.guide import guidance, guided_settings
    from ..engine.constraints import avoid_tokens, constraint_tokens
    lm = captioner.model(model)
    plain, guided, constrained = [], [], 0
    for photo, feats in zip(photos, captioner.inputs(lm, photos)):
        x, mask = lm.batch([feats], captioner.device)
        regions = feats.regions if feats.regions is not None else captioner.vision.detector.detect(photo.rgb)
        words, unseen = guidance(lm.vocab, regions)
        constraints = [[constraint_tokens(lm.vocab, w) for w, _ in words]] if words else None
        constrained += constraints is not None
        avoid = [avoid_tokens(lm.vocab, unseen)]
        for _ in range(repeats):
            plain.append(_timed(lambda: decode(lm.model, x, mask, settings, lm.vocab))[1])
            guided.append(_timed(lambda: decode(lm.model, x, mask, guided_settings(settings), lm.vocab, constraints=constraints,
                                                avoid=avoid))[1])
    return {"plain": _stats(plain), "guided": _stats(guided), "photos_constrained": constrained,
            "ratio": round(float(np.median(guided) / np.median(plain)), 2)}


def batching_speedup(captioner: Captioner, model: str, photos, beam: int = 3, max_len: int = 20) -> dict:
    lm = captioner.model(model)
    x, mask = lm.batch(captioner.inputs(lm, photos), captioner.device)
    settings = DecodeSettings(strategy="beam", beam_size=beam, max_len=max_len)
    _, batched = _timed(lambda: decode(lm.model, x, mask, settings, lm.vocab))
    _, single = _timed(lambda: [one_beam_at_a_time(lm, x[i:i + 1], mask[i:i + 1], beam, max_len)
                                for i in range(len(x))])
    return {"batched_s": round(batched, 3), "one_beam_at_a_time_s": round(single, 3),
            "speedup": round(single / batched, 1)}


@torch.inference_mode()
def hf_generate(captioner: Captioner, model: str, photos, beam: int = 3, max_len: int = 20, repeats: int = 3) -> dict:
    """An hf: model through our decoding loop against its own `model.generate`, both from the pixels
    (ViT included), greedy and beam, on the same photos in the same run: seconds (median of
    `repeats`), tokens made, the ratio ours / generate, and whether greedy made the same tokens. Both
    keep keys and values, so a step costs one decoder token."""
    lm = captioner.model(model)
    pixels = lm.image_encoder.preprocess(photos)
    out = {}
    for name, k in (("greedy", 1), ("beam", beam)):
        settings = DecodeSettings(strategy="greedy" if k == 1 else "beam", beam_size=k, max_len=max_len)

        def ours():
            feats = lm.image_encoder.encode(pixels)
            return decode(lm.model, feats, torch.ones(feats.shape[:2], dtype=torch.bool, device=feats.device),
                          settings, lm.vocab)

        def theirs():   # the folder's generation_config overridden where it would search differently from ours
            return lm.model.hf.generate(pixel_values=pixels, do_sample=False, num_beams=k, max_new_tokens=max_len,
                                        length_penalty=0.0, no_repeat_ngram_size=0, repetition_penalty=1.0,
                                        min_length=0, early_stopping=True)

        hyps, gen = ours(), theirs()   # warm up both, then time
        t_ours = float(np.median([_timed(ours)[1] for _ in range(repeats)]))
        t_gen = float(np.median([_timed(theirs)[1] for _ in range(repeats)]))
        tokens = sum(len(hs[0].tokens) for hs in hyps)
        row = {"ours_s": round(t_ours, 4), "generate_s": round(t_gen, 4), "ratio": round(t_ours / t_gen, 2),
               "tokens": tokens, "ours_ms_per_token": round(1000 * t_ours / max(tokens, 1), 2)}
        if k == 1:
            row["same_tokens"] = all(hs[0].tokens == _until(g[1:].tolist(), lm.vocab.end)
                                     for hs, g in zip(hyps, gen))
        out[name] = row
    return out


def _until(ids: list[int], end: int) -> list[int]:
    return ids[: ids.index(end) + 1] if end in ids else ids


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def startup(checkpoint_dir: str | None = None, repeats: int = 3, timeout: float = 180) -> dict:
    """Seconds from starting the app (as `attention-viewer` does) to its first page, median of `repeats`
    starts, beside what a fresh interpreter takes to import gradio and torch alone: the app needs both
    (and its encoder and detector, which load in under a second) before it serves a page."""
    from ..app import free_port

    def seconds(argv, port=None):
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            while port is not None and proc.poll() is None and time.perf_counter() - start < timeout:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5):
                        return time.perf_counter() - start
                except OSError:
                    time.sleep(0.05)
            if port is None and proc.wait(timeout) == 0:
                return time.perf_counter() - start
        finally:
            proc.kill()
            _, err = proc.communicate()
        raise RuntimeError(f"{' '.join(argv)} failed: {err.strip()[-500:]}")

    app = ["-m", "viewer.cli", *(["--checkpoints", checkpoint_dir] if checkpoint_dir else [])]
    pages = [seconds([*app, "--port", str(port)], port) for port in (free_port() for _ in range(repeats))]
    return {"first_page_s": round(float(np.median(pages)), 2), "starts": len(pages),
            "import_gradio_s": round(seconds(["-c", "import gradio"]), 2),
            "import_torch_s": round(seconds(["-c", "import torch"]), 2)}


EXPLAIN_TARGETS = {"occlusion_caption_s": {"grid": 3.0, "regions": 8.0}, "gradcam_word_s": 0.3,
                   "superpixels_caption_s": {"grid": 4.0}}


def explain_timings(captioner: Captioner, model: str, photos, settings: DecodeSettings) -> dict:
    """Seconds per photo (median over `photos`, each on the model's own caption): occlusion, superpixel,
    KernelSHAP and fine-occlusion maps of the whole caption, Grad-CAM and relevancy (transformer) per
    word, deletion curves of one word (one method) under each imputer, beside the issues' targets
    (occlusion <= 3 s grid / 8 s regions; superpixels <= 4 s grid; Grad-CAM <= 0.3 s/word)."""
    from ..analysis.explain import REGISTRY, Pipeline, available_methods
    from ..analysis.pixel_faithfulness import deletion
    lm = captioner.model(model)
    methods = available_methods(captioner, model)
    if "occlusion" not in methods:
        return {"skipped": "no photo-space maps for this model"}
    whole = [m for m in ("occlusion", "superpixels", "kernelshap", "occlusion-fine") if m in methods]
    found = {k: [] for k in (*(f"{m}_caption_s" for m in whole), "gradcam_word_s", "relevancy_word_s",
                             "deletion_word_s", "deletion_road_word_s", "words")}
    for photo in photos:
        caption = captioner.caption([photo], model, settings)[0][0].caption
        pipe = Pipeline(captioner, photo, model, caption)
        pipe.base()
        for m in whole:
            found[f"{m}_caption_s"].append(_timed(lambda: REGISTRY[m].raw(pipe))[1])
        occ = REGISTRY["occlusion"].raw(pipe)
        found["gradcam_word_s"].append(_timed(lambda: REGISTRY["gradcam"].raw(pipe))[1] / pipe.steps)
        if "relevancy" in methods:
            found["relevancy_word_s"].append(_timed(lambda: REGISTRY["relevancy"].raw(pipe))[1] / pipe.steps)
        found["deletion_word_s"].append(_timed(lambda: deletion(pipe, {"occlusion": occ}, steps=[0]))[1])
        found["deletion_road_word_s"].append(_timed(lambda: deletion(pipe, {"occlusion": occ}, steps=[0],
                                                                     imputer="road"))[1])
        found["words"].append(pipe.steps)
    out = {k: round(float(np.median(v)), 3) for k, v in found.items() if v}
    kind = "regions" if lm.attends_to == AttendsTo.REGIONS else "grid"
    out["targets"] = {"occlusion_caption_s": EXPLAIN_TARGETS["occlusion_caption_s"][kind],
                      "gradcam_word_s": EXPLAIN_TARGETS["gradcam_word_s"]}
    if kind == "grid" and "superpixels" in whole:
        out["targets"]["superpixels_caption_s"] = EXPLAIN_TARGETS["superpixels_caption_s"]["grid"]
    out["meets"] = {k: bool(out[k] <= v) for k, v in out["targets"].items()}
    return out


QUESTIONS = ("what colour is the cup?", "where is the dog running?", "what is the man riding?",
             "how many people are sitting?")


def ask_latency(captioner: Captioner, model: str, photos, repeats: int) -> dict:
    """A question to its answer trace, the photo prepared (its features cached, as the app prepares a
    chosen photo before Ask), one question at a time as a person asks them."""
    captioner.features(photos, with_regions=True)   # prepared
    times = [_timed(lambda: captioner.ask([photo], model, [QUESTIONS[i % len(QUESTIONS)]]))[1]
             for _ in range(repeats) for i, photo in enumerate(photos)]
    return _stats(times)


def run(models: list[str], image_paths: list[str], device: str | None = None, repeats: int = 5,
        beam: int = 3, checkpoint_dir: str | None = None, explain: bool = False,
        answerers: list[str] | None = None) -> dict:
    """Every figure for each captioning model; for each of `answerers`, ask -> answer (`ask_latency`)."""
    captioner = Captioner(device) if checkpoint_dir is None else Captioner(device, checkpoint_dir=checkpoint_dir)
    photos = [load_photo(p) for p in image_paths]
    settings = DecodeSettings(strategy="beam", beam_size=beam)
    result = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                         f"torch {torch.__version__}, {torch.get_num_threads()} threads",
              "device": str(captioner.device), "images": [os.path.basename(p) for p in image_paths],
              "beam": beam, "models": {}}
    for model in models:
        lm = captioner.model(model)
        if lm.imported and lm.image_encoder is None:
            raise ValueError(f"{model} is an imported model with its own features; bench times this viewer's "
                             "encoder and detector pipeline (leave it out with --models)")
        captioner.caption(photos[:1], model, settings)   # warm up: load weights, first calls
        result["models"][model] = {
            "end_to_end": end_to_end(captioner, model, photos, settings, repeats),
            "render_1024x768": render_latency(captioner, model, photos[0]),
            "batch_images_per_s": throughput(captioner, model, photos, settings),
            "batching": batching_speedup(captioner, model, photos, beam),
            "guided": guided_cost(captioner, model, photos, settings),
        }
        if explain:
            result["models"][model]["explain"] = explain_timings(captioner, model, photos, settings)
        if lm.image_encoder is not None:
            result["models"][model]["generate"] = hf_generate(captioner, model, photos, beam)
    for model in answerers or []:
        captioner.ask(photos[:1], model, QUESTIONS[:1])   # warm up
        result["models"][model] = {"ask_prepared": ask_latency(captioner, model, photos, repeats)}
    result["peak_memory_mb"] = peak_memory_mb(captioner.device)
    result["trace_size"] = trace_size()
    return result


def trace_size(steps: int = 12, layers: int = 12, heads: int = 12, patches: int = 576) -> dict:
    """A BLIP-size trace (12 layers x 12 heads over 24 x 24 patches, + the class token: 577 tokens) of
    `steps` tokens: its per-head maps as Python floats (how traces kept them before), as float32 and
    as the float16 arrays kept now; and its JSON with and without the heads."""
    import json
    import sys
    from ..engine.images import AttendsTo
    from ..engine.trace import AttentionTrace, TraceStep
    rng = np.random.default_rng(0)
    maps = rng.dirichlet(np.ones(patches), (steps, layers, heads)).astype(np.float32)
    as_floats = (sys.getsizeof(0.5) + 8) * maps.size   # each a float object and its list slot
    trace = AttentionTrace("blip-size", AttendsTo.GRID, [
        TraceStep(f"w{t}", t, -1.0, maps[t, -1].mean(0), [], heads=maps[t].astype(np.float16)) for t in range(steps)],
        384, 384)
    obj = trace.to_json()
    with_heads = len(json.dumps(obj))
    for s in obj["steps"]:
        s.pop("heads")
    return {"steps": steps, "layers": layers, "heads": heads, "tokens": patches + 1,
            "heads_as_python_floats_mb": round(as_floats / 2 ** 20, 2), "heads_float32_mb": round(maps.nbytes / 2 ** 20, 2),
            "heads_float16_mb": round(maps.nbytes / 2 / 2 ** 20, 2), "trace_nbytes_mb": round(trace.nbytes / 2 ** 20, 2),
            "json_mb": round(with_heads / 2 ** 20, 2), "json_without_heads_mb": round(len(json.dumps(obj)) / 2 ** 20, 3)}


