"""Ask the photo in the app: the session's answer trace (the map it was read from, its dependence on
the photo, branching to another answer), the HTTP API, and a real browser."""
from __future__ import annotations

import math
import os

import numpy as np
import pytest

from viewer.app import session as S

from conftest import ASSETS
from test_app import _browser, _page_with_photo

QUESTION = "what colour is the cup?"


@pytest.fixture(scope="module")
def studio(captioner):
    return S.Studio(captioner)


def test_the_app_offers_a_model_that_looks_before_the_question_only_one():
    """With the shipped models, "Answered by" starts on vqa-regions, not on vqa-blind (alphabetically
    first, its map uniform: a student would read it as where the model looked)."""
    from conftest import ROOT
    from viewer.engine.pipeline import Captioner
    studio = S.Studio(Captioner("cpu", checkpoint_dir=os.path.join(ROOT, "checkpoints")))
    assert studio.models("answer") == ["vqa-regions", "vqa-blind"]


def test_the_answer_is_a_trace_with_the_map_it_was_read_from(studio, captioner):
    path = os.path.join(ASSETS, "coffee.jpg")
    ex = studio.ask(path, "vqa-regions", QUESTION)
    trace = ex.trace
    assert trace.question == QUESTION and len(trace.words) == 1 and trace.steps[1].word == "<end>"
    assert "vqa-regions" in studio.models("answer") and "vqa-regions" not in studio.models()
    direct = captioner.ask([ex.photo], "vqa-regions", [QUESTION])[0]      # the engine's own answer, map and all
    assert direct.words == trace.words and np.allclose(direct.steps[0].attention, trace.steps[0].attention)
    dependence = studio.visual_dependence(ex)                             # looked or guessed, as for caption words
    assert dependence is not None and len(dependence) == ex.n_steps and np.isfinite(dependence[0])
    other = trace.steps[0].alternatives[1][0]
    branched = studio.branch(ex, 0, other)                                # "what if it answered ..."
    assert branched.trace.words == [other] and branched.trace.question == QUESTION
    assert math.isclose(math.exp(branched.trace.steps[0].logprob), trace.steps[0].alternatives[1][1], rel_tol=1e-3)
    assert studio.ask(path, "vqa-regions", "what is on the table?").key != ex.key   # caches know the question


def test_the_api_answers_with_the_view_of_the_answer(server):
    from gradio_client import Client, handle_file
    url, _ = server
    client = Client(url, verbose=False)
    out = client.predict(handle_file(os.path.join(ASSETS, "coffee.jpg")), "vqa-regions", QUESTION,
                         *S.Style().inputs(), api_name="/ask_photo")
    assert "→" in out[1] and QUESTION in out[1]
    payload = out[3]
    assert payload["kind"] == "regions" and len(payload["tokens"]) == 2
    assert np.allclose(S.unpacked(payload["maps"]).sum(1), 1, atol=1e-4)
    with pytest.raises(Exception, match="Type a question"):
        client.predict(handle_file(os.path.join(ASSETS, "coffee.jpg")), "vqa-regions", "  ",
                       *S.Style().inputs(), api_name="/ask_photo")


def test_asking_in_the_browser_draws_the_answer(server):
    from playwright.sync_api import expect, sync_playwright
    url, _ = server
    with sync_playwright() as p:
        browser = _browser(p)
        page = _page_with_photo(browser, url)
        page.locator("#question textarea").fill(QUESTION)
        page.locator("#ask").click()
        expect(page.locator("#status")).to_contain_text("→", timeout=90_000)
        expect(page.locator("#panel .step-facts")).to_contain_text("at step 1")
        page.wait_for_function("() => { const c = document.querySelector('#view canvas');"
                               " return c && c.dataset.shown && c.dataset.shown.length > 0; }")
        # Compare: a caption word beside the answer to a question about it, both drawn in the page
        page.get_by_role("tab", name="Compare").click()
        page.get_by_text("Models and words").click()   # the settings are folded under the views
        page.locator("#cmp-mode").get_by_text("beside a question's answer").click()
        page.locator("#cmp-question textarea").fill("what is on the table?")
        page.locator("#cmp-run").click()
        expect(page.locator("#cmp-caption-1")).to_contain_text("what is on the table? →", timeout=90_000)
        expect(page.locator("#cmp-caption-1")).to_contain_text("vqa-regions")
        expect(page.locator("#cmp-caption-0")).not_to_contain_text("→")       # the caption, first
        assert page.locator("#cmp-caption-2").inner_text().strip() == ""   # two views: the third is left empty
        page.wait_for_function("() => [...document.querySelectorAll('[id^=cmp-view] canvas')]"
                               ".filter((c) => c.dataset.shown).length === 2")
        browser.close()


