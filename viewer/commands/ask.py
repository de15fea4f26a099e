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
    p.add_argument("--data", help="the Flickr8k folder whose dev-select photos decide 'guessed' (the model gives the "
                   "same answer to the same question of most of them); default ../shared/data/flickr8k when there")
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


def looked_or_guessed(captioner, photo, model: str, trace, blind: str | None, data: str | None) -> str:
    """Whether the answer came from the photo or from the question (language_prior.py: the same
    answer to the same question on most reference photos: guessed), the visual dependence beside it
    (a figure), and the blind model's answer."""
    import torch
    from ..analysis.explain import Pipeline
    from ..analysis.language_prior import SHARE, References, language_prior
    from ..analysis.pixel_faithfulness import seen_dependence
    from ..data.datasets import load_dataset
    from ..engine.pipeline import question_ids
    refs = References.of(load_dataset(data)) if data else None
    if refs is None:
        line = "looked or guessed: not measured (no reference photos: give --data, the Flickr8k folder)"
    else:
        lm = captioner.model(model)
        share = float(language_prior(lm, refs.inputs(captioner, lm), torch.tensor([trace.token_ids], device=captioner.device),
                                     prompt=question_ids(lm, [trace.question], captioner.device)).share[0, 0])
        said = round(share * len(refs.paths))
        line = ("guessed: the model would have said it of most photos" if share >= SHARE else "looked") + \
            f" (its answer to this question on {said} of {len(refs.paths)} other photos)"
    d = float(seen_dependence(Pipeline(captioner, photo, model, trace.token_ids, question=trace.question))[0])
    line += f"; its log-prob falls by {d:.2f} nats without the photo"
    if blind:
        line += f"; the blind model ({blind}, question only) says {captioner.ask([photo], blind, [trace.question])[0].words[0]}"
    return line


def reference_data(data: str | None) -> str | None:
    """--data, else the project's Flickr8k folder when it is there (None: the verdict is not measured)."""
    import os
    from ..paths import FLICKR8K
    return data or (FLICKR8K if os.path.isdir(FLICKR8K) else None)


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
    print(looked_or_guessed(captioner, photo, args.model, trace, blind, reference_data(args.data)))
    return 0
