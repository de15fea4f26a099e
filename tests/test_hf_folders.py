"""Hugging Face folders as they are published or saved today open, and bad ones give one line.

Layouts: weights as model.safetensors or pytorch_model.bin (as nlpconnect/vit-gpt2-image-captioning
ships them, read with weights_only); the tokenizer as tokenizer.json, vocab.json + merges.txt or a
BERT vocab.txt alone; the image processor as preprocessor_config.json or nested in the
processor_config.json that transformers 5 writes; a re-saved BLIP whose config omits image_size.
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

from test_hf import COFFEE, ROOT, write_tiny, write_tiny_blip, write_tiny_pair  # noqa: E402
from test_words import caption_bpe  # noqa: E402
from viewer.engine.checkpoints import CheckpointError  # noqa: E402
from viewer.engine.images import load_photo  # noqa: E402
from viewer.engine.models.hf import load_folder  # noqa: E402
from viewer.engine.pipeline import Captioner  # noqa: E402

CAPTION = "a dog sits on a porch next to a red bicycle"


def forced_logprobs(folder: str) -> list[float]:
    trace = Captioner(device="cpu").force([load_photo(COFFEE)], "hf:" + folder, [CAPTION])[0]
    return [s.logprob for s in trace.steps]


def as_published(folder: str) -> None:
    """The folder as nlpconnect/vit-gpt2-image-captioning has it: pytorch_model.bin, vocab.json + merges.txt."""
    from safetensors.torch import load_file
    torch.save(load_file(os.path.join(folder, "model.safetensors")), os.path.join(folder, "pytorch_model.bin"))
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    for name in ("model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        os.remove(os.path.join(folder, name))
    tokenizer.backend_tokenizer.model.save(folder)                       # vocab.json + merges.txt


def test_a_pytorch_model_bin_folder_with_vocab_and_merges_opens_and_gives_the_same_numbers(tmp_path):
    folder = write_tiny(tmp_path / "m", tokenizer=caption_bpe())
    before = forced_logprobs(folder)
    as_published(folder)
    assert {"pytorch_model.bin", "vocab.json", "merges.txt"} <= set(os.listdir(folder))
    assert not {"model.safetensors", "tokenizer.json"} & set(os.listdir(folder))
    assert np.allclose(forced_logprobs(folder), before, atol=1e-5)


def test_a_bert_decoder_with_only_vocab_txt_opens(tmp_path):
    folder = write_tiny_pair(tmp_path / "m", "vit", "bert")
    from test_hf import BLIP_WORDS
    for name in ("tokenizer.json", "tokenizer_config.json"):
        os.remove(os.path.join(folder, name))
    words = BLIP_WORDS[:20] + ["##s", "##ing", "##er", "##ed"]        # the decoder's 24 ids, WordPiece pieces
    (tmp_path / "m" / "vocab.txt").write_text("\n".join(words) + "\n")
    lm = load_folder("hf:" + folder)
    assert lm.vocab.marker == "##" and lm.vocab.words[3] == "<end>"      # [SEP] ends a BERT caption
    ids = lm.vocab.encode("a cup and cups") + [lm.vocab.end]
    assert len(ids) == 6 and [w.text for w in lm.vocab.word_spans(ids)] == ["a", "cup", "and", "cups", "<end>"]


def test_a_blip_processor_saved_as_processor_config_opens(tmp_path):
    folder = write_tiny_blip(tmp_path / "m")
    expected = forced_logprobs(folder)
    processor = transformers.BlipProcessor.from_pretrained(folder)
    os.remove(os.path.join(folder, "preprocessor_config.json"))
    processor.save_pretrained(folder)
    assert "processor_config.json" in os.listdir(folder) and "preprocessor_config.json" not in os.listdir(folder)
    assert np.allclose(forced_logprobs(folder), expected, atol=1e-5)


def test_a_resaved_blip_without_image_size_gets_its_24x24_grid(tmp_path):
    """BlipVisionConfig's default image_size is 384 (24 x 24 patches of 16): a config.json that omits it
    must not fall back to ViT's 224."""
    folder = write_tiny_blip(tmp_path / "m", image_size=384, patch_size=16)
    path = os.path.join(folder, "config.json")
    config = json.load(open(path))
    del config["vision_config"]["image_size"], config["vision_config"]["patch_size"]
    json.dump(config, open(path, "w"))
    lm = load_folder("hf:" + folder)
    assert lm.vision_spec.details["grid"] == 24 and lm.image_encoder.side == 24
    trace = Captioner(device="cpu").force([load_photo(COFFEE)], "hf:" + folder, ["a cup"])[0]
    assert trace.grid_side == 24 and trace.steps[0].heads.dtype == np.float16


def broken(tmp_path, how: str) -> str:
    folder = write_tiny(tmp_path / how)
    path = os.path.join(folder, "config.json")
    config = json.load(open(path))
    if how == "list":
        json.dump([config], open(path, "w"))
    elif how == "no-encoder":
        del config["encoder"]
        json.dump(config, open(path, "w"))
    elif how == "shape":
        config["decoder"]["n_embd"] = 48
        json.dump(config, open(path, "w"))
    elif how == "corrupt":
        with open(os.path.join(folder, "model.safetensors"), "r+b") as f:
            f.write(b"\xff" * 16)
    elif how == "no-decoder":   # the whole decoder removed: it must not load with a random one
        from safetensors.torch import load_file, save_file
        weights = os.path.join(folder, "model.safetensors")
        save_file({k: v for k, v in load_file(weights).items() if not k.startswith("decoder.")}, weights)
    elif how == "relative":
        bert = write_tiny_pair(tmp_path / "bert", "vit", "bert")
        path = os.path.join(bert, "config.json")
        config = json.load(open(path))
        config["decoder"]["position_embedding_type"] = "relative_key"
        json.dump(config, open(path, "w"))
        return bert
    return folder


@pytest.mark.parametrize("how,message", [
    ("list", "config.json holds a list, not a JSON object"),
    ("no-encoder", "config.json has no encoder object"),
    ("shape", r"weight decoder\.\S+ has shape \[\d+(, \d+)*\], config.json makes it"),
    ("corrupt", "model.safetensors is not a readable safetensors file"),
    ("no-decoder", r"the weights do not cover the model: \d+ tensors missing, in decoder\.\S+"),
    ("relative", "position_embedding_type is 'relative_key'; only absolute positions are supported"),
])
def test_a_bad_folder_is_one_line_naming_the_file(tmp_path, how, message):
    folder = broken(tmp_path, how)
    with pytest.raises(CheckpointError, match=message):
        load_folder("hf:" + folder)
    out = subprocess.run([sys.executable, "-m", "viewer", "--device", "cpu", "caption", COFFEE, "--model",
                          "hf:" + folder], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: hf:") and lines[0].count("\n") == 0


def test_an_older_torch_is_refused_before_any_pickle_is_read():
    from viewer.engine.models.hf_folder import check_torch_loads_safely
    with pytest.raises(CheckpointError, match=r"needs torch >= 2\.6 \(this is 2\.5\.1.*CVE-2025-32434"):
        check_torch_loads_safely("hf:x", "2.5.1+cpu")
    check_torch_loads_safely("hf:x", "2.6.0")
    check_torch_loads_safely("hf:x", "2.14.1+cu128")
