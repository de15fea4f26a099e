"""`ask`: ask a photo a question; a question answering model (vqa-*) answers with one word and
shows where it looked (the map it read the answer from)."""
from __future__ import annotations

import json

import numpy as np

from . import options

NAME = "ask"
BLIND = "vqa-blind"   # the default question-only model


def add_parser(sub) -> None:
    p = sub.add_parser(NAME, help="ask a photo a question (question answering models: vqa-*)")
    p.add_argument("image", help="the photo")
    p.add_argument("question", help='e.g. "what is the dog catching?"')
    p.add_argument("--model", default="vqa-regions", help="question answering model name or checkpoint path")
    p.add_argument("--blind", help=f"the question-only model whose answer goes beside (default {BLIND} when it "
                   "ships; '' for none)")
    p.add_argument("--json", action="store_true", help="the answer as a trace (the caption --json schema, with 'question')")
    p.set_defaults(func=run)


def where(trace) -> str:
    """Where the answer's map lies, in words: the regions (label, weight) or the peak cell."""
    att = trace.steps[0].attention
    if trace.attends_to == "regions":
        top = np.argsort(-att)[:3]
        return ", ".join(f"{trace.region_labels[i]} {att[i]:.0%}" for i in top)
    row, col = divmod(int(np.argmax(att)), trace.grid_side)
    return f"peak at cell row {row}, column {col} ({att.max():.0%} of the map)"


def blind_model(captioner, name: str | None) -> str | None:
    """The blind model to answer beside: the one named, which must load and answer questions (a name
    that is none is an error, never silence); unnamed, BLIND when it ships; '' none."""
    from ..engine.checkpoints import CheckpointError, available
    if name is None:
        return BLIND if BLIND in available(captioner.checkpoint_dir, task="answer") else None
    if not name:
        return None
    try:
        answers = captioner.model(name).model.answers
    except CheckpointError as err:
        raise ValueError(f"--blind: {err}") from None
    if not answers:
        raise ValueError(f"--blind: {name} captions; name a question answering model ({BLIND})")
    return name


def looked_or_guessed(captioner, photo, model: str, trace, blind: str | None) -> str:
    """The answer's visual dependence (the caption words' rule) and the blind model's answer beside it."""
    from ..analysis.explain import Pipeline
    from ..analysis.pixel_faithfulness import SEEN, seen_dependence
    pipe = Pipeline(captioner, photo, model, trace.token_ids, question=trace.question)
    d = float(seen_dependence(pipe)[0])
    line = f"{'looked' if d >= SEEN else 'guessed'}: its log-prob falls by {d:.2f} nats without the photo"
    if blind:
        line += f"; the blind model ({blind}, question only) says {captioner.ask([photo], blind, [trace.question])[0].words[0]}"
    return line


def run(args) -> int:
    from ..engine.images import load_photo
    captioner, photo = options.captioner(args), load_photo(args.image)
    blind = blind_model(captioner, args.blind)
    trace = captioner.ask([photo], args.model, [args.question])[0]
    if args.json:
        print(json.dumps(trace.to_json()))
        return 0
    step = trace.steps[0]
    others = ", ".join(f"{w} {p:.0%}" for w, p in step.alternatives[1:4])
    print(f"{args.question} -> {step.word} ({float(np.exp(step.logprob)):.0%}; then {others})")
    print(f"looked at: {where(trace)}")
    print(looked_or_guessed(captioner, photo, args.model, trace, blind))
    return 0