def test_ask_on_the_command_line(tiny_checkpoints):
    import json
    from test_cli import run
    photo = os.path.join(ASSETS, "coffee.jpg")
    code, out, err = run("--checkpoints", tiny_checkpoints, "ask", photo, QUESTION, "--model", "vqa-regions")
    assert code == 0, err
    assert f"{QUESTION} -> " in out and "looked at: " in out and "nats without the photo" in out
    code, out, err = run("--checkpoints", tiny_checkpoints, "ask", photo, QUESTION, "--model", "vqa-regions", "--json")
    trace = json.loads(out)
    assert code == 0 and trace["question"] == QUESTION and trace["steps"][-1]["word"] == "<end>"
    code, out, err = run("--checkpoints", tiny_checkpoints, "ask", photo, QUESTION, "--model", "updown")
    assert code == 2 and err.startswith("error: ") and "answers no question" in err and "Traceback" not in err


def test_answer_dependence_in_batches_is_the_caption_words_rule(captioner):
    """evaluate --dependence forces all of a photo's questions at once: the same figure as the
    explanation pipeline's seen_dependence of each answer alone."""
    from viewer.analysis.answers import answer_dependence
    from viewer.analysis.explain import Pipeline
    from viewer.analysis.pixel_faithfulness import seen_dependence
    from viewer.data.questions import Question
    from viewer.engine.images import load_photo
    path = os.path.join(ASSETS, "coffee.jpg")
    items = [Question(path, "colour", QUESTION, "white", 2), Question(path, "object", "what smiles in front of a flag?", "woman", 2)]
    said = [captioner.ask([load_photo(path)], "vqa-regions", [q.question])[0].words[0] for q in items]
    batched = answer_dependence(captioner, "vqa-regions", items, said)
    vocab = captioner.model("vqa-regions").vocab
    for q, s, d in zip(items, said, batched):
        alone = seen_dependence(Pipeline(captioner, load_photo(path), "vqa-regions", [vocab.index[s], vocab.end],
                                         question=q.question))[0]
        assert abs(d - alone) < 1e-3


def test_boxes_score_an_answer_map_and_refuse_the_wrong_kind_of_model(tmp_path, captioner):
    import json
    from viewer.analysis.user_boxes import BoxFileError, evaluate_user_boxes, load_box_file
    photo = os.path.join(ASSETS, "coffee.jpg")
    entry = {"question": QUESTION, "answer": "white", "boxes": {"white": [[100, 60, 500, 340]]}}
    path = tmp_path / "asked.json"
    path.write_text(json.dumps({photo: entry}))
    report = evaluate_user_boxes(captioner, "vqa-regions", str(path))
    g = report["grounding"]["attention"]
    assert report["boxed_words"] == 1 and report["per_photo"][0]["question"] == QUESTION
    assert g["pointing"] in (0.0, 1.0) and 0 <= g["mass_in_box"] <= 1 and g["mass_uniform_baseline"] is not None
    with pytest.raises(ValueError, match="a question in the boxes file, but updown captions"):
        evaluate_user_boxes(captioner, "updown", str(path))
    path.write_text(json.dumps({photo: {"question": QUESTION, "boxes": {"white": [1, 1, 5, 5]}}}))
    with pytest.raises(BoxFileError, match='missing "answer"'):
        load_box_file(str(path))


