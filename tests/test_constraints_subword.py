"""What decoding returns at the length limit, and constrained search with a REAL sub-word tokenizer:
a byte-level BPE trained here, offline, behind the project's HFVocab, where the required word
"cupcake" is two tokens ("Ġcup" "cake") whose first is a word the model says on its own ("cup")."""
import pytest
import torch

from test_constraints import V
from viewer.engine.decoding import DecodeSettings, decode
from viewer.engine.models.base import CaptionModel, Step


class Table(CaptionModel):
    """Log-odds of each next token given the last one (`odds[last, next]`), uniform attention: it
    says exactly what the table makes likely."""

    def __init__(self, odds: torch.Tensor):
        super().__init__()
        self.odds = odds

    def init_state(self, feats, mask, seed=None):
        return {"mask": mask}

    def forward_step(self, state, words):
        units = state["mask"].shape[1]
        return Step(self.odds[words], torch.full((len(words), units), 1 / units)), state


def table(size: int, likely: dict[tuple[int, int], float]) -> Table:
    """A Table of `size` tokens: the (last, next) pairs given their log-odds, every other pair 0."""
    odds = torch.zeros(size, size)
    for (last, nxt), value in likely.items():
        odds[last, nxt] = value
    return Table(odds)


def run(model, vocab, settings, **kwargs):
    return decode(model, torch.zeros(1, 4, 1), torch.ones(1, 4, dtype=torch.bool), settings, vocab, **kwargs)[0]


# "a dog in the field", though "a dog" may end there (log-odds 5 against 8)
SAID = V.encode("a dog in the field")
DOG = table(len(V), {pair: 8.0 for pair in zip([V.start] + SAID, SAID + [V.end])} | {(V.index["dog"], V.end): 5.0})


@pytest.mark.parametrize("how", [{}, {"avoid": [[tuple(V.encode("bear"))]]}, {"no_repeat": 2}],
                         ids=["beam", "avoid", "no-repeat"])
def test_at_the_length_limit_a_finished_caption_comes_before_live_rows_scoring_better(how):
    """Three tokens long at most, 'a dog' ends and 'a dog in' does not, though it scores better: the
    finished caption is the answer, the unfinished rows only fill the beams after it, best first."""
    settings = DecodeSettings(beam_size=3, max_len=3, no_repeat=how.get("no_repeat", 0))
    hyps = run(DOG, V, settings, avoid=how.get("avoid"))
    ranks = [(not h.finished, -h.score) for h in hyps]
    assert ranks == sorted(ranks) and not hyps[-1].finished
    live = next(h for h in hyps if not h.finished)
    assert V.decode(hyps[0].tokens) == ["a", "dog", "<end>"] and V.decode(live.tokens) == ["a", "dog", "in"]
    assert live.score > hyps[0].score


CAPTION = "a cup of coffee on the table"


@pytest.fixture(scope="module")
def bpe():
    """(vocabulary, model): a byte-level BPE learnt on three lines, where "cake" begins a line so
    " cupcake" is "Ġcup" "cake"; the model says CAPTION (log-odds 8 per token), may end after
    "coffee" or "cake" (log-odds 5), goes on after "cake" as after "coffee", and finds "cake" unlikely
    anywhere (log-odds -4, below every other token), so it never completes "cupcake" itself."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import ByteLevelBPETokenizer

    from viewer.engine.models.hf_vocab import HFVocab
    trained = ByteLevelBPETokenizer()
    trained.train_from_iterator([CAPTION, "a cat sits on the mat", "cake on a plate"] * 5, vocab_size=300,
                                min_frequency=1, special_tokens=["<|endoftext|>"], show_progress=False)
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=trained._tokenizer, eos_token="<|endoftext|>")
    vocab = HFVocab(tokenizer, tokenizer.eos_token_id, len(tokenizer))
    said = [vocab.start] + vocab.encode(CAPTION) + [vocab.end]
    cup, cake, coffee, on = (vocab.index[w] for w in ("Ġcup", "cake", "Ġcoffee", "Ġon"))
    likely = {pair: 8.0 for pair in zip(said, said[1:])} | {(cake, on): 8.0, (coffee, vocab.end): 5.0,
                                                           (cake, vocab.end): 5.0}
    likely |= {(last, cake): -4.0 for last in range(len(vocab))}
    assert vocab.encode("a cupcake") == vocab.encode("a") + [cup, cake]
    return vocab, table(len(vocab), likely)


def constrained(bpe, words: list[str], settings=DecodeSettings(beam_size=3, max_len=10)):
    """Decode under one constraint per word, each word as the tokens it is emitted as."""
    from viewer.engine.constraints import constraint_tokens
    vocab, model = bpe
    return run(model, vocab, settings, constraints=[[constraint_tokens(vocab, [w]) for w in words]])


def test_a_required_word_of_two_sub_word_tokens_is_said_whole(bpe):
    """The model says "a cup of coffee ..." and never "cake": required, "cupcake" is in the caption
    as both its tokens in a row, after "Ġcup" (the search goes on from a word's first token, and
    "Ġcup" alone does not meet it), and both steps are marked as the required word's."""
    vocab, model = bpe
    assert vocab.text(run(model, vocab, DecodeSettings(beam_size=3, max_len=10))[0].tokens) == CAPTION
    best = constrained(bpe, ["cupcake"])[0]
    assert best.finished and vocab.text(best.tokens) == "a cupcake on the table"
    assert best.required == {0: [1, 2]} and vocab.decode(best.tokens[1:3]) == ["Ġcup", "cake"]


def test_of_captions_meeting_as_many_words_a_finished_one_is_returned_before_a_live_row(bpe):
    """Four tokens at most: "cupcake" fits ("a cupcake", finished), "teacup" (five tokens) cannot,
    so no caption meets both and those meeting one are returned: the finished "a cupcake" first,
    though the live "a cupcake on" scores better."""
    vocab, model = bpe
    best = constrained(bpe, ["cupcake", "teacup"], DecodeSettings(beam_size=2, max_len=4))[0]
    assert best.finished and vocab.text(best.tokens) == "a cupcake" and best.required == {0: [1, 2]}
    live = run(model, vocab, DecodeSettings(strategy="forced"), prefixes=[vocab.encode("a cupcake on")])[0]
    assert not live.finished and live.score > best.score
