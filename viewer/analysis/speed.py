"""The speed reports as Markdown: `bench`'s in-process timings and the browser bench's, with the
targets they are read against (the docs' speed tables are these, generated from the committed reports;
measure/ writes the reports, this reads them)."""
from __future__ import annotations


def inprocess_table(result: dict) -> str:
    """`bench`'s run as Markdown (docs/speed.md's in-process table)."""
    lines = [f"machine: {result['machine']}; device {result['device']}; beam {result['beam']}; "
             f"{len(result['images'])} photos; peak memory {result['peak_memory_mb']} MB", "",
             "| model | end to end median / p95 (ms) | preprocess | encoder | detector | decode | trace | "
             "render 1024x768 | batch images/s | batched vs one beam at a time | guided decode vs plain |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    captioners = {n: r for n, r in result["models"].items() if "end_to_end" in r}
    for name, r in captioners.items():
        e = r["end_to_end"]
        lines.append(f"| {name} | {e['total']['median_ms']} / {e['total']['p95_ms']} | "
                     + " | ".join(str(e[k]["median_ms"]) for k in ("preprocess", "encoder", "detector", "decode", "trace"))
                     + f" | {r['render_1024x768']['median_ms']} | {r['batch_images_per_s']} | "
                     f"{r['batching']['speedup']}x | " + (f"{r['guided']['ratio']}x |" if "guided" in r else "– |"))
    explained = {n: r["explain"] for n, r in result["models"].items() if "explain" in r}
    if explained:
        lines += ["", "explanations, seconds per photo (median; its own caption): targets occlusion <= 3 s (grid) / "
                      "8 s (regions), Grad-CAM <= 0.3 s per word",
                  "| model | words | occlusion, whole caption | Grad-CAM per word | relevancy per word | "
                  "deletion, one word | meets targets |", "|---|---|---|---|---|---|---|"]
        for name, e in explained.items():
            if "skipped" in e:
                lines.append(f"| {name} | {e['skipped']} | | | | | |")
                continue
            lines.append(f"| {name} | {e['words']} | {e['occlusion_caption_s']} | {e['gradcam_word_s']} | "
                         f"{e.get('relevancy_word_s', '-')} | {e['deletion_word_s']} | "
                         + ", ".join(f"{k.split('_')[0]} {'yes' if v else 'no'}" for k, v in e["meets"].items()) + " |")
    generated = {n: r["generate"] for n, r in result["models"].items() if "generate" in r}
    if generated:
        lines += ["", "hf: models, our decoding loop vs the model's own generate (same photos, pixels to tokens, "
                      "median seconds)", "| model | search | ours | generate | ours / generate | ms per token "
                      "(ours) | same tokens |", "|---|---|---|---|---|---|---|"]
        for name, g in generated.items():
            for search, r in g.items():
                lines.append(f"| {name} | {search} | {r['ours_s']} | {r['generate_s']} | {r['ratio']}x | "
                             f"{r['ours_ms_per_token']} | {r.get('same_tokens', '-')} |")
    asked = {n: r["ask_prepared"] for n, r in result["models"].items() if "ask_prepared" in r}
    if asked:
        lines += ["", "ask -> answer trace in-process, the photo prepared (target in the browser: 250 ms from the "
                      "click), median / p95 ms: " + "; ".join(f"{n} {a['median_ms']} / {a['p95_ms']}"
                                                            for n, a in asked.items())]
    if "trace_size" in result:
        t = result["trace_size"]
        lines += ["", f"a BLIP-size trace ({t['steps']} tokens x {t['layers']} layers x {t['heads']} heads x {t['tokens']} "
                      f"tokens): per-head maps as Python floats {t['heads_as_python_floats_mb']} MB, float32 "
                      f"{t['heads_float32_mb']} MB, float16 (kept now) {t['heads_float16_mb']} MB; JSON {t['json_mb']} MB "
                      f"with heads, {t['json_without_heads_mb']} MB without"]
    if "startup" in result:
        s = result["startup"]
        lines += ["", f"app start to first page: {s['first_page_s']} s (median of {s['starts']} starts); a fresh "
                      f"interpreter imports gradio in {s['import_gradio_s']} s and torch in {s['import_torch_s']} s"]
    return "\n".join(lines)


def _f(ms) -> str:
    return "-" if ms is None else f"{ms:.0f}"


# What a person should feel (p90, ms): a region model's caption runs the detector's regions through
# the decoder, so it has more time.
TARGETS = {"caption": 250, "caption_regions": 400, "step": 16, "restyle": 50, "ask": 250}


def targets_met(result: dict) -> str:
    """Which models meet each target, to the first overlay and to the exact frame."""
    def verdict(key, limit_of):
        parts = []
        for model, r in result["models"].items():
            s = r.get(key) or {}
            if s.get("n"):
                ok = s["p90_ms"] <= limit_of(model) and not s["timeout"] and not s["error"]
                parts.append(f"{model} {'yes' if ok else 'no'}")
        return ", ".join(parts) or "not measured"
    caption = lambda m: TARGETS["caption_regions" if m.startswith("updown") else "caption"]  # noqa: E731
    rows = [("caption p90 <= 250 ms (regions 400)", "caption_to_first_overlay", caption),
            ("the same to the exact frame", "caption_to_first_overlay_exact", caption),
            (f"step p90 <= {TARGETS['step']} ms", "stepping", lambda m: TARGETS["step"]),
            ("the same to the exact frame", "stepping_exact", lambda m: TARGETS["step"]),
            (f"restyle p90 <= {TARGETS['restyle']} ms", "restyle", lambda m: TARGETS["restyle"]),
            ("the same to the exact frame", "restyle_exact", lambda m: TARGETS["restyle"]),
            (f"Ask -> answer's map p90 <= {TARGETS['ask']} ms", "ask_to_map", lambda m: TARGETS["ask"])]
    return "Targets met: " + "; ".join(f"{name}: {verdict(key, limit)}" for name, key, limit in rows) + "."


def browser_table(result: dict) -> str:
    """The run as Markdown (the README's browser table is this, generated from the committed report)."""
    def cell(s):
        if not s or not s["n"]:
            return "-"
        extra = "".join(f", {s[k]} {k}" for k in ("unchanged", "timeout", "error") if s[k])
        return f"{s['p50_ms']:.0f} / {s['p90_ms']:.0f}{extra}"

    settings = result["settings"]
    lines = [f"{result['browser']}, {result['viewport'][0]}x{result['viewport'][1]}; "
             f"{len(settings['photos'])} photos a model ({', '.join(settings['photos'])}), "
             f"{settings['clicks']} clicks, {settings['arrows']} arrows, {settings['ticks']} play ticks each; "
             "p50 / p90 ms", "",
             "| model | first caption after start | caption -> first overlay | caption -> exact frame "
             "| of which server / trace in page, p50 | step (click, arrow) | step, exact frame | restyle "
             "| restyle, exact frame | hover: words re-tinted / frame | play: between overlays | Ask -> answer's map |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for model, r in result["models"].items():
        split = " / ".join(_f(r.get(k, {}).get("p50_ms")) for k in ("caption_server", "caption_trace_received"))
        lines.append(f"| {model} | {_f(r['warmup_ms'])} | {cell(r['caption_to_first_overlay'])} | "
                     f"{cell(r.get('caption_to_first_overlay_exact'))} | {split} | {cell(r['stepping'])} | "
                     f"{cell(r.get('stepping_exact'))} | {cell(r.get('restyle'))} | {cell(r.get('restyle_exact'))} | "
                     f"{cell(r.get('hover_tinted'))}, {cell(r.get('hover'))} | {cell(r.get('play_interval'))} | "
                     f"{cell(r.get('ask_to_map'))} |")
    if "two_browsers" in result:
        pair = result["two_browsers"]
        lines += ["", f"Two browsers ({pair['model']}): A's steps alone {cell(pair['a_alone'])} "
                      f"(exact {cell(pair.get('a_alone_exact'))}), while B captions {cell(pair['a_while_b_captions'])} "
                      f"(exact {cell(pair.get('a_while_b_captions_exact'))})."]
    explained = {m: r for m, r in result["models"].items() if "explain_to_first_view" in r}
    if explained:
        lines += ["", f"| model | Explain with {settings['explain']} -> first view | stepping its views |",
                  "|---|---|---|"]
        lines += [f"| {m} | {cell(r['explain_to_first_view'])} | {cell(r['explain_stepping'])} |"
                  for m, r in explained.items()]
    lines += ["", targets_met(result)]
    if result["errors"]:
        lines += ["", f"{len(result['errors'])} errors: " + "; ".join(result["errors"][:5])]
    lines += ["", "First overlay: the word's first overlay on screen (a grid word's 224-px preview, or its exact "
                  "frame); exact frame: the frame with render.py's pixels. First caption after start: each model's "
                  "first caption, model chosen and photo uploaded (not in the other figures). Server: the caption's "
                  "own time on the server; trace in page: from the click to the trace reaching the view. Play: the "
                  "timer ticks every 0.9 s."]
    return "\n".join(lines)
