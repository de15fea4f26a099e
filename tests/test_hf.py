"""`--model hf:PATH`: a local Hugging Face VisionEncoderDecoderModel (ViT + GPT-2) behind our step interface.

Tiny random models built here from small configs (no download): our decoding loop must give the
model's own greedy tokens, log-probs and cross-attentions; hiding must hold; pickles are refused.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from viewer.engine.checkpoints import CheckpointError  # noqa: E402
from viewer.engine.decoding import DecodeSettings, decode  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COFFEE = os.path.join(ROOT, "assets", "coffee.jpg")
WORDS = ["<|endoftext|>", "<unk>", "a", "cup", "of", "coffee", "on", "the", "table", "cat", "red", "white",
         "sits", "with", "spoon", "saucer", "and", "in", "blue", "sky", "dog", "mat", "rocket", "flag"]
SIDE, PATCH = 4, 8   # 32 px images, 4x4 patches


def word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>",
                                                bos_token="<|endoftext|>", eos_token="<|endoftext|>")


def subword_tokenizer():
    """A byte-level BPE (GPT-2's kind) learnt on a few captions: unseen words split into sub-words."""
    from tokenizers import ByteLevelBPETokenizer
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(["a cup of coffee on the table", "a cat sits on the mat"] * 5, vocab_size=280,
                            min_frequency=1, special_tokens=["<|endoftext|>"], show_progress=False)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<|endoftext|>",
                                                eos_token="<|endoftext|>")


def write_tiny(folder, seed: int = 0, layers: int = 2, heads: int = 4, tokenizer=None) -> str:
    """A random ViT + GPT-2 VisionEncoderDecoderModel with its tokenizer and image processor."""
    torch.manual_seed(seed)
    tokenizer = tokenizer or word_tokenizer()
    eos = tokenizer.eos_token_id
    vit = transformers.ViTConfig(image_size=SIDE * PATCH, patch_size=PATCH, hidden_size=24, num_hidden_layers=1,
                                 num_attention_heads=2, intermediate_size=48)
    gpt = transformers.GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=layers, n_head=heads,
                                  add_cross_attention=True, bos_token_id=eos, eos_token_id=eos, initializer_range=0.3)
    return save_encoder_decoder(folder, vit, gpt, tokenizer, eos, eos, eos)


def save_encoder_decoder(folder, encoder, decoder, tokenizer, start: int, end: int, pad: int) -> str:
    """A random VisionEncoderDecoderModel of these configs, saved as a Hugging Face folder."""
    config = transformers.VisionEncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
    config.decoder_start_token_id, config.eos_token_id, config.pad_token_id = start, end, pad
    model = transformers.VisionEncoderDecoderModel(config=config).eval()
    model.save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    transformers.ViTImageProcessor(size={"height": SIDE * PATCH, "width": SIDE * PATCH}).save_pretrained(str(folder))
    return str(folder)


def _written_and_loaded(tmp_path_factory, name: str, write, model_class):
    """(folder, our loaded model, the transformers reference) for a tiny model written by `write`."""
    from viewer.engine.models.hf import load_folder
    folder = write(tmp_path_factory.mktemp(name))
    reference = model_class.from_pretrained(folder, use_safetensors=True, attn_implementation="eager").eval()
    return folder, load_folder("hf:" + folder), reference


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return _written_and_loaded(tmp_path_factory, "hf", write_tiny, transformers.VisionEncoderDecoderModel)


def pixels(lm, seed=0):
    torch.manual_seed(seed)
    return torch.randn(2, 3, SIDE * PATCH, SIDE * PATCH)


def inputs(lm, px):
    with torch.no_grad():
        feats = lm.image_encoder.encode(px)
    return feats, torch.ones(feats.shape[:2], dtype=torch.bool)


def assert_greedy_equals_generate(lm, reference, seed: int, end: int):
    px = pixels(lm, seed)
    feats, mask = inputs(lm, px)
    hyps = decode(lm.model, feats, mask, DecodeSettings(strategy="greedy", max_len=12), lm.vocab)
    with torch.no_grad():
        out = reference.generate(pixel_values=px, do_sample=False, num_beams=1, max_new_tokens=12)
    for i, hs in enumerate(hyps):
        expected = out[i, 1:].tolist()
        if end in expected:
            expected = expected[: expected.index(end) + 1]
        assert hs[0].tokens == expected
        assert len(expected) > 2   # the check means something


