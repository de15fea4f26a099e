"""`evaluate --questions FILE.json`: a question answering model's accuracy on a split's questions
generated from captions, one record per photo (its questions answered; with --dependence, how much
each answer depended on the photo, and what the blind model says; with --explain, every method's
map of each answer scored as caption words are, and the verdict on which map to trust), reduced by
`reduce`. It runs on any engine (local, Ray, `--shard` then `merge`) and resumes from `--out`, as
the other dataset commands do."""
from __future__ import annotations

import functools
import os

from . import options

NAME = "evaluate-questions"
CHUNK = 16   # photos answered together


def open_worker(opts: dict):
    """Once per worker: the models, the questions and the feature cache; returns items -> records."""
    from ..analysis.answers import answer_all, answer_dependence, answer_grounding, answer_hypotheses, looked_or_guessed
    from ..analysis.language_prior import References
    from ..analysis.explain_eval import photo_record, rounded
    from ..data import questions
    from ..data.cache import FeatureCache
    from ..data.datasets import load_dataset
    from ..engine.images import photo_size
    from ..engine.pipeline import Captioner
    captioner = Captioner(opts["device"], checkpoint_dir=opts["checkpoints"])
    loaded = captioner.model(opts["model_arg"])
    blind = captioner.model(opts["blind"]) if opts["blind"] and opts["dependence"] else None   # read beside dependence
    by_photo: dict[str, list] = {}
    for q in questions.read(opts["questions"], opts["data"])[opts["split"]]:
        by_photo.setdefault(q.photo, []).append(q)
    cache, data, explain = FeatureCache(opts["cache"]), load_dataset(opts["data"]), opts["explain"]
    references = References.of(data) if opts["dependence"] else None

    def explained(item: dict, answers: list[dict]) -> dict:
        """Every method's map of each answer the model gave, scored as caption words are."""
        vocab = loaded.vocab
        asked = [(a["question"], [vocab.index[a["said"]], vocab.end]) for a in answers]
        return rounded(photo_record(captioner, opts["model_arg"], data, item["id"], item["index"],
                                    tuple(explain["used"]), cache.regions(item["id"]), "answers", True,
                                    item["index"] < explain["sanity_photos"], tuple(explain["sanity_methods"]),
                                    tuple(explain["imputers"]), asked=asked))

    def records(items: list[dict]) -> list[dict]:
        paths = [it["id"] for it in items]
        cache.build(paths, captioner.vision, log=lambda *a: None)
        asked = [q for p in paths for q in by_photo[p]]
        hyps = answer_hypotheses(loaded, asked, cache, captioner.device)
        said = [loaded.vocab.words[h.tokens[0]] for h in hyps]
        photo = {it["id"]: (cache.regions(it["id"]), photo_size(it["id"]), it["index"]) for it in items}   # read once
        columns = {"said": said, "grounding": [answer_grounding(loaded, q, h, *photo[q.photo]) for q, h in zip(asked, hyps)]}
        if blind is not None:
            columns["blind"] = answer_all(blind, asked, cache, captioner.device)
        if opts["dependence"]:
            columns["dependence"] = answer_dependence(captioner, opts["model_arg"], asked, said)
            columns["said_of_others"] = looked_or_guessed(captioner, opts["model_arg"], asked, said, references)
        rows = iter([{"type": q.type, "question": q.question, "answer": q.answer, "support": q.support,
                      **{k: v[j] for k, v in columns.items()}} for j, q in enumerate(asked)])
        out = [{"index": it["index"], "id": it["id"], "answers": [next(rows) for _ in by_photo[it["id"]]]}
               for it in items]
        for it, rec in zip(items, out):
            if explain and it["index"] < explain["photos_asked"]:
                rec["explain"] = explained(it, rec["answers"])
        return out
    return records


def job(args):
    """The split's photos that have questions, as a batch job; the commonest training answer per
    type (the guessing baseline) goes in the fingerprint, so `merge` needs no questions file."""
    from ..analysis.answers import commonest_answers
    from ..analysis.explain_eval import explain_plan, fingerprint
    from ..batch import Job
    from ..batch.records import file_digest
    from ..data import questions
    from ..data.datasets import load_dataset
    sets = questions.read(args.questions, args.data)
    split = "dev-report" if args.split == "dev" else args.split
    for needed in (split, "train"):   # train: the commonest answers, the guessing baseline
        if needed not in sets:
            raise ValueError(f"{args.questions} has no split {needed!r}; it has {', '.join(sets) or 'none'}")
    captioner = options.captioner(args)
    loaded = captioner.model(args.model)
    if not loaded.model.answers:
        raise ValueError(f"{loaded.name} captions; --questions is for a question answering model (vqa-*)")
    blind = captioner.model(args.blind) if args.blind else None
    photos = list(dict.fromkeys(q.photo for q in sets[split]))
    data, explain = load_dataset(args.data), None
    methods = options.methods(args.explain)
    if methods:   # the answers explained and scored as caption words are (the trust verdict included)
        used, skipped, sanity_methods = explain_plan(captioner, args.model, methods)
        if skipped:
            raise ValueError(f"{loaded.name} has no {', '.join(skipped)} maps here (it has: {', '.join(used)})")
        imputers = options.imputers(args.imputers)
        explain = {"used": list(used), "sanity_methods": list(sanity_methods), "imputers": list(imputers),
                   "photos_asked": min(args.explain_photos, len(photos)) if args.explain_photos else len(photos),
                   "sanity_photos": args.explain_sanity,
                   "settings": fingerprint(captioner, args.model, split, used, imputers, "answers", True,
                                           args.explain_sanity, data, photos)}
    settings = {**options.model_identity(loaded), "data_digest": data.digest(),
                "questions": file_digest(args.questions), "split": split, "dependence": args.dependence,
                "blind": None if blind is None else options.model_identity(blind),
                "commonest": commonest_answers(sets["train"]), "explain": explain,
                "grounding": "answers naming a COCO class, against the detector's boxes of it"}
    opts = {"device": args.device, "checkpoints": args.checkpoints, "model_arg": args.model, "blind": args.blind,
            "questions": os.path.abspath(args.questions), "data": args.data, "split": split, "cache": args.cache,
            "dependence": args.dependence, "explain": explain}
    return Job(NAME, [{"index": i, "id": p} for i, p in enumerate(photos)], settings,
               functools.partial(open_worker, opts), CHUNK)