def test_triage_lists_the_wrong_and_the_guessed_answers(tiny_checkpoints, tiny_data, tmp_path):
    """triage --questions: every listed answer is wrong or guessed, wrong ones first, and the right
    answers seen on the photo are left out; the CSV and the page say so."""
    import csv
    import json
    from conftest import CAPTIONS, tiny_questions
    from test_cli import run
    from viewer.data import questions as qa
    dev = [os.path.join(tiny_data, "images", n) for n in CAPTIONS]
    items = tiny_questions(dev)
    assert items
    wrong = qa.Question(dev[0], "object", items[0].question, "no-such-answer", 2)   # no model says it
    path = str(tmp_path / "questions.json")
    qa.write(path, {"train": items, "dev-report": items + [wrong]}, tiny_data)
    out_dir = str(tmp_path / "triage")
    code, out, err = run("--checkpoints", tiny_checkpoints, "triage", "--model", "vqa-regions", "--data", tiny_data,
                         "--questions", path, "--out", out_dir, timeout=600)
    assert code == 0, err
    summary = json.loads(out)
    with open(os.path.join(out_dir, "results.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    assert summary["questions"] == len(items) + 1 and summary["listed"] == len(rows) >= 1
    right = [r["right"] == "True" for r in rows]
    assert right == sorted(right)                                  # the wrong ones first
    assert all(not ok or r["said_not_seen"] for ok, r in zip(right, rows))   # right ones only when guessed
    assert any(r["question"] == wrong.question and r["answer"] == "no-such-answer" for r in rows)
    page = open(os.path.join(out_dir, "report.html"), encoding="utf-8").read()
    assert "answers, worst answer" in page and wrong.question in page
    records = [json.loads(line) for line in open(os.path.join(out_dir, "records.jsonl"))]   # evaluate --questions' records
    assert records[0]["fingerprint"]["dependence"] and len(records) == 1 + len({q.photo for q in items + [wrong]})
    code, out, err = run("--checkpoints", tiny_checkpoints, "triage", "--model", "updown", "--data", tiny_data,
                         "--questions", path, "--out", out_dir)
    assert code == 2 and "question answering model" in err and "Traceback" not in err


def test_evaluate_questions_runs_on_the_batch_engines_and_resumes(tiny_checkpoints, tiny_data, cache_dir, tmp_path):
    """evaluate --questions: one record per photo; its report's accuracy is the share said right, the
    same whether run whole, resumed, or in two shards merged; a captioning model is refused."""
    import json
    from conftest import CAPTIONS, tiny_questions
    from test_cli import run
    from viewer.analysis.grounding import word_class
    from viewer.data import questions as qa
    photos = [os.path.join(tiny_data, "images", n) for n in CAPTIONS]
    items = tiny_questions(photos)
    path = str(tmp_path / "questions.json")
    qa.write(path, {"train": items, "dev-report": items}, tiny_data)
    common = ["--checkpoints", tiny_checkpoints, "evaluate", "--model", "vqa-regions", "--data", tiny_data,
              "--questions", path, "--cache", cache_dir, "--dependence", "--blind", "vqa-regions"]
    whole = str(tmp_path / "whole")
    code, out, err = run(*common, "--out", whole, "--json", timeout=600)
    assert code == 0, err
    report = json.loads(out)
    rows = report["answers"]
    assert len(rows) == len(items) and report["failed_photos"] == []
    assert report["accuracy"]["overall"]["accuracy"] == pytest.approx(
        np.mean([r["said"] == r["answer"] for r in rows]), abs=1e-4)
    assert report["looked_or_guessed"]["same_as_blind"] == 1.0 and all("dependence" in r for r in rows)
    named = [q for q in items if word_class(q.answer)]   # grounded on the detector's boxes where it finds the class
    assert report.get("grounding", {"object_words": 0})["object_words"] == len(named)
    records = open(os.path.join(whole, "records.jsonl")).read().splitlines()
    assert len(records) == 1 + len({q.photo for q in items})               # the fingerprint + a record a photo
    code, out, err = run(*common, "--out", whole, "--json", timeout=600)   # resumed: nothing computed again
    assert code == 0 and json.loads(out) == report and open(os.path.join(whole, "records.jsonl")).read().splitlines() == records
    shards = str(tmp_path / "shards")
    for shard in ("1/2", "2/2"):
        code, _, err = run(*common, "--out", shards, "--shard", shard, timeout=600)
        assert code == 0, err
    code, out, err = run("merge", shards, "--json")
    assert code == 0, err
    merged = json.load(open(json.loads(out)["report"]["json"]))
    assert merged["accuracy"] == report["accuracy"] and merged["looked_or_guessed"] == report["looked_or_guessed"]
    code, _, err = run("--checkpoints", tiny_checkpoints, "evaluate", "--model", "updown", "--data", tiny_data,
                       "--questions", path)
    assert code == 2 and "question answering model" in err and "Traceback" not in err
    # --explain: every method's map of each answer of the first photo, scored as caption words are
    code, out, err = run(*common, "--explain", "gradcam", "--explain-photos", "1", "--explain-sanity", "1", "--json",
                         timeout=600)
    assert code == 0, err
    block = json.loads(out)["explain"]
    first = [q for q in items if q.photo == items[0].photo]
    assert block["methods"] == ["attention", "gradcam"] and block["photos_asked"] == 1
    assert block["object_words"] == len(first) and "answer to each question" in block["words"]
    assert "gradcam" in block["target"]["verdict"] and block["sanity"]["photos"] == 1


def test_the_answer_note_says_when_the_map_is_not_a_look():
    """A question-only model's even map is drawn like any other map: its note says it is not a look."""
    from conftest import ROOT
    from viewer.app import ask_tab, ui
    from viewer.engine.pipeline import Captioner
    studio = S.Studio(Captioner("cpu", checkpoint_dir=os.path.join(ROOT, "checkpoints")))
    handlers = ui.Handlers(studio, studio.models())
    path = os.path.join(ASSETS, "coffee.jpg")
    blind = handlers.ask_photo(path, "vqa-blind", QUESTION, *S.Style().inputs())[2]
    looked = handlers.ask_photo(path, "vqa-regions", QUESTION, *S.Style().inputs())[2]
    assert ask_tab.LOOK_NOTES["none"] in blind and "not a look" not in looked and ask_tab.LOOK_NOTES["attention"] in looked
    assert studio.look("vqa-blind") == "none" and studio.look("no such model") == "attention"