def assert_forced_matches_forward(lm, reference, seed: int, caption: list[int], start: int, special: int = 1):
    """Our forced log-probs, every layer's and head's map, the summary map and the special tokens'
    weight equal the model's own forward pass (output_attentions=True)."""
    px = pixels(lm, seed)
    feats, mask = inputs(lm, px)
    hyps = decode(lm.model, feats, mask, DecodeSettings(strategy="forced"), lm.vocab, [caption, caption])
    ids = torch.tensor([[start] + caption[:-1]] * 2)
    with torch.no_grad():
        if hasattr(reference, "text_decoder"):   # BLIP: its vision model, then its text decoder
            image = reference.vision_model(pixel_values=px).last_hidden_state
            out = reference.text_decoder(input_ids=ids, encoder_hidden_states=image, output_attentions=True,
                                         return_dict=True)
        else:
            out = reference(pixel_values=px, decoder_input_ids=ids, output_attentions=True)
    logp = torch.log_softmax(out.logits.float(), -1)
    cross = torch.stack(out.cross_attentions, 1)                     # (B, layers, heads, T, n + K)
    for i in range(2):
        h = hyps[i][0]
        assert h.tokens == caption
        want = logp[i, torch.arange(len(caption)), torch.tensor(caption)]
        assert torch.allclose(torch.tensor(h.logprobs), want, atol=1e-5)
        heads = cross[i].permute(2, 0, 1, 3)                         # (T, layers, heads, n + K)
        assert h.heads.shape == (len(caption), *heads.shape[1:3], SIDE * SIDE)
        assert torch.allclose(h.heads, heads[..., special:], atol=1e-5)    # patches only
        summary = heads[:, -1].mean(1)
        assert torch.allclose(h.outside, summary[:, :special].sum(-1), atol=1e-5)   # beside the map
        patches = summary[:, special:]
        assert torch.allclose(h.attention, patches / patches.sum(-1, keepdim=True), atol=1e-5)


@pytest.mark.parametrize("which,start,end,caption", [("tiny", 0, 0, [3, 4, 5, 6, 7, 8, 0]),
                                                      ("tiny_blip", 4, 3, [6, 7, 8, 9, 10, 11, 3])])
def test_greedy_equals_generate_and_forced_matches_forward(request, which, start, end, caption):
    """ViT + GPT-2 and BLIP: our greedy decode is the model's generate, our forced steps its forward."""
    _, lm, reference = request.getfixturevalue(which)
    assert_greedy_equals_generate(lm, reference, 0, end=end)
    assert_forced_matches_forward(lm, reference, 1, caption, start=start)


def assert_hidden_patches_change_nothing(lm, seed: int, hidden: list[int], max_len: int, not_vacuous: bool = True):
    """Patches hidden through the mask (row 0 too: the class token is read from a visible row): random
    features there change no token, log-prob or head, and the hidden patches get no attention."""
    feats, mask = inputs(lm, pixels(lm, seed=seed))
    mask[:, hidden] = False
    settings = DecodeSettings(strategy="greedy", max_len=max_len)
    a = decode(lm.model, feats, mask, settings, lm.vocab)
    changed = feats.clone()
    changed[:, hidden] = torch.randn_like(changed[:, hidden]) * 10
    b = decode(lm.model, changed, mask, settings, lm.vocab)
    for x, y in zip(a, b):
        assert x[0].tokens == y[0].tokens
        assert torch.allclose(torch.tensor(x[0].logprobs), torch.tensor(y[0].logprobs), atol=1e-6)
        assert torch.allclose(x[0].heads, y[0].heads, atol=1e-6)
        assert float(x[0].heads[..., hidden].abs().max()) == 0.0
    if not_vacuous:   # the same change to visible patches does change the model's output
        visible = decode(lm.model, changed, torch.ones_like(mask), settings, lm.vocab)
        assert any(not torch.allclose(torch.tensor(v[0].logprobs[:1]), torch.tensor(x[0].logprobs[:1]))
                   for v, x in zip(visible, a))


def test_hidden_patch_features_change_nothing(tiny):
    _, lm, _ = tiny
    assert_hidden_patches_change_nothing(lm, 2, [0, 5], max_len=8)


def test_beam_search_and_steering_run(tiny):
    _, lm, _ = tiny
    feats, mask = inputs(lm, pixels(lm, seed=3))
    hyps = decode(lm.model, feats, mask, DecodeSettings(strategy="beam", beam_size=3, max_len=6), lm.vocab)
    assert all(len(hs) == 3 for hs in hyps)
    target = torch.zeros(2, SIDE * SIDE)
    target[:, 7] = 1.0
    steered = decode(lm.model, feats, mask, DecodeSettings(strategy="greedy", max_len=4), lm.vocab, steer=(1, target))
    assert torch.allclose(steered[0][0].attention[1], target[0])


def test_a_pickle_with_a_payload_is_refused_and_nothing_runs(tmp_path):
    from viewer.engine.models.hf import load_folder
    folder = write_tiny(tmp_path / "m")
    os.remove(os.path.join(folder, "model.safetensors"))
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"x": Payload()}, os.path.join(folder, "pytorch_model.bin"))
    with pytest.raises(CheckpointError, match="pytorch_model.bin needs more than tensors to load and was refused"):
        load_folder("hf:" + folder)
    assert not marker.exists()


def test_safetensors_win_over_a_pickle_beside_them(tmp_path):
    from viewer.engine.models.hf import load_folder
    folder = write_tiny(tmp_path / "m")
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"x": Payload()}, os.path.join(folder, "pytorch_model.bin"))
    assert load_folder("hf:" + folder).vocab.end == 0
    assert not marker.exists()


@pytest.mark.parametrize("missing", ["config.json", "model.safetensors", "preprocessor_config.json", "tokenizer.json"])
def test_missing_file_is_named(tmp_path, missing):
    from viewer.engine.models.hf import load_folder
    folder = write_tiny(tmp_path / "m")
    os.remove(os.path.join(folder, missing))
    with pytest.raises(CheckpointError, match=f"missing {missing}"):
        load_folder("hf:" + folder)


