"""The user's words win over guidance (analysis/guide.py `user_wins`): a word the user asks for is
never ruled out, and the trace, the command line and Explore's status say who won; --need is
checked; --steer keeps the constraints of the caption it steers."""
import json
import os

from conftest import ASSETS
from viewer.__main__ import main as cli
from viewer.analysis.guide import overruled_note, user_wins, user_words
from viewer.engine.decoding import DecodeSettings

COFFEE = os.path.join(ASSETS, "coffee.jpg")   # the detector sees a cup: no cat, no one


def test_a_class_the_user_asks_for_is_taken_out_of_what_is_ruled_out():
    kept, overruled = user_wins(["cat", "cats", "kitten", "man", "<unk>"], user_words("cat"))
    assert kept == ["man", "<unk>"] and overruled == ["cat"]
    assert user_wins(["man"], [(["cup", "cups"], "detector")]) == (["man"], [])   # only the user's words win
    assert "cat" in overruled_note(["cat"]) and overruled_note([]) == ""


def test_the_command_line_says_a_guided_caption_the_users_word_and_why(tiny_checkpoints, capsys):
    args = ["--checkpoints", tiny_checkpoints, "caption", COFFEE, "--model", "sat-soft", "--guide", "detector",
            "--include", "cat"]
    assert cli(args + ["--json"]) == 0
    trace = json.loads(capsys.readouterr().out)
    assert {"cat", "cats"} & {s["word"] for s in trace["steps"] if s.get("required_by") == "user"}
    assert "Your words win: cat" in trace["guidance"]
    assert cli(args) == 0
    assert "Your words win: cat" in capsys.readouterr().out


def test_need_is_refused_below_one_and_without_words_to_need(tiny_checkpoints, capsys):
    base = ["--checkpoints", tiny_checkpoints, "caption", COFFEE, "--model", "sat-soft"]
    for extra, said in ((["--include", "cat", "--need", "0"], "--need 0"), (["--include", "cat", "--need", "-3"], "--need -3"),
                        (["--need", "1"], "--include or --guide")):
        assert cli(base + extra) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:") and said in err[0]


def test_a_steered_caption_keeps_the_words_it_must_include(tiny_checkpoints, capsys):
    assert cli(["--checkpoints", tiny_checkpoints, "caption", COFFEE, "--model", "sat-soft", "--include", "cat",
                "--steer", "1:0,0", "--json"]) == 0
    trace = json.loads(capsys.readouterr().out)
    assert trace["steps"][0].get("steered") and {"cat", "cats"} & {s["word"] for s in trace["steps"]}


def test_explore_keeps_the_users_word_and_its_status_says_so(captioner):
    from viewer.app import session as S
    studio = S.Studio(captioner)
    ex = studio.explore(COFFEE, "updown", DecodeSettings(beam_size=2), required=((("cat", "cats"), "user"),),
                        rule_out=True)
    assert "cat" not in ex.avoid and "man" in ex.avoid
    assert {"cat", "cats"} & set(ex.trace.words)
    note = S.guidance_note(ex.required, ex.avoid, ex.trace.guidance)
    assert "Your words win: cat may be said though the detector sees none" in note
    plain = studio.explore(COFFEE, "updown", DecodeSettings(beam_size=2), rule_out=True)
    assert plain.trace.guidance is None and "cat" in plain.avoid
