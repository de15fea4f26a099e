"""The command line as a person uses it: python -m viewer caption/models."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ASSETS, MODEL_TYPES, ROOT

PHOTOS = sorted(os.path.join(ASSETS, n) for n in os.listdir(ASSETS) if n.endswith(".jpg"))


def run(*args, timeout=300):
    proc = subprocess.run([sys.executable, "-m", "viewer", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "VIEWER_DEVICE": "cpu"})
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize("model", MODEL_TYPES)
def test_caption_every_example_photo(tiny_checkpoints, model):
    code, out, err = run("--checkpoints", tiny_checkpoints, "caption", *PHOTOS, "--model", model)
    assert code == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == len(PHOTOS)
    for path, line in zip(PHOTOS, lines):
        assert line.startswith(path + ": ") and len(line) > len(path) + 4


def test_json_output_follows_the_schema(tiny_checkpoints):
    photo = os.path.join(ASSETS, "motorcycle.jpg")
    code, out, err = run("--checkpoints", tiny_checkpoints, "caption", photo, "--model", "updown", "--json")
    assert code == 0, err
    obj = json.loads(out)
    assert (obj["image"], obj["width"], obj["height"], obj["model"]) == (photo, 741, 500, "updown")
    assert obj["caption"] == " ".join(s["word"] for s in obj["steps"] if s["word"] != "<end>")
    assert all("regions" in s and "logprob" in s for s in obj["steps"])


def test_force_and_sample_modes(tiny_checkpoints):
    photo = os.path.join(ASSETS, "coffee.jpg")
    code, out, _ = run("--checkpoints", tiny_checkpoints, "caption", photo, "--model", "sat-hard",
                       "--force", "A cup of coffee.", "--json")
    obj = json.loads(out)
    assert code == 0 and obj["caption"] == "a cup of coffee"
    assert [s["word"] for s in obj["steps"]][-1] == "<end>" and all("sample" in s for s in obj["steps"])
    samples = [run("--checkpoints", tiny_checkpoints, "caption", photo, "--model", "sat-soft", "--sample",
                   "--seed", "3")[1] for _ in range(2)]
    assert samples[0] == samples[1] and samples[0]


def test_bad_photo_gives_one_line_and_nonzero_exit(tiny_checkpoints, tmp_path):
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 definitely not a jpeg")
    code, out, err = run("--checkpoints", tiny_checkpoints, "caption", str(bad), "--model", "sat-soft")
    assert code == 2
    assert err.strip().count("\n") == 0 and err.startswith("error: broken.jpg")
    assert "Traceback" not in err + out


def test_bad_model_gives_one_line(tiny_checkpoints, tmp_path):
    code, _, err = run("--checkpoints", tiny_checkpoints, "caption", PHOTOS[0], "--model", "nope")
    assert code == 2 and "no model named 'nope'" in err and "Traceback" not in err
    fake = tmp_path / "fake.safetensors"
    fake.write_bytes(b"garbage")
    code, _, err = run("caption", PHOTOS[0], "--model", str(fake))
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err


def test_models_lists_metadata(tiny_checkpoints):
    code, out, _ = run("--checkpoints", tiny_checkpoints, "models", "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    captioners = [r for r in rows if r["task"] == "caption"]
    assert code == 0 and sorted(r["name"] for r in captioners) == sorted(MODEL_TYPES)
    assert {r["type"] for r in captioners} == set(MODEL_TYPES)
    assert [(r["name"], r["task"]) for r in rows if r not in captioners] == [("vqa-regions", "answer")]


def test_train_scores_the_select_half_by_default():
    from viewer.__main__ import build_parser
    args = build_parser().parse_args(["train", "--model", "sat-soft", "--data", "d"])
    assert args.dev_split == "dev-select"
    from viewer.training.train import TrainConfig
    assert TrainConfig(model="sat-soft", data="d", out="o").dev_split == "dev-select"


def test_scst_with_ground_weight_is_refused_in_one_line(tmp_path):
    code, out, err = run("train", "--model", "sat-soft", "--data", str(tmp_path / "no-data"), "--out",
                         str(tmp_path / "run"), "--scst", "--ground-weight", "1", timeout=120)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: --scst does not use --ground-weight")
    assert "Traceback" not in err + out and not os.path.exists(tmp_path / "run")


def test_evaluate_records_that_it_looked_at_the_report_half(tiny_checkpoints, tiny_data, cache_dir, tmp_path):
    """rocket.jpg is the tiny dev split's report half, chelsea.jpg its select half."""
    from viewer.analysis.evaluate import report_half_seen
    from viewer.data.datasets import load_dataset
    data = load_dataset(tiny_data)
    assert report_half_seen(data, "dev-select") == {"looked_at_report_half": False, "report_half_photos": 0}
    assert report_half_seen(data, "dev") == {"looked_at_report_half": True, "report_half_photos": 1}
    code, out, err = run("--checkpoints", tiny_checkpoints, "evaluate", "--model", "sat-soft", "--data", tiny_data,
                         "--split", "dev-report", "--cache", cache_dir, "--json",
                         "--captions-out", str(tmp_path / "c.json"))
    assert code == 0, err
    result = json.loads(out)
    assert result["split"] == "dev-report" and result["images"] == 1
    assert result["looked_at_report_half"] is True and result["report_half_photos"] == 1