def test_other_architectures_are_refused_by_name(tmp_path):
    from viewer.engine.models.hf import load_folder
    folder = write_tiny(tmp_path / "m")
    path = os.path.join(folder, "config.json")
    config = json.load(open(path))
    config["decoder"]["model_type"] = "roberta"
    json.dump(config, open(path, "w"))
    with pytest.raises(CheckpointError, match=r"VisionEncoderDecoderModel \(vit \+ roberta\) is not supported"):
        load_folder("hf:" + folder)
    json.dump({"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"]}, open(path, "w"))
    with pytest.raises(CheckpointError, match="LlavaForConditionalGeneration is not supported"):
        load_folder("hf:" + folder)


def test_without_transformers_one_clear_error(tmp_path, monkeypatch):
    from viewer.engine.models import hf
    folder = write_tiny(tmp_path / "m")
    monkeypatch.setitem(sys.modules, "transformers", None)   # import transformers -> ImportError
    with pytest.raises(CheckpointError, match=r"pip install \.\[hf\]"):
        hf.load_folder("hf:" + folder)


def test_pipeline_caption_words_and_tokens(tiny):
    from viewer.engine.images import load_photo
    from viewer.engine.pipeline import Captioner
    folder, _, _ = tiny
    cap = Captioner(device="cpu")
    photo = load_photo(COFFEE)
    trace = cap.caption([photo], "hf:" + folder, DecodeSettings(strategy="greedy", max_len=8))[0][0]
    assert trace.grid_side == SIDE and trace.steps[0].heads.shape == (2, 4, SIDE * SIDE)
    assert abs(trace.steps[0].attention.sum() - 1) < 1e-5 and 0 <= trace.steps[0].outside <= 1
    assert trace.caption == " ".join(trace.words)   # word-level tokenizer: tokens are words
    forced = cap.force([photo], "hf:" + folder, ["a cup of coffee"])[0]
    assert [s.word for s in forced.steps] == ["a", "cup", "of", "coffee", "<end>"]
    assert forced.caption == "a cup of coffee"


