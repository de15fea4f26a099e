"""Caption metrics without Java: METEOR is skipped, loudly, and the Java-free metrics still come back."""
import shutil

import pytest

from viewer.analysis import evaluate
from viewer.analysis.evaluate import score_captions

PREDICTIONS = {"a": "a dog runs across the green grass", "b": "a cup of coffee on a table"}
REFERENCES = {"a": ["A dog runs across the green grass.", "a brown dog running on grass"],
              "b": ["a cup of coffee sits on a table", "a white cup of coffee on a saucer"]}


def test_without_java_meteor_is_skipped_with_a_warning(monkeypatch, capsys):
    real_which = shutil.which
    monkeypatch.setattr(evaluate.shutil, "which", lambda name, *a, **k: None if name == "java" else real_which(name, *a, **k))
    assert not evaluate.java_available()
    scores = score_captions(PREDICTIONS, REFERENCES)
    assert "METEOR" not in scores
    assert {"BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "ROUGE-L", "CIDEr"} <= set(scores)
    assert scores["BLEU-1"] > 50 and scores["ROUGE-L"] > 50 and scores["CIDEr"] > 0   # real scores, not zeros
    err = capsys.readouterr().err
    assert "java" in err.lower() and "skipping METEOR" in err


@pytest.mark.skipif(shutil.which("java") is None, reason="METEOR runs on Java, which is not installed")
def test_with_java_meteor_is_scored(capsys):
    scores = score_captions(PREDICTIONS, REFERENCES)
    assert 0 < scores["METEOR"] <= 100
    assert "skipping METEOR" not in capsys.readouterr().err