def reduce(fingerprint: dict, records: list[dict]) -> dict:
    """The report from the sorted records: accuracy per type beside the commonest answer, and with
    --dependence how many answers were guessed."""
    from ..analysis.answers import answer_grounding_block, dependence_block, qa_report
    from ..analysis.explain_reduce import explain_block
    from ..data.questions import Question
    done = [r for r in records if "error" not in r]
    rows = [(r["id"], a) for r in done for a in r["answers"]]
    if not rows:   # a table of None would read as a result: a run that answered nothing failed
        failed = [r for r in records if "error" in r]
        raise ValueError("no question was answered" + (f": all {len(failed)} photos failed, the first "
                                                       f"{failed[0]['id']}: {failed[0]['error']}" if failed else ""))
    items = [Question(photo, a["type"], a["question"], a["answer"], a["support"]) for photo, a in rows]
    said = [a["said"] for _, a in rows]
    result = qa_report(fingerprint["model"], said, items, fingerprint["commonest"], fingerprint["split"])
    grounded = [a["grounding"] for _, a in rows if a.get("grounding")]
    if grounded:   # the answers that name a COCO class, against the detector's boxes of it
        result["grounding"] = answer_grounding_block(grounded)
    if fingerprint["dependence"]:
        blind = [a["blind"] for _, a in rows] if fingerprint["blind"] else None
        result["looked_or_guessed"] = dependence_block([a["dependence"] for _, a in rows], said, items, blind,
                                                       [a.get("said_of_others") for _, a in rows])
        for row, (_, a) in zip(result["answers"], rows):
            row.update({k: a[k] for k in ("dependence", "said_of_others", "blind") if k in a})
    explain = fingerprint.get("explain")
    if explain:
        result["explain"] = explain_block([r["explain"] for r in done if "explain" in r], fingerprint["model"],
                                          tuple(explain["used"]), [], tuple(explain["imputers"]), "answers",
                                          explain["photos_asked"])
    result["failed_photos"] = [{"id": r["id"], "error": r["error"]} for r in records if "error" in r]
    return result


def text(result: dict) -> str:
    """Accuracy per type; with dependence, the guessed share and the first wrong answers guessed."""
    from ..analysis.language_prior import SHARE
    common = result["commonest_answer"]["accuracy"]
    lines = [f"{k:9s} {v['accuracy']}  {v['ci']}  ({v['questions']} questions; commonest answer "
             f"{common[k]['accuracy']})" for k, v in result["accuracy"].items()]
    g = result.get("grounding")
    if g:
        lines.append(f"answers naming a COCO class the detector found ({g['detected']}): the answer's map points at it "
                     f"{g['pointing']} {g['pointing_ci']} (centre pointer {g['pointing_centre_baseline']}), mass in its "
                     f"boxes {g['mass_in_box']} (uniform map {g['mass_uniform_baseline']})")
    block = result.get("looked_or_guessed")
    if block and block["guessed"] == "not measured":
        lines.append("guessed: not measured (the reference photos are --data's dev-select half)")
    elif block:
        lines.append(f"guessed {block['guessed']:.1%} of the answers (accuracy {block['accuracy_guessed']} guessed, "
                     f"{block['accuracy_seen']} looked)" + (f"; the blind model says the same for "
                                                            f"{block['same_as_blind']:.1%}" if "same_as_blind" in block else ""))
        worst = [r for r in result["answers"] if r["said"] != r["answer"] and r["said_of_others"] >= SHARE]
        lines.append(f"wrong and guessed ({len(worst)}), the first 10:")
        lines += [f"  {r['photo']}: {r['question']} -> {r['said']} (captions: {r['answer']}; said of "
                  f"{r['said_of_others']:.0%} of the other photos)" for r in worst[:10]]
    if result.get("explain"):
        from ..analysis.tables import explain_table
        lines.append(explain_table(result["explain"]))
    lines += [f"failed: {e['id']}: {e['error']}" for e in result["failed_photos"]]
    return "\n".join(lines)


def write(result: dict, out: str, fingerprint: dict | None = None) -> dict:
    return options.write_report(result, out, text)


def run(args) -> int:
    return options.print_reported(job(args), args, reduce, write, text)