def test_cli_caption_json_end_to_end(tiny):
    folder, _, _ = tiny
    out = subprocess.run([sys.executable, "-m", "viewer", "--device", "cpu", "caption", COFFEE, "--model", "hf:" + folder,
                          "--json", "--beam", "2", "--max-len", "6"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    trace = json.loads(out.stdout)
    assert trace["model"] == "hf:" + folder and trace["caption"]
    assert np.asarray(trace["steps"][0]["grid"]).shape == (SIDE, SIDE)
    assert "class_token" in trace["steps"][0] and len(trace["steps"][0]["heads"]) == 2
    assert trace["grid_is"].startswith("the last layer's attention, mean over its heads") and "class token" in trace["grid_is"]


def test_subword_tokens_are_steps_and_the_caption_shows_words(tmp_path):
    from viewer.engine.images import load_photo
    from viewer.engine.pipeline import Captioner
    folder = write_tiny(tmp_path / "bpe", tokenizer=subword_tokenizer())
    cap = Captioner(device="cpu")
    trace = cap.force([load_photo(COFFEE)], "hf:" + folder, ["a cupcake on the table"])[0]
    tokens = [s.word for s in trace.steps]
    assert len(tokens) > 6 and tokens[-1] == "<end>"     # "cupcake" is more than one step
    assert trace.caption == "a cupcake on the table"
    obj = trace.to_json()
    assert [s["word"] for s in obj["steps"]] == tokens and obj["caption"] == "a cupcake on the table"
    from viewer.engine.trace import AttentionTrace
    back = AttentionTrace.from_json(obj)
    assert back.caption == trace.caption and back.steps[0].outside == obj["steps"][0]["class_token"]
    assert back.pieces == trace.pieces and "".join(trace.pieces) == trace.caption
    from viewer.app.session import shown_tokens
    shown = shown_tokens(trace)                          # the app's caption: a word's tokens stand together
    assert len(shown) == len(tokens) and "".join(shown) == "a cupcake on the table <end> "
    greedy = cap.caption([load_photo(COFFEE)], "hf:" + folder, DecodeSettings(strategy="greedy", max_len=6))[0][0]
    assert all(s.alternatives for s in greedy.steps)


BLIP_WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[DEC]"] + WORDS[2:]


def blip_text_config(tokenizer, encoder_hidden_size: int):
    """A tiny BLIP text model's config (two layers of width 32) for `tokenizer`, cross-attending to
    states `encoder_hidden_size` wide."""
    return transformers.BlipTextConfig(vocab_size=len(tokenizer), hidden_size=32, encoder_hidden_size=encoder_hidden_size,
                                       intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                       max_position_embeddings=64, bos_token_id=tokenizer.bos_token_id,
                                       sep_token_id=tokenizer.sep_token_id, pad_token_id=tokenizer.pad_token_id,
                                       eos_token_id=tokenizer.sep_token_id, initializer_range=0.3)


def write_tiny_blip(folder, seed: int = 0, tokenizer=None, image_size: int = SIDE * PATCH, patch_size: int = PATCH) -> str:
    """A random BlipForConditionalGeneration (ViT-style vision model + BERT-style text decoder);
    `tokenizer` (default a word-level one) needs [PAD], [UNK], [CLS], [SEP] and [DEC] (its bos)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    torch.manual_seed(seed)
    if tokenizer is None:
        tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(BLIP_WORDS)}, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                                         cls_token="[CLS]", sep_token="[SEP]", bos_token="[DEC]")
    text = blip_text_config(tokenizer, encoder_hidden_size=24)
    vision = transformers.BlipVisionConfig(hidden_size=24, intermediate_size=48, num_hidden_layers=1,
                                           num_attention_heads=2, image_size=image_size, patch_size=patch_size)
    config = transformers.BlipConfig(text_config=text.to_dict(), vision_config=vision.to_dict(), projection_dim=16)
    model = transformers.BlipForConditionalGeneration(config).eval()
    model.save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    transformers.BlipImageProcessor(size={"height": image_size, "width": image_size}).save_pretrained(str(folder))
    return str(folder)


@pytest.fixture(scope="module")
def tiny_blip(tmp_path_factory):
    return _written_and_loaded(tmp_path_factory, "blip", write_tiny_blip, transformers.BlipForConditionalGeneration)


def write_tiny_pair(folder, encoder: str, decoder: str, seed: int = 0) -> str:
    """A random VisionEncoderDecoderModel of `encoder` (vit, deit) + `decoder` (gpt2, bert), widths
    differing so the encoder-to-decoder projection is used."""
    torch.manual_seed(seed)
    if decoder == "gpt2":
        tokenizer = word_tokenizer()
        dec = transformers.GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                      add_cross_attention=True, bos_token_id=0, eos_token_id=0, initializer_range=0.3)
        start, end, pad = 0, 0, 0
    else:
        from tokenizers import Tokenizer, models, pre_tokenizers
        tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(BLIP_WORDS)}, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                                         cls_token="[CLS]", sep_token="[SEP]")
        dec = transformers.BertConfig(vocab_size=len(BLIP_WORDS), hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                                      is_decoder=True, add_cross_attention=True, initializer_range=0.3)
        start, end, pad = 2, 3, 0
    enc_cls = transformers.DeiTConfig if encoder == "deit" else transformers.ViTConfig
    enc = enc_cls(image_size=SIDE * PATCH, patch_size=PATCH, hidden_size=24, num_hidden_layers=1,
                  num_attention_heads=2, intermediate_size=48)
    return save_encoder_decoder(folder, enc, dec, tokenizer, start, end, pad)


@pytest.mark.parametrize("encoder,decoder", [("deit", "bert"), ("vit", "bert"), ("deit", "gpt2")])
def test_deit_and_bert_variants_match_generate_and_forward(tmp_path_factory, encoder, decoder):
    folder, lm, reference = _written_and_loaded(tmp_path_factory, f"{encoder}-{decoder}",
                                                lambda f: write_tiny_pair(f, encoder, decoder),
                                                transformers.VisionEncoderDecoderModel)
    assert lm.model.proj is not None and lm.model.special == (2 if encoder == "deit" else 1)
    start, end = (0, 0) if decoder == "gpt2" else (2, 3)
    assert_greedy_equals_generate(lm, reference, 7, end=end)
    caption = [3, 4, 5, 6, 7, 8, 0] if decoder == "gpt2" else [6, 7, 8, 9, 10, 11, 3]
    assert_forced_matches_forward(lm, reference, 8, caption, start=start, special=lm.model.special)


def test_blip_pipeline_and_hiding(tiny_blip):
    from viewer.engine.images import load_photo
    from viewer.engine.pipeline import Captioner
    folder, lm, _ = tiny_blip
    trace = Captioner(device="cpu").force([load_photo(COFFEE)], "hf:" + folder, ["a cup of coffee"])[0]
    assert [s.word for s in trace.steps] == ["a", "cup", "of", "coffee", "<end>"] and trace.caption == "a cup of coffee"
    assert_hidden_patches_change_nothing(lm, 6, [0, 9], max_len=6, not_vacuous=False)


# --- explanations (issue 27) through the model's own ViT ---------------------------------------------

def test_explanations_through_the_models_own_encoder(tiny):
    """Occlusion and Grad-CAM run on hf: models: the photo-space run with nothing occluded is the
    model's own forced run, attention is the forced trace's, Grad-CAM is the gradient's own formula."""
    from viewer.analysis.explain import Pipeline, attention_grid, available_methods, explain, gradcam_maps, to_grid
    from viewer.engine.images import load_photo
    from viewer.engine.pipeline import Captioner
    folder, _, _ = tiny
    cap, photo, model = Captioner(device="cpu"), load_photo(COFFEE), "hf:" + folder
    assert available_methods(cap, model) == ("attention", "occlusion", "superpixels", "gradcam", "kernelshap",
                                             "occlusion-fine")
    caption = "a cup of coffee on the table"
    forced = cap.force([photo], model, [caption])[0]
    pipe = Pipeline(cap, photo, model, caption)
    found = explain(cap, photo, model, caption, ("attention", "occlusion", "gradcam"), pipe=pipe)
    for m, maps in found.maps.items():
        assert maps.shape == (len(forced.steps), 14, 14)
        sums = maps.reshape(len(maps), -1).sum(1)
        assert np.allclose(sums[~found.empty[m]], 1, atol=1e-5)
    assert np.allclose(found.logprobs, [s.logprob for s in forced.steps], atol=1e-5)
    assert np.allclose(found.maps["attention"], attention_grid(forced), atol=1e-6)
    unoccluded = pipe.logprobs(torch.ones(1, 14, 14))[0]    # blends in the processor's space: nothing moved
    assert torch.allclose(unoccluded, pipe.base(), atol=1e-4)
    assert not torch.allclose(pipe.logprobs(torch.zeros(1, 14, 14))[0], pipe.base(), atol=1e-3)
    assert found.maps["occlusion"].any()
    d = pipe.model.enc_dim                                   # Grad-CAM's A: the patch tokens, not the class token
    g = pipe.features.grid.float()
    patches = g[:, :d].clone().requires_grad_(True)
    with torch.enable_grad():
        lp = pipe.grid_logprobs(torch.cat([patches, g[:, d:]], -1)[None])[0]
        t = 3
        grad, = torch.autograd.grad(lp[t], patches)
    cam = torch.relu((patches.detach() * grad.mean(0)).sum(-1)).reshape(1, SIDE, SIDE).numpy()
    assert np.allclose(gradcam_maps(pipe)[t], to_grid(cam)[0], atol=1e-5)


# --- the app's model list and the browser ------------------------------------------------------------

def test_a_checkpoints_folder_lists_hf_models(tmp_path):
    from viewer.engine.checkpoints import available, read_meta, resolve
    folder = write_tiny(tmp_path / "vit-gpt2")
    (tmp_path / "notes").mkdir()                               # a folder without config.json is not a model
    found = available(str(tmp_path))
    assert found == {"hf:vit-gpt2": "hf:" + folder}
    assert resolve("hf:vit-gpt2", str(tmp_path)) == "hf:" + folder
    assert read_meta(found["hf:vit-gpt2"])["model_type"] == "hf:vit+gpt2"
    out = subprocess.run([sys.executable, "-m", "viewer", "--checkpoints", str(tmp_path), "models", "--json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    listed = json.loads(out.stdout)
    assert listed["name"] == "hf:vit-gpt2" and listed["type"] == "hf:vit+gpt2" and listed["vocabulary"] == len(WORDS)


def test_browser_lists_and_captions_an_hf_model(tmp_path_factory):
    """The app started on a folder holding an hf: model lists it, captions with it, and shows the
    class token's weight beside the map and the photo-space methods."""
    from playwright.sync_api import expect, sync_playwright
    from test_app import _browser, _captioned_page
    from viewer.app import create_app, free_port, launch
    root = tmp_path_factory.mktemp("checkpoints")
    write_tiny(root / "vit-gpt2")
    demo, studio = create_app("cpu", str(root))
    port = free_port()
    launch(demo, "127.0.0.1", port, block=False)
    try:
        with sync_playwright() as p:
            browser = _browser(p)
            page = _captioned_page(browser, f"http://127.0.0.1:{port}/", 90_000)
            expect(page.locator("#model input")).to_have_value("hf:vit-gpt2")
            words = page.locator("#caption .token")
            expect(words.first).to_be_visible()
            traces = list(studio._decodes.values())
            assert len(traces) == 1 and words.count() == len(traces[0][0].steps)
            words.nth(1).click()
            expect(page.locator("#panel .step-facts")).to_contain_text("at step 2")
            expect(page.locator("#panel .step-facts")).to_contain_text("class token")
            expect(page.locator("#explain-with").get_by_text("occlusion (what it needed)")).to_be_visible()
            browser.close()
    finally:
        demo.close()


def test_bench_times_our_loop_against_generate(tiny):
    from viewer.analysis.speed import inprocess_table
    from viewer.measure import bench
    folder, _, _ = tiny
    result = bench.run(["hf:" + folder], [COFFEE], "cpu", repeats=1, beam=2)
    row = result["models"]["hf:" + folder]
    assert row["end_to_end"]["encoder"]["median_ms"] > 0 and row["batch_images_per_s"] > 0
    greedy = row["generate"]["greedy"]
    assert greedy["same_tokens"] is True and greedy["tokens"] > 2     # the two loops made the same caption
    assert greedy["ratio"] == pytest.approx(greedy["ours_s"] / greedy["generate_s"], abs=0.02)
    assert "ours / generate" in inprocess_table(result)


def test_evaluate_and_explain_an_hf_model_from_the_command_line(tiny, tiny_data, tmp_path):
    folder, _, _ = tiny
    out = subprocess.run([sys.executable, "-m", "viewer", "--device", "cpu", "evaluate", "--model", "hf:" + folder,
                          "--data", tiny_data, "--split", "dev", "--beam", "1", "--max-len", "6", "--explain",
                          "occlusion,gradcam", "--explain-photos", "2", "--explain-references", "all", "--json",
                          "--captions-out", str(tmp_path / "captions.json")],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["images"] == 2 and "BLEU-4" in json.dumps(result)
    block = result["explain"]
    assert block["methods"] == ["attention", "occlusion", "gradcam"] and block["photos"] == 2
    assert block["object_words"] > 0                      # "cat" of chelsea's references: the figures mean something
    assert all(np.isfinite(block["by_method"]["occlusion"][imp]["auc_morf"]) for imp in ("blur", "road"))


def test_only_the_explicit_hub_form_touches_the_network(tmp_path, monkeypatch):
    """`hf:org/name` that is no folder here is "no such folder" and asks nothing of the hub; only
    `hf-hub:org/name@revision` fetches, at that revision, never a pickle, and names the commit."""
    import huggingface_hub
    from viewer.engine.models.hf import load_folder
    from viewer.engine.models.hf_folder import HUB_FILES
    asked = []

    def snapshot_download(repo, revision=None, allow_patterns=None):   # stands in for the network
        asked.append((repo, revision, allow_patterns))
        snapshot = tmp_path / "snapshots" / "0123abcd"
        if not snapshot.exists():
            write_tiny(snapshot)
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    with pytest.raises(CheckpointError, match=r"hf:nobody/no-such-captioner: no such folder \(to fetch it .*"
                                              r"ask for hf-hub:nobody/no-such-captioner\)"):
        load_folder("hf:nobody/no-such-captioner")
    assert asked == []
    lm = load_folder("hf-hub:nobody/captioner@v1")
    assert asked == [("nobody/captioner", "v1", HUB_FILES)] and not any("bin" in p for p in HUB_FILES)
    assert lm.name == "hf-hub:nobody/captioner@0123abcd"           # every trace records the commit

    def offline(*a, **k):
        raise huggingface_hub.errors.LocalEntryNotFoundError("offline")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(CheckpointError, match=r"hf-hub:nobody/x: the Hugging Face hub did not give it .*"
                                              r"huggingface-cli download nobody/x"):
        load_folder("hf-hub:nobody/x")


def test_token_pieces_survive_the_tokenizers_space_clean_up():
    """A tokenizer that cleans spaces before punctuation rewrites earlier text ("man '" -> "man'"):
    each step's piece is still its own share, never the text so far again."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from viewer.engine.models.hf_vocab import HFVocab
    words = ["<|endoftext|>", "a", "man", "'", "s", "hat", "."]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                                     clean_up_tokenization_spaces=True)
    vocab = HFVocab(tokenizer, 0, len(words))
    ids = [1, 2, 3, 4, 5, 6, 0]
    assert vocab.text(ids) == "a man's hat."
    pieces = vocab.pieces(ids)
    assert pieces == ["a", " man", " '", " s", " hat", " .", ""]


def test_a_centre_cropping_processor_sees_the_whole_photo():
    """DeiT's processor resizes to 256 and crops 224: the viewer draws every map over the whole photo,
    so the model is given the whole photo (resized to the crop size), its edges included."""
    from viewer.engine.images import Photo
    from viewer.engine.vision.hf import HFImageEncoder
    processor = transformers.DeiTImageProcessor(size={"height": 40, "width": 40}, crop_size={"height": 32, "width": 32},
                                                image_mean=[0, 0, 0], image_std=[1, 1, 1])
    rgb = np.zeros((64, 64, 3), np.uint8)
    rgb[:, :4, 0] = 255                                       # a red edge a 32-of-40 centre crop would cut off
    px = HFImageEncoder(None, processor, side=4).preprocess([Photo(rgb, 64, 64)])
    assert px.shape == (1, 3, 32, 32)
    assert float(px[0, 0, :, 0].mean()) > 0.9 and float(px[0, 0, :, 16].mean()) < 0.1


def test_blip_prompt_is_forced_before_the_first_step_and_left_out(tiny_blip):
    """`#prompt=TEXT`: the prompt's tokens come after [DEC] and before the first step, as the text
    decoder's own forward sees them; the steps, the caption and the maps begin after the prompt."""
    from viewer.engine.images import load_photo
    from viewer.engine.models.hf import load_folder
    from viewer.engine.models.hf_folder import split_prompt
    from viewer.engine.pipeline import Captioner
    folder, plain, reference = tiny_blip
    lm = load_folder(f"hf:{folder}#prompt=a red cup")
    assert lm.model.lead == (4, 5, 13, 6) and plain.model.lead == (4,)
    assert lm.name.endswith("#prompt=a red cup")
    caption = [7, 8, 9, 3]                                         # "of coffee on" <end>
    px = pixels(lm, 3)
    feats, mask = inputs(lm, px)
    hyp = decode(lm.model, feats, mask, DecodeSettings(strategy="forced"), lm.vocab, [caption, caption])[0][0]
    with torch.no_grad():
        image = reference.vision_model(pixel_values=px).last_hidden_state
        out = reference.text_decoder(input_ids=torch.tensor([[4, 5, 13, 6] + caption[:-1]] * 2),
                                     encoder_hidden_states=image, output_attentions=True, return_dict=True)
    logp = torch.log_softmax(out.logits.float(), -1)[0, 3:]         # the positions after the prompt
    assert torch.allclose(torch.tensor(hyp.logprobs), logp[torch.arange(4), torch.tensor(caption)], atol=1e-5)
    heads = torch.stack(out.cross_attentions, 1)[0].permute(2, 0, 1, 3)[3:]
    assert torch.allclose(hyp.heads, heads[..., 1:], atol=1e-5)
    unprompted = decode(plain.model, feats, mask, DecodeSettings(strategy="forced"), plain.vocab, [caption, caption])[0][0]
    assert not np.allclose(unprompted.logprobs, hyp.logprobs)       # the prompt changes what the model says
    trace = Captioner(device="cpu").force([load_photo(COFFEE)], f"hf:{folder}#prompt", ["a cup of coffee"])[0]
    assert trace.caption == "a cup of coffee" and "#prompt" in trace.model
    assert [s.word for s in trace.steps][0] == "a"
    assert split_prompt(f"hf:{folder}#prompt") == (f"hf:{folder}", "a picture of")
    with pytest.raises(CheckpointError, match="#prompt"):
        load_folder(f"hf:{folder}#beam=3")


def test_a_multi_token_words_dependence_and_deletion_are_over_all_its_tokens(tmp_path):
    """A word's log-prob is the sum over its tokens (a real BPE: "cupcake" is several steps)."""
    from viewer.analysis.explain import Pipeline
    from viewer.analysis.pixel_faithfulness import deletion, visual_dependence
    from viewer.engine.images import load_photo
    from viewer.engine.pipeline import Captioner
    folder = write_tiny(tmp_path / "bpe", tokenizer=subword_tokenizer())
    pipe = Pipeline(Captioner(device="cpu"), load_photo(COFFEE), "hf:" + folder, "a cupcake on the table")
    word = next(s for s in pipe.spans if pipe.words[s.start] == "cupcake")
    assert len(word) > 1
    hidden = pipe.logprobs(torch.zeros(1, 14, 14), "blur")[0]
    per_token = (pipe.base() - hidden).numpy()
    found = visual_dependence(pipe, "blur")
    assert found[word.start] == pytest.approx(per_token[word.start:word.stop].sum(), abs=1e-5)
    assert abs(found[word.start] - per_token[word.start]) > 1e-4   # not the first token's alone
    curves = deletion(pipe, {"uniform": np.full((pipe.steps, 14, 14), 1 / 196)}, steps=[word.start])
    assert curves.base[word.start] == pytest.approx(pipe.base()[word.start:word.stop].sum().item(), abs=1e-5)


# --- Ask the photo through an hf: BlipForQuestionAnswering (issue 48) -------------------------------

def write_tiny_blip_vqa(folder, seed: int = 0, tokenizer=None) -> str:
    """A random BlipForQuestionAnswering: a ViT-style vision model, a BERT-style question encoder that
    cross-attends to it and an answer decoder that cross-attends to the question (one width, as BLIP's)."""
    torch.manual_seed(seed)
    tokenizer = tokenizer or blip_tokenizer()
    text = blip_text_config(tokenizer, encoder_hidden_size=32)
    vision = transformers.BlipVisionConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                           num_attention_heads=2, image_size=SIDE * PATCH, patch_size=PATCH,
                                           initializer_range=0.3)   # (its default, 1e-10, makes every patch alike)
    config = transformers.BlipConfig(text_config=text.to_dict(), vision_config=vision.to_dict(), projection_dim=16)
    transformers.BlipForQuestionAnswering(config).eval().save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    transformers.BlipImageProcessor(size={"height": SIDE * PATCH, "width": SIDE * PATCH}).save_pretrained(str(folder))
    return str(folder)


def blip_tokenizer(subwords: bool = False):
    """BLIP's kind of tokenizer ([CLS] question [SEP]): word-level on BLIP_WORDS, or a WordPiece learnt
    on a few captions (unseen words split into ##pieces)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[DEC]"]
    if subwords:
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tok.train_from_iterator(["a cup of coffee on the table", "what colour is the cup", "a cat sits on the mat"] * 5,
                                trainers.WordPieceTrainer(vocab_size=60, special_tokens=specials, show_progress=False))
    else:
        tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(BLIP_WORDS)}, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[
        ("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                                cls_token="[CLS]", sep_token="[SEP]", bos_token="[DEC]")


@pytest.mark.parametrize("subwords", [False, True], ids=["words", "wordpiece"])
def test_blip_answers_as_its_own_generate_with_the_map_carried_through_the_question(tmp_path, subwords):
    """Our greedy answer is BlipForQuestionAnswering.generate's, token for token, for questions of
    different lengths in one batch (padding unread); each step's map is the decoder's attention over the question
    carried to the photo by the question's cross-attention (from the model's own forward pass);
    hidden patches are unread; the trace keeps its question."""
    from viewer.engine import checkpoints
    from viewer.engine.images import load_photo
    from viewer.engine.pipeline import Captioner, question_ids
    tokenizer = blip_tokenizer(subwords)
    questions = ["what colour is the cup", "what is on the table with the red cup"]
    for seed in range(20):   # a random model whose answers are a few tokens long (else the check is vacuous)
        folder = write_tiny_blip_vqa(tmp_path / f"vqa{seed}", seed, tokenizer)
        lm = checkpoints.load("hf:" + folder)
        reference = transformers.BlipForQuestionAnswering.from_pretrained(folder, attn_implementation="eager").eval()
        px = pixels(lm, seed)
        feats, mask = inputs(lm, px)
        prompt = question_ids(lm, questions, "cpu")
        hyps = decode(lm.model, feats, mask, DecodeSettings(strategy="greedy", max_len=8), lm.vocab, prompt=prompt)
        expected = []   # one question at a time (its generate lets the answer read a batch's padding)
        for i, question in enumerate(questions):
            with torch.no_grad():
                out = reference.generate(input_ids=tokenizer([question], return_tensors="pt")["input_ids"],
                                         pixel_values=px[i:i + 1], do_sample=False, num_beams=1, max_new_tokens=8)
            row = out[0, 1:].tolist()
            expected.append(row[: row.index(3) + 1] if 3 in row else row)   # to [SEP], the end
        assert [h[0].tokens for h in hyps] == expected
        if min(map(len, expected)) > 2:
            break
    assert min(map(len, expected)) > 2, "no seed gave answers of several tokens"
    assert lm.model.answers and checkpoints.read_meta("hf:" + folder)["task"] == "answer"
    assert prompt[0, 0] == tokenizer.cls_token_id and bool((prompt == 0).any())   # [CLS] first; one row padded
    # the map, from the model's own forward pass on the padded question alone (unpadded): the
    # decoder's attention over the question, carried to the photo by the question's cross-attention
    caption, n = hyps[0][0].tokens, int((prompt[0] != 0).sum())
    with torch.no_grad():
        image = reference.vision_model(pixel_values=px[:1]).last_hidden_state
        q = reference.text_encoder(input_ids=prompt[:1, :n], encoder_hidden_states=image, output_attentions=True)
        dec = reference.text_decoder(input_ids=torch.tensor([[tokenizer.bos_token_id] + caption[:-1]]),
                                     encoder_hidden_states=q.last_hidden_state, output_attentions=True)
    reads = torch.stack(q.cross_attentions, 1)[0]                              # (layers, heads, L, 1 + K)
    over_question = torch.stack(dec.cross_attentions, 1)[0, -1].mean(0)        # (T, L): the last layer's head mean
    forced = decode(lm.model, feats, mask, DecodeSettings(strategy="forced"), lm.vocab, [caption, caption],
                    prompt=prompt)[0][0]
    for t in range(len(caption)):
        photo = torch.einsum("q,lhqk->lhk", over_question[t], reads)
        assert torch.allclose(forced.heads[t], photo[..., 1:], atol=1e-5)
        summary = photo[-1].mean(0)
        assert torch.allclose(forced.attention[t], summary[1:] / summary[1:].sum(), atol=1e-5)
        assert abs(float(forced.attention[t].sum()) - 1) < 1e-5
    want = torch.log_softmax(dec.logits[0].float(), -1)[torch.arange(len(caption)), torch.tensor(caption)]
    assert torch.allclose(torch.tensor(forced.logprobs), want, atol=1e-5)
    # hidden patches: unread by the question, so features there change nothing
    hidden = mask.clone()
    hidden[:, [1, 6]] = False
    changed = feats.clone()
    changed[:, [1, 6], :32] = torch.randn_like(changed[:, [1, 6], :32]) * 10
    a, b = (decode(lm.model, f, hidden, DecodeSettings(strategy="forced"), lm.vocab, [caption, caption], prompt=prompt)
            for f in (feats, changed))
    assert torch.allclose(torch.tensor(a[0][0].logprobs), torch.tensor(b[0][0].logprobs), atol=1e-6)
    assert float(a[0][0].heads[..., [1, 6]].abs().max()) == 0.0
    # through the pipeline: the trace says its question; steering is refused in one sentence
    trace = Captioner(device="cpu").ask([load_photo(COFFEE)], "hf:" + folder, [questions[0]])[0]
    from viewer.engine.pipeline import ANSWER_TOKENS
    from viewer.engine.trace import AttentionTrace
    assert trace.question == questions[0] and 1 <= len(trace.steps) <= ANSWER_TOKENS
    assert AttentionTrace.from_json(trace.to_json()).question == questions[0]
    with pytest.raises(ValueError, match="cannot be steered"):
        decode(lm.model, feats[:1], mask[:1], DecodeSettings(strategy="greedy", max_len=3), lm.vocab,
               prompt=prompt[:1], steer=(0, torch.full((1, SIDE * SIDE), 1 / SIDE ** 2)))


def test_a_blip_answerer_is_listed_as_one_and_a_missing_part_is_refused(tmp_path):
    """checkpoints/ lists an hf: BLIP question answering folder among the answerers, not the
    captioners; its folder without the question encoder's weights is refused by name."""
    from safetensors.torch import load_file, save_file
    from viewer.engine.checkpoints import available, load
    folder = write_tiny_blip_vqa(tmp_path / "blip-vqa")
    assert available(str(tmp_path), task="answer") == {"hf:blip-vqa": "hf:" + folder}
    assert available(str(tmp_path), task="caption") == {}
    weights = os.path.join(folder, "model.safetensors")
    tensors = load_file(weights)
    save_file({k: v for k, v in tensors.items() if not k.startswith("text_encoder.")}, weights, metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="do not cover the model.*text_encoder"):
        load("hf:" + folder)
