"""The docs' and the model card's generated figures (which map to trust, naming, answers, speed),
from the committed reports.

`reports/explain/MODEL.json` is `python -m viewer.analysis.explain_eval`'s report of a model (the
reduce of its per-photo records, MODEL.jsonl beside it). `python -m viewer.analysis.tables` writes
every generated block (between `<!-- generated:NAME -->` and `<!-- /generated:NAME -->`) of
README.md, checkpoints/README.md and every page of docs/ from them; `--check` only says whether they
are current (tests/test_tables.py runs it). Nothing here is typed by hand.
"""
from __future__ import annotations

import glob
import json
import os
import re
import sys

from ..engine.checkpoints import listing_order
from ..paths import ROOT
from . import speed

REPORTS = os.path.join(ROOT, "reports", "explain")
FILES = (os.path.join(ROOT, "README.md"), os.path.join(ROOT, "checkpoints", "README.md"),
         *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))))   # docs/: one page a topic


def load_reports(folder: str = REPORTS) -> dict[str, dict]:
    found = {f[:-5]: json.load(open(os.path.join(folder, f))) for f in sorted(os.listdir(folder)) if f.endswith(".json")} \
        if os.path.isdir(folder) else {}
    return {m: found[m] for m in listing_order(dict.fromkeys(found))}


def _f(v, digits: int = 2) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def _ci(ci) -> str:
    return "" if not ci else f" [{ci[0]:.2f}, {ci[1]:.2f}]"


def _signed(d: dict) -> str:
    return "–" if d["difference"] is None else f"{d['difference']:+.2f}{_ci(d['ci'])}"


def coverage(reports: dict[str, dict]) -> str:
    """Which photos each report covers: a partial run says so."""
    if not reports:
        return "No which-map report is committed yet."
    parts = [f"`{m}` {r['photos']} of {r['split_photos']} {r['split']} photos ({r['object_words']} object words)"
             for m, r in reports.items()]
    partial = any(r["partial"] for r in reports.values())
    return ("Partial runs, " if partial else "Whole runs, ") + "; ".join(parts) + "."