def test_models_lists_every_captioner_on_dev_report_named_in_the_header():
    """The shipped models, each row's figures from dev-report (updown-copy's metadata scored another
    split: its committed dev-report evaluation stands in)."""
    code, out, err = run("models")
    assert code == 0, err
    lines = out.splitlines()
    title = next(i for i, line in enumerate(lines) if line.startswith("Captioning"))
    assert lines[title] == "Captioning, every figure on dev-report:"
    head, table = lines[title + 1].split(), lines[title + 2:]
    rows = {line.split()[0]: line.split() for line in table[:next(i for i, line in enumerate(table)
                                                                   if line.startswith("Grounding"))]}
    assert set(rows) == set(os.listdir(os.path.join(ROOT, "reports", "eval")))   # every shipped captioner
    for name, row in rows.items():
        report = json.load(open(os.path.join(ROOT, "reports", "eval", name, "report.json")))
        assert report["split"] == "dev-report" and float(row[head.index("BLEU-4")]) == report["BLEU-4"], name


def _questions_file(path, splits: dict, root: str) -> str:
    from viewer.data import questions as qa
    qa.write(str(path), {name: [qa.Question(os.path.join(root, photo), "object", "what is on the table?", "cup", 2)
                                for photo in photos] for name, photos in splits.items()}, root)
    return str(path)


def test_evaluate_questions_without_a_train_split_is_one_line(tiny_data, tmp_path):
    questions = _questions_file(tmp_path / "q.json", {"dev-report": ["images/coffee.jpg"]}, tiny_data)
    code, out, err = run("evaluate", "--model", "vqa-regions", "--data", tiny_data, "--questions", questions,
                         "--split", "dev-report")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err + out
    assert err.startswith(f"error: {questions} has no split 'train'")


def test_evaluate_questions_that_answers_nothing_fails_in_one_line(tiny_checkpoints, tiny_data, cache_dir, tmp_path):
    questions = _questions_file(tmp_path / "q.json", {"train": ["images/coffee.jpg"], "dev-report": ["images/gone.jpg"]},
                                tiny_data)
    code, out, err = run("--checkpoints", tiny_checkpoints, "evaluate", "--model", "vqa-regions", "--data", tiny_data,
                         "--questions", questions, "--split", "dev-report", "--cache", cache_dir)
    assert code == 2 and "Traceback" not in err + out and "None" not in out
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: no question was answered: all 1 photos failed, the first ") and "gone.jpg" in last


def test_ask_refuses_a_question_of_no_known_word_and_an_unknown_blind_model(tiny_checkpoints):
    photo = os.path.join(ASSETS, "coffee.jpg")
    code, out, err = run("--checkpoints", tiny_checkpoints, "ask", photo, "zorblax quux?", "--model", "vqa-regions")
    assert code == 2 and err.count("\n") == 1 and not out and "Traceback" not in err
    assert err.startswith("error: vqa-regions knows none of the words of 'zorblax quux?' (unknown: zorblax, quux)")
    code, out, err = run("--checkpoints", tiny_checkpoints, "ask", photo, "what colour is the cup?", "--blind", "nosuch")
    assert code == 2 and err.count("\n") == 1 and not out and err.startswith("error: --blind: no model named 'nosuch'")
    code, out, err = run("--checkpoints", tiny_checkpoints, "ask", photo, "what colour is the cup?", "--blind", "updown")
    assert code == 2 and err.startswith("error: --blind: updown captions")