def method_table(reports: dict[str, dict]) -> str:
    """Per model and method: MoRF under each imputer, ROAD, the blur gap, insertion under ROAD,
    pointing strict and with TorchRay's tolerance (beside the centre baseline), mass in box, sanity."""
    head = ("| model | method | MoRF, blur [95%] | MoRF, ROAD imputer [95%] | cell-level ROAD | blur gap | insertion (ROAD) "
            "| pointing | pointing ±15 px | ÷ centre | off-centre | mass in box | sanity ρ (constant maps) |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for model, r in reports.items():
        sanity = r.get("sanity") or {}
        last = sanity.get("all_randomised", {})
        flat = sanity.get("all_randomised_constant_maps", {})
        for m, b in r["by_method"].items():
            g, blur, road = b["grounding"], b["blur"], b["road"]
            san = f"{_f(last[m])} ({flat[m]} of {sanity['maps']})" if m in last else "not run"
            lines.append(f"| `{model}` | {m} | {_f(blur['auc_morf'])}{_ci(blur['auc_morf_ci'])} | "
                         f"{_f(road['auc_morf'])}{_ci(road['auc_morf_ci'])} | {_f(road['road'])} | {_f(blur['blur_gap'])} | "
                         f"{_f(road.get('auc_insertion'))} | {_f(g['pointing'])} | {_f(g.get('pointing_tolerant'))} | "
                         f"{_f(g.get('pointing_to_centre'))} | {_f(g['pointing_off_centre'])} | {_f(g['mass_in_box'])} | {san} |")
        g = next(iter(r["by_method"].values()))["grounding"]
        lines.append(f"| `{model}` | random order / baselines | {_f(r['random']['blur']['auc_morf'])} | "
                     f"{_f(r['random']['road']['auc_morf'])} | | | {_f(r['random']['road'].get('auc_insertion'))} | "
                     f"centre {_f(g['pointing_centre_baseline'])} | centre {_f(g.get('pointing_tolerant_centre_baseline'))} "
                     f"| 1 | top det. {_f(g['pointing_off_centre_top_detection_baseline'])} | "
                     f"uniform {_f(g['mass_uniform_baseline'])} | |")
    return "\n".join(lines)


def verdicts(reports: dict[str, dict]) -> str:
    """Per model: each method's paired MoRF difference from attention under each imputer, and what it means."""
    lines = []
    for model, r in reports.items():
        t = r["target"]
        parts = [f"{m} {', '.join(f'{imp} {_signed(d)}' for imp, d in t['per_method'][m].items())}: {t['verdict'][m]}"
                 for m in t["per_method"]]
        dep, words = r["visual_dependence"], "answers" if r.get("references") == "answers" else "object words"
        lines.append(f"- `{model}` ({r['photos']} photos, {r['object_words']} {words}; visual dependence "
                     f"{_f(dep.get('blur'))} nats blurred away, {_f(dep.get('road'))} removed): " + "; ".join(parts) + ".")
    return "\n".join(lines)


def summary(reports: dict[str, dict]) -> str:
    """The README's paragraph: what the table says, where methods beat attention and where they lose."""
    if not reports:
        return "No which-map report is committed yet."
    better, worse, split = [], [], []
    for model, r in reports.items():
        for m, v in r["target"]["verdict"].items():
            (better if "better" in v and "disagree" not in v else worse if "worse" in v and "disagree" not in v
             else split if "disagree" in v else []).append(f"{m} (`{model}`)")
    say = lambda xs: ", ".join(xs) if xs else "none"  # noqa: E731
    return (f"Which map to trust ({coverage(reports)}): every map is scored by hiding the photo in its order under "
            f"two imputers, the blur and ROAD's noisy linear imputation. Ranking what the word used better than "
            f"attention under both: {say(better)}. Worse than attention under both: {say(worse)}. The imputers "
            f"disagree: {say(split)}. The rest cannot be told from attention on these photos. The model card's "
            f"\"Which map to trust\" has every figure, generated from `reports/explain/`.")


def sun_table(reports: dict[str, dict]) -> str:
    """Sun et al.'s ablation per model and method, as published (the model's own caption, the
    unablated decode as baseline): the share of object words gone and their log-prob drop."""
    measured = {m: r["sun_ablation"] for m, r in reports.items() if r.get("sun_ablation")}
    if not measured:
        return ("Not measured in the committed records yet. (Figures shown here before were withdrawn: they read "
                "the first reference caption's words instead of the model's own caption, with no unablated "
                "decode as the baseline, so \"gone\" was the same under every map and the random order for 46 of "
                "sat-soft's 52 words.)")
    lines = ["| model | " + " | ".join(["photos (object words)", "method", "object words gone [95%]",
                                        "log-prob drop [95%]"]) + " |", "|---|---|---|---|---|"]
    for model, b in measured.items():
        for m, v in b["by_method"].items():
            lines.append(f"| `{model}` | {b['photos']} ({b['object_words']}) | {m} | {_f(v['gone'])}{_ci(v['gone_ci'])} "
                         f"| {_f(v['drop'])}{_ci(v['drop_ci'])} |")
    return "\n".join(lines)


def explain_table(block: dict) -> str:
    """A compact text table of an explain block, for evaluate without --json: per method and imputer."""
    lines = [f"explain ({block['object_words']} object words on {block['photos_with_object_words']} photos; nats)"]
    for imp in block["imputers"]:
        gap = "road" if imp == "road" else f"{imp}_gap"
        keys = ("auc_morf", "auc_lerf", gap, "auc_insertion")
        rand = block["random"][imp]
        lines.append(f"  imputer {imp}: random MoRF {rand['auc_morf']}, insertion {rand.get('auc_insertion')}")
        lines.append("  method          " + "  ".join(f"{k:>14s}" for k in keys))
        for m, b in block["by_method"].items():
            lines.append(f"  {m:15s} " + "  ".join(f"{str(b[imp].get(k)):>14s}" for k in keys))
    lines.append("  method          pointing  tolerant  centre  centre_tol  mass_in_box  off_centre")
    for m, b in block["by_method"].items():
        g = b["grounding"]
        lines.append(f"  {m:15s} {g['pointing']}  {g.get('pointing_tolerant')}  {g['pointing_centre_baseline']}  "
                     f"{g.get('pointing_tolerant_centre_baseline')}  {g['mass_in_box']}  {g['pointing_off_centre']}")
    for m, v in block["target"].get("verdict", {}).items():
        diffs = ", ".join(f"{imp} {d['difference']} {d['ci']}" for imp, d in block["target"]["per_method"][m].items())
        lines.append(f"  {m} - attention (MoRF): {diffs}: {v}")
    if block.get("sanity"):
        lines.append(f"  sanity (all layers randomised, Spearman): {block['sanity']['all_randomised']}; constant maps "
                     f"{block['sanity']['all_randomised_constant_maps']} of {block['sanity']['maps']}")
    return "\n".join(lines)


EVALUATIONS = os.path.join(ROOT, "reports", "eval")   # `evaluate --out reports/eval/MODEL`: report.json, captions.json


def load_evaluations(folder: str = EVALUATIONS) -> dict[str, dict]:
    found = {m: json.load(open(os.path.join(folder, m, "report.json"))) for m in sorted(os.listdir(folder))
             if os.path.exists(os.path.join(folder, m, "report.json"))} if os.path.isdir(folder) else {}
    return {m: found[m] for m in listing_order(dict.fromkeys(found))}


GUIDED = os.path.join(ROOT, "reports", "guide")   # `evaluate --guide detector --out reports/guide/MODEL-SPLIT-T`


def naming_table(_reports=None, evaluations: dict[str, dict] | None = None, guided: dict[str, dict] | None = None) -> str:
    """Per model: BLEU-4 and CIDEr beside object hallucination (CHAIR_i, CHAIR_s) and object recall,
    with their image-level 95% intervals, from the committed evaluations (reports/eval/), each
    followed by the same model guided by the detector on the same photos (reports/guide/); and why
    the object words nothing supports went wrong."""
    evaluations = load_evaluations() if evaluations is None else evaluations
    if not evaluations:
        return "No evaluation is committed yet."
    guided = load_evaluations(GUIDED) if guided is None else guided
    lines = ["| model | decoding | photos | BLEU-4 | CIDEr | CHAIR_i [95%] | CHAIR_s [95%] | object recall [95%] "
             "| unsupported object words: looked at another object / at nothing detected |",
             "|---|---|---|---|---|---|---|---|---|"]
    for model, r in evaluations.items():
        runs = [("beam 3", r)] + [(_guidance(g["guide"]), g) for g in sorted(
            (g for g in guided.values() if g["model"] == model and g["split"] == r["split"]),
            key=lambda g: (g["guide"].get("most", 1) > 0, bool(g["guide"].get("rule_out"))))]
        for decoding, g in runs:
            h, why = g["hallucination"], g["hallucination"].get("why")
            cause = "–" if why is None else f"{why['words']}: {why['naming failure']} / {why['nothing detected']}"
            lines.append(f"| `{model}` | {decoding} | {g['images']} {g['split']} | {g['BLEU-4']:.2f} | {g['CIDEr']:.2f} | "
                         f"{_f(h['chair_i'], 3)}{_ci(h['chair_i_ci'])} | {_f(h['chair_s'], 3)}{_ci(h['chair_s_ci'])} | "
                         f"{_f(h['object_recall'], 3)}{_ci(h['object_recall_ci'])} | {cause} |")
    return "\n".join(lines)


def _guidance(guide: dict) -> str:
    """How a guided evaluation was decoded, in words (evaluate --guide: analysis/guide.py)."""
    parts = [f"must name the detector's classes >= {guide['threshold']}"] if guide.get("most", 1) else []
    unseen = guide.get("rule_out") or []
    if unseen:
        parts.append(f"never an unseen {' or '.join(unseen)}, nor `<unk>`" if len(unseen) <= 3 else
                     f"never a class it does not see (any of {len(unseen)}), nor `<unk>`")
    if guide.get("no_repeat"):
        parts.append(f"no {guide['no_repeat']}-gram twice")
    return "beam 3, " + "; ".join(parts)


NOVEL = os.path.join(ROOT, "reports", "novel")   # `make novel`: evaluate --out reports/novel/RUN


def novel_table(_reports=None, evaluations: dict[str, dict] | None = None) -> str:
    """The novel-object protocol: per run trained without the captions naming the held-out classes,
    the F1 of mentioning each of them (photos where at least 2 references name it), beside BLEU-4."""
    evaluations = load_evaluations(NOVEL) if evaluations is None else evaluations
    if not evaluations:
        return "No novel-object run is committed yet (`make novel`)."
    first = next(iter(evaluations.values()))["hallucination"]["novel_objects"]["classes"]
    lines = ["| run | photos | BLEU-4 | CIDEr | mean F1 | " + " | ".join(f"{c} ({v['photos']})" for c, v in first.items()) + " |",
             "|---|---|---|---|---|" + "---|" * len(first)]
    for run, r in evaluations.items():
        novel = r["hallucination"]["novel_objects"]
        lines.append(f"| `{run}` | {r['images']} {r['split']} | {r['BLEU-4']:.2f} | {r['CIDEr']:.2f} | {novel['mean_f1']:.3f} | "
                     + " | ".join(f"{v['f1']:.2f}" for v in novel["classes"].values()) + " |")
    return "\n".join(lines)


EXAMPLES = os.path.join(ROOT, "reports", "examples.json")   # python -m viewer.analysis.examples


def examples_table(_reports=None, path: str = EXAMPLES) -> str:
    """The example photos' captions by every shipped model as the app starts (the report's
    `app_default`, beam 3) and guided by the detector, the object words the photo does not hold
    struck through; then, per model, how many name only what is there in each decoding."""
    if not os.path.exists(path):
        return "No example captions are committed yet (`python -m viewer.analysis.examples`)."
    from .grounding import word_class
    report = json.load(open(path))
    rows, default = report["captions"], report["app_default"]
    models = list(dict.fromkeys(r["model"] for r in rows))
    photos = list(dict.fromkeys(r["photo"] for r in rows))
    decodings = list(dict.fromkeys(r["decoding"] for r in rows))

    def marked(r: dict) -> str:
        return " ".join(f"~~{w}~~" if word_class(w) in r["not_there"] else f"`{w}`" if w.startswith("<") else w
                        for w in r["caption"].split())
    lines = []
    for decoding in dict.fromkeys([default, "guided"]) if "guided" in decodings else [default]:
        shown = {(r["photo"], r["model"]): r for r in rows if r["decoding"] == decoding}
        lines += ["| photo, " + ("as the app starts" if decoding == default else decoding) + " | "
                  + " | ".join(f"`{m}`" for m in models) + " |", "|---|" + "---|" * len(models)]
        lines += [f"| {p} | " + " | ".join(marked(shown[p, m]) for m in models) + " |" for p in photos] + [""]
    counts = []
    for m in models:
        ok = {d: sum(not r["not_there"] for r in rows if r["model"] == m and r["decoding"] == d) for d in decodings}
        counts.append(f"`{m}` " + ", ".join(f"{ok[d]} {d}" for d in decodings))
    return "\n".join(lines) + f"\nThe app starts {default}. Of {len(photos)} photos, named only what is there: " \
        + "; ".join(counts) + "."


ANSWERS = os.path.join(ROOT, "reports", "qa")   # `evaluate --questions ... --out reports/qa/MODEL`: report.json


def answers_table(_reports=None, folder: str = ANSWERS) -> str:
    """Per question answering model, and the commonest-answer baseline: accuracy per type and overall
    on the questions generated from dev-report's captions, with image-level 95% intervals; how many
    answers were guessed; the questions' hand check (reports/qa/)."""
    found = load_evaluations(folder)
    found = {m: found[m] for m in listing_order(dict.fromkeys(found))}
    if not found:
        return "No question answering evaluation is committed yet."
    types = ("object", "number", "colour", "location", "overall")
    first = next(iter(found.values()))
    lines = ["| model | " + " | ".join(f"{t} [95%]" for t in types) + " | guessed (answers) | points at the "
             "answer's object [95%] (centre pointer) |", "|---" * (len(types) + 3) + "|"]
    cell = lambda b: f"{100 * b['accuracy']:.1f}" + (f" [{100 * b['ci'][0]:.1f}, {100 * b['ci'][1]:.1f}]" if b["ci"] else "")  # noqa: E731
    for model, r in found.items():
        guessed, g = r.get("looked_or_guessed", {}).get("guessed"), r.get("grounding")
        points = "–" if not g else (f"{100 * g['pointing']:.1f} [{100 * g['pointing_ci'][0]:.1f}, "
                                    f"{100 * g['pointing_ci'][1]:.1f}] ({100 * g['pointing_centre_baseline']:.1f})")
        lines.append(f"| `{model}` | " + " | ".join(cell(r["accuracy"][t]) for t in types)
                     + f" | {f'{100 * guessed:.0f}%' if isinstance(guessed, float) else '–'} | {points} |")
    common = first["commonest_answer"]["accuracy"]
    lines.append("| commonest answer per type | " + " | ".join(f"{100 * common[t]['accuracy']:.1f}" for t in types) + " | – | – |")
    counts = ", ".join(f"{first['accuracy'][t]['questions']} {t}" for t in types[:-1])
    note = f"\n\n{first['accuracy']['overall']['questions']} questions generated from the captions of {first['split']} ({counts})."
    check = os.path.join(folder, "hand_check.json")
    if os.path.exists(check):
        last = json.load(open(check))["checks"][-1]
        note += (f" Checked by looking at 100 sampled questions: {last['ok']} of {last['of']} well-formed and "
                 "answerable from the photo (reports/qa/hand_check.json).")
    grounded = {m: r["grounding"] for m, r in found.items() if r.get("grounding")}
    if grounded:
        note += (" Points at the answer's object: for the answers that name a COCO class the detector finds ("
                 + ", ".join(f"{g['detected']} for `{m}`" for m, g in grounded.items()) + "), whether the peak of "
                 "the map the answer was read from lies in the detector's boxes of that class (proxy boxes, as for "
                 "captions); in brackets, always pointing at the centre. Label-blind, pointing at the detector's "
                 "top-scoring box scores " + ", ".join(f"{100 * g['pointing_top_detection_baseline']:.1f} for `{m}`"
                                                       for m, g in grounded.items())
                 + "; the maps' mass in the boxes: " + ", ".join(
                     f"{g['mass_in_box']:.2f} for `{m}` (a uniform map: {g['mass_uniform_baseline']:.2f})"
                     for m, g in grounded.items()) + ".")
    explained = {m: r["explain"] for m, r in found.items() if r.get("explain")}
    if explained:   # `evaluate --questions --explain`: the answers' maps scored as caption words are
        note += ("\n\nWhich map to trust for the answers (each answer forced with its question; deletion under "
                 "both imputers, as the captions' table):\n" + verdicts(explained))
    return "\n".join(lines) + note


SPEED = os.path.join(ROOT, "reports", "speed")   # `make speed`: inprocess, browser, load and engines .json


def _speed(name: str, what: str, command: str, render_report) -> str:
    path = os.path.join(SPEED, name)
    if not os.path.exists(path):
        return f"No {what} report is committed yet (`{command}`)."
    return render_report(json.load(open(path))) + f"\n\n(reports/speed/{name}, written by `{command}`.)"


def speed_table(_reports=None) -> str:
    """In-process timings: photo to trace per stage, explanations, ask, app start (reports/speed/inprocess.json)."""
    return _speed("inprocess.json", "in-process speed", "python -m viewer bench --ask --explain --startup --json",
                  speed.inprocess_table)


def browser_table(_reports=None) -> str:
    """What a person feels, in headless chromium (reports/speed/browser.json)."""
    return _speed("browser.json", "browser", "python -m viewer.measure.loadtest --browser --photos 6 --ask --pair",
                  speed.browser_table)


def engines_line(_reports=None) -> str:
    """Photos per second of a dataset command, local and on Ray (reports/speed/engines.json,
    `commands.bench.engine_bench`)."""
    def summary(r: dict) -> str:
        return (f"`{r['command']}` of `{r['model']}` on {r['photos']} {r['split']} photos, {r['cpus']} cores: local "
                f"{r['local']['photos_per_s']} photos/s ({r['local']['seconds']} s, torch's default threads), local "
                f"with 1 thread {r['local_1_thread']['photos_per_s']} photos/s ({r['local_1_thread']['seconds']} s), "
                f"`--engine ray --workers 1` {r['ray_1_worker']['photos_per_s']} photos/s "
                f"({r['ray_1_worker']['seconds']} s). Ray's start-up takes {r['ray_start_s']} s, and it adds "
                f"{r['ray_overhead_per_photo_s']} s a photo over the same 1-thread work (the actor's model load, "
                "batches through the object store, Ray's own processes).")
    return _speed("engines.json", "engines", "python -m viewer bench --engines --models sat-soft --photos 24", summary)


def load_line(_reports=None) -> str:
    """Concurrent sessions against one app (reports/speed/load.json, `measure.loadtest`)."""
    def summary(r: dict) -> str:
        return (f"{r['clients']} sessions at once, each uploading one of {r['photos']} photos and captioning it with "
                f"`{r['model']}` through Gradio's client: median {r['median_ms']} ms, p95 {r['p95_ms']} ms from "
                f"request to reply, all done in {r['wall_s']} s, {len(r['errors'])} errors.")
    return _speed("load.json", "load test", "python -m viewer.measure.loadtest --clients 20", summary)


WORLD = os.path.join(ROOT, "reports", "world", "choice.json")   # `make world-eval`


def world_table(_reports=None, path: str = WORLD) -> str:
    """The COCO choice part (photos with labels, no captions): per model and decoding, and for
    retrieval, proxy CHAIR and recall against the detector (analysis/world_eval.py), 95% intervals."""
    if not os.path.exists(path):
        return "No choice-part report is committed yet (`make world-eval`)."
    with open(path) as f:
        report = json.load(f)
    lines = [f"{report['photos']} COCO choice photos, beam {report['beam']}:", "",
             "| configuration | object mentions | proxy CHAIR_s | proxy CHAIR_i | recall of confident classes |",
             "|---|---|---|---|---|"]
    for name, r in report["configurations"].items():
        lines.append(f"| `{name}` | {r['mentions']} | {r['CHAIR_s']:.3f} {_ci(r['CHAIR_s_95'])} | "
                     f"{r['CHAIR_i']:.3f} {_ci(r['CHAIR_i_95'])} | {r['recall']:.3f} {_ci(r['recall_95'])} |")
    return "\n".join(lines)


BLOCKS = {"which-map-summary": summary, "which-map-coverage": coverage, "which-map-table": method_table,
          "which-map-verdicts": verdicts, "sun-ablation": sun_table, "naming-table": naming_table,
          "answers-table": answers_table, "speed-table": speed_table, "browser-table": browser_table,
          "engines-line": engines_line, "load-line": load_line, "novel-table": novel_table,
          "examples-table": examples_table, "world-table": world_table}


def render(text: str, reports: dict[str, dict]) -> str:
    """`text` with every generated block it holds written anew from `reports`."""
    def fill(match):
        name = match.group(1)
        return f"<!-- generated:{name} -->\n{BLOCKS[name](reports)}\n<!-- /generated:{name} -->"
    return re.sub(r"<!-- generated:([\w-]+) -->\n.*?\n?<!-- /generated:\1 -->", fill, text, flags=re.S)


def main(argv: list[str] | None = None) -> int:
    check = "--check" in (argv if argv is not None else sys.argv[1:])
    reports = load_reports()
    stale = []
    for path in FILES:
        text = open(path).read()
        new = render(text, reports)
        if new != text:
            stale.append(os.path.relpath(path, ROOT))
            if not check:
                open(path, "w").write(new)
    if check and stale:
        print(f"stale generated tables in {', '.join(stale)}: run python -m viewer.analysis.tables", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
