"""Importing community checkpoints: safety of the unpickler, and faithfulness of each conversion.

Each format's checkpoint is built here the way its project saves it: classes with the same
module and class names and the same attribute layout (random weights), pickled by torch.save.
The reference outputs come from those classes' own forward code (transcribed from the projects);
the imported model, run through our pipeline, must give the same logits and attention.
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import pickle
import sys
import types

import numpy as np
import pytest
import torch
import torch.nn as nn
import torchvision
from PIL import Image

from viewer.engine import checkpoints
from viewer.__main__ import main as cli
from viewer.community import ConversionError, UnsafePickleError, import_checkpoint
from viewer.engine.decoding import DecodeSettings, decode
from viewer.engine.images import load_photo
from viewer.engine.pipeline import Captioner
from viewer.engine.safe_pickle import load as safe_load
from viewer.engine.vision import FeatureSource

from conftest import ASSETS

WORDS = ["a", "dog", "runs", "on", "the", "grass", "cat", "sits"]
CAPTION = ["a", "dog", "runs", "on", "the", "grass"]


@contextlib.contextmanager
def foreign_module(name: str, **classes):
    """Make `classes` importable as `name.<Class>` while the checkpoint is saved, then remove them,
    so the import cannot lean on them."""
    module = types.ModuleType(name)
    for cls_name, cls in classes.items():
        cls.__module__, cls.__qualname__, cls.__name__ = name, cls_name, cls_name
        setattr(module, cls_name, cls)
    sys.modules[name] = module
    try:
        yield
    finally:
        del sys.modules[name]


def randomise_(module: nn.Module, seed: int) -> nn.Module:
    """Random weights AND batch-norm statistics, so a conversion that drops buffers is caught."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) * 0.5)
    return module.eval()


def imagenet_tensor(path: str, size: int) -> torch.Tensor:
    """The projects' preprocessing: RGB, squash to size x size (bilinear), /255, ImageNet mean/std."""
    img = np.asarray(Image.open(path).convert("RGB").resize((size, size), Image.Resampling.BILINEAR))
    x = torch.from_numpy(img).permute(2, 0, 1).float()[None] / 255.0
    mean, std = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1), torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    return (x - mean) / std


def teacher_forced(model, feats: torch.Tensor, ids: list[int], vocab):
    """Our model's logits (T, V) and attention (T, K) for <start> + ids, one image."""
    state = model.init_state(feats, torch.ones(feats.shape[:2], dtype=torch.bool))
    logits, alphas = [], []
    with torch.no_grad():
        for word in [vocab.start] + ids:
            step, state = model.forward_step(state, torch.tensor([word]))
            logits.append(step.logits[0]); alphas.append(step.attention[0])
    return torch.stack(logits), torch.stack(alphas)


def check_same(ours_logits, ours_alpha, vocab, their_logits, their_alpha, their_index: dict[str, int]):
    """Same attention, and the same logit for every word of their vocabulary (rows may be reordered)."""
    torch.testing.assert_close(ours_alpha, their_alpha, rtol=1e-4, atol=1e-5)
    assert set(their_index) <= set(vocab.index)   # no word of theirs was lost
    words = list(their_index)
    ours = ours_logits[:, [vocab.index[w] for w in words]]
    theirs = their_logits[:, [their_index[w] for w in words]]
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------------------------
# sgrvinod/a-PyTorch-Tutorial-to-Image-Captioning (models.py, transcribed)

class SgEncoder(nn.Module):
    def __init__(self, encoded_image_size=14):
        super().__init__()
        self.enc_image_size = encoded_image_size
        resnet = torchvision.models.resnet101(weights=None)
        self.resnet = nn.Sequential(*list(resnet.children())[:-2])
        self.adaptive_pool = nn.AdaptiveAvgPool2d((encoded_image_size, encoded_image_size))

    def forward(self, images):
        return self.adaptive_pool(self.resnet(images)).permute(0, 2, 3, 1)


class SgAttention(nn.Module):
    def __init__(self, encoder_dim, decoder_dim, attention_dim):
        super().__init__()
        self.encoder_att = nn.Linear(encoder_dim, attention_dim)
        self.decoder_att = nn.Linear(decoder_dim, attention_dim)
        self.full_att = nn.Linear(attention_dim, 1)
        self.relu = nn.ReLU()
        self.softmax = nn.Softmax(dim=1)

    def forward(self, encoder_out, decoder_hidden):
        att1 = self.encoder_att(encoder_out)
        att2 = self.decoder_att(decoder_hidden)
        att = self.full_att(self.relu(att1 + att2.unsqueeze(1))).squeeze(2)
        alpha = self.softmax(att)
        return (encoder_out * alpha.unsqueeze(2)).sum(dim=1), alpha


class SgDecoder(nn.Module):
    def __init__(self, attention_dim, embed_dim, decoder_dim, vocab_size, encoder_dim=2048, dropout=0.5):
        super().__init__()
        self.attention = SgAttention(encoder_dim, decoder_dim, attention_dim)
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.dropout = nn.Dropout(p=dropout)
        self.decode_step = nn.LSTMCell(embed_dim + encoder_dim, decoder_dim, bias=True)
        self.init_h = nn.Linear(encoder_dim, decoder_dim)
        self.init_c = nn.Linear(encoder_dim, decoder_dim)
        self.f_beta = nn.Linear(decoder_dim, encoder_dim)
        self.sigmoid = nn.Sigmoid()
        self.fc = nn.Linear(decoder_dim, vocab_size)

    def reference(self, encoder_out, tokens):
        """Their forward(), for one caption: scores and alphas at every step."""
        encoder_out = encoder_out.view(1, -1, encoder_out.size(-1))
        mean = encoder_out.mean(dim=1)
        h, c = self.init_h(mean), self.init_c(mean)
        preds, alphas = [], []
        for t in range(len(tokens)):
            awe, alpha = self.attention(encoder_out, h)
            gate = self.sigmoid(self.f_beta(h))
            h, c = self.decode_step(torch.cat([self.embedding(torch.tensor([tokens[t]])), gate * awe], dim=1), (h, c))
            preds.append(self.fc(self.dropout(h))[0]); alphas.append(alpha[0])
        return torch.stack(preds), torch.stack(alphas)


def sgrvinod_word_map():
    word_map = {w: i + 1 for i, w in enumerate(WORDS)}
    word_map["<unk>"] = len(word_map) + 1
    word_map["<start>"] = len(word_map) + 1
    word_map["<end>"] = len(word_map) + 1
    word_map["<pad>"] = 0
    return word_map


@pytest.fixture(scope="module")
def sgrvinod_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sgrvinod")
    word_map = sgrvinod_word_map()
    with foreign_module("models", Encoder=SgEncoder, Attention=SgAttention, DecoderWithAttention=SgDecoder):
        encoder = randomise_(SgEncoder(), 1)
        decoder = randomise_(SgDecoder(32, 16, 24, len(word_map)), 2)
        opt = torch.optim.Adam(decoder.parameters(), lr=4e-4)
        torch.save({"epoch": 7, "epochs_since_improvement": 0, "bleu-4": 0.23, "encoder": encoder,
                    "decoder": decoder, "encoder_optimizer": None, "decoder_optimizer": opt},
                   folder / "BEST_checkpoint_test.pth.tar")
    (folder / "WORDMAP_test.json").write_text(json.dumps(word_map))
    return folder, encoder, decoder, word_map


def test_sgrvinod_import_reproduces_the_original(sgrvinod_files, tmp_path):
    folder, encoder, decoder, word_map = sgrvinod_files
    out = import_checkpoint(str(folder / "BEST_checkpoint_test.pth.tar"), str(tmp_path / "sg"),
                            word_map=str(folder / "WORDMAP_test.json"))
    lm = checkpoints.load(out)
    assert lm.meta["model_type"] == "sat-sgrvinod" and lm.meta["vision_spec"]["layers"] == [3, 4, 23, 3]
    assert lm.meta["imported_from"]["epoch"] == 7

    photo_path = os.path.join(ASSETS, "chelsea.jpg")
    with torch.no_grad():
        their_grid = encoder(imagenet_tensor(photo_path, 256)).reshape(1, 196, 2048)
    captioner = Captioner("cpu", checkpoint_dir=str(tmp_path))
    photo = load_photo(photo_path)
    ours_grid = captioner.inputs(lm, [photo])[0].grid[None]
    torch.testing.assert_close(ours_grid, their_grid, rtol=1e-4, atol=1e-4)

    ids = [word_map[w] for w in CAPTION]
    with torch.no_grad():
        their_logits, their_alpha = decoder.reference(their_grid, [word_map["<start>"]] + ids)
    ours_logits, ours_alpha = teacher_forced(lm.model, their_grid, [lm.vocab.index[w] for w in CAPTION], lm.vocab)
    check_same(ours_logits, ours_alpha, lm.vocab, their_logits, their_alpha, word_map)

    # end to end: the attention the app shows for each forced word is the original model's alpha for it
    trace = captioner.force([photo], out, [" ".join(CAPTION)])[0]
    shown = torch.tensor(np.stack([s.attention for s in trace.steps[: len(CAPTION)]]))
    torch.testing.assert_close(shown, their_alpha[: len(CAPTION)], rtol=1e-3, atol=1e-5)


def test_the_import_command_writes_a_model_the_app_lists(sgrvinod_files, tmp_path, capsys):
    folder, *_ = sgrvinod_files
    code = cli(["--checkpoints", str(tmp_path), "import", str(folder / "BEST_checkpoint_test.pth.tar"),
                "--word-map", str(folder / "WORDMAP_test.json"), "--out", "mine"])
    assert code == 0 and "sat-sgrvinod" in capsys.readouterr().out
    assert "mine" in checkpoints.available(str(tmp_path))
    assert cli(["--checkpoints", str(tmp_path), "caption", os.path.join(ASSETS, "rocket.jpg"), "--model", "mine"]) == 0
    assert "rocket.jpg:" in capsys.readouterr().out


def test_a_missing_or_wrong_word_map_is_a_clear_error(sgrvinod_files, tmp_path, capsys):
    folder, *_ = sgrvinod_files
    with pytest.raises(ConversionError, match="--word-map"):
        import_checkpoint(str(folder / "BEST_checkpoint_test.pth.tar"), str(tmp_path / "x"))
    small = tmp_path / "small.json"
    small.write_text(json.dumps({"<pad>": 0, "<unk>": 1, "<start>": 2, "<end>": 3, "a": 40}))
    code = cli(["import", str(folder / "BEST_checkpoint_test.pth.tar"), "--word-map", str(small),
                "--out", str(tmp_path / "y")])
    err = capsys.readouterr().err
    assert code == 2 and "wrong word map" in err and "Traceback" not in err


# --------------------------------------------------------------------------------------------
# AaronCCWong/Show-Attend-and-Tell (decoder.py, attention.py, transcribed)

class AwAttention(nn.Module):
    def __init__(self, encoder_dim):
        super().__init__()
        self.U = nn.Linear(512, 512)
        self.W = nn.Linear(encoder_dim, 512)
        self.v = nn.Linear(512, 1)
        self.tanh = nn.Tanh()
        self.softmax = nn.Softmax(1)

    def forward(self, img_features, hidden_state):
        U_h = self.U(hidden_state).unsqueeze(1)
        W_s = self.W(img_features)
        att = self.tanh(W_s + U_h)
        alpha = self.softmax(self.v(att).squeeze(2))
        return (img_features * alpha.unsqueeze(2)).sum(1), alpha


class AwDecoder(nn.Module):
    def __init__(self, vocabulary_size, encoder_dim):
        super().__init__()
        self.init_h = nn.Linear(encoder_dim, 512)
        self.init_c = nn.Linear(encoder_dim, 512)
        self.tanh = nn.Tanh()
        self.f_beta = nn.Linear(512, encoder_dim)
        self.sigmoid = nn.Sigmoid()
        self.deep_output = nn.Linear(512, vocabulary_size)
        self.dropout = nn.Dropout()
        self.attention = AwAttention(encoder_dim)
        self.embedding = nn.Embedding(vocabulary_size, 512)
        self.lstm = nn.LSTMCell(512 + encoder_dim, 512)

    def reference(self, img_features, tokens):
        avg = img_features.mean(dim=1)
        h, c = self.tanh(self.init_h(avg)), self.tanh(self.init_c(avg))
        preds, alphas = [], []
        for t in range(len(tokens)):
            context, alpha = self.attention(img_features, h)
            gate = self.sigmoid(self.f_beta(h))
            h, c = self.lstm(torch.cat((self.embedding(torch.tensor([tokens[t]])), gate * context), dim=1), (h, c))
            preds.append(self.deep_output(self.dropout(h))[0]); alphas.append(alpha[0])
        return torch.stack(preds), torch.stack(alphas)


def test_aaronccwong_import_with_vgg_weights_reproduces_the_original(tmp_path):
    word_dict = {"<start>": 0, "<eos>": 1, "<unk>": 2, "<pad>": 3, **{w: i + 4 for i, w in enumerate(WORDS)}}
    decoder = randomise_(AwDecoder(len(word_dict), 512), 3)
    torch.save(decoder.state_dict(), tmp_path / "model_10.pth")
    (tmp_path / "word_dict.json").write_text(json.dumps(word_dict))
    torch.manual_seed(4)
    vgg = torchvision.models.vgg19(weights=None).eval()   # its own (Kaiming) random init keeps activations O(1)
    torch.save(vgg.state_dict(), tmp_path / "vgg19.pth")

    # without encoder weights: imported, and it says it needs precomputed features
    plain = checkpoints.load(import_checkpoint(str(tmp_path / "model_10.pth"), str(tmp_path / "aw-plain"),
                                               word_map=str(tmp_path / "word_dict.json")))
    assert plain.vision_spec.source == FeatureSource.PRECOMPUTED
    photo = load_photo(os.path.join(ASSETS, "coffee.jpg"))
    with pytest.raises(ValueError, match="precomputed features"):
        Captioner("cpu", checkpoint_dir=str(tmp_path)).caption([photo], str(tmp_path / "aw-plain.safetensors"))

    out = import_checkpoint(str(tmp_path / "model_10.pth"), str(tmp_path / "aw"),
                            word_map=str(tmp_path / "word_dict.json"), encoder_weights=str(tmp_path / "vgg19.pth"))
    lm = checkpoints.load(out)
    net = nn.Sequential(*list(vgg.features.children())[:-1])
    with torch.no_grad():
        fmap = net(imagenet_tensor(os.path.join(ASSETS, "coffee.jpg"), 224))
    their_feats = fmap.permute(0, 2, 3, 1).reshape(1, -1, 512)
    ours_feats = Captioner("cpu", checkpoint_dir=str(tmp_path)).inputs(lm, [photo])[0].grid[None]
    torch.testing.assert_close(ours_feats, their_feats, rtol=1e-4, atol=1e-4)

    ids = [word_dict[w] for w in CAPTION]
    with torch.no_grad():
        their_logits, their_alpha = decoder.reference(their_feats, [0] + ids)
    ours_logits, ours_alpha = teacher_forced(lm.model, their_feats, [lm.vocab.index[w] for w in CAPTION], lm.vocab)
    their_index = {{"<eos>": "<end>"}.get(w, w): i for w, i in word_dict.items()}
    check_same(ours_logits, ours_alpha, lm.vocab, their_logits, their_alpha, their_index)


def test_aaronccwong_resnet152_model_runs_on_its_7x7_grid(tmp_path):
    from viewer.app import session as S
    from viewer.engine.trace import AttentionTrace

    word_dict = {"<start>": 0, "<eos>": 1, "<unk>": 2, "<pad>": 3, **{w: i + 4 for i, w in enumerate(WORDS)}}
    decoder = randomise_(AwDecoder(len(word_dict), 2048), 7)
    torch.save(decoder.state_dict(), tmp_path / "model_resnet.pth")
    (tmp_path / "word_dict.json").write_text(json.dumps(word_dict))
    resnet = randomise_(torchvision.models.resnet152(weights=None), 8)
    torch.save(resnet.state_dict(), tmp_path / "resnet152.pth")
    out = import_checkpoint(str(tmp_path / "model_resnet.pth"), str(tmp_path / "aw152"),
                            word_map=str(tmp_path / "word_dict.json"), encoder_weights=str(tmp_path / "resnet152.pth"))
    lm = checkpoints.load(out)
    with torch.no_grad():   # AaronCCWong's Encoder: resnet152 children[:-2], (B, 2048, 7, 7) -> (B, 49, 2048)
        fmap = nn.Sequential(*list(resnet.children())[:-2])(imagenet_tensor(os.path.join(ASSETS, "rocket.jpg"), 224))
    their_feats = fmap.permute(0, 2, 3, 1).reshape(1, -1, 2048)
    photo = load_photo(os.path.join(ASSETS, "rocket.jpg"))
    captioner = Captioner("cpu", checkpoint_dir=str(tmp_path))
    torch.testing.assert_close(captioner.inputs(lm, [photo])[0].grid[None], their_feats, rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        their_logits, their_alpha = decoder.reference(their_feats, [0] + [word_dict[w] for w in CAPTION])
    ours_logits, ours_alpha = teacher_forced(lm.model, their_feats, [lm.vocab.index[w] for w in CAPTION], lm.vocab)
    check_same(ours_logits, ours_alpha, lm.vocab, their_logits, their_alpha,
               {{"<eos>": "<end>"}.get(w, w): i for w, i in word_dict.items()})

    # the viewer shows a 7x7 map: trace, JSON round trip, overlay, raw numbers, clicked cell
    trace = captioner.caption([photo], "aw152", DecodeSettings(strategy="greedy", max_len=4))[0][0]
    assert trace.grid_side == 7 and trace.grid(0).shape == (7, 7)
    assert AttentionTrace.from_json(trace.to_json()).grid(0).shape == (7, 7)
    ex = S.Exploration(photo, "aw152", DecodeSettings(strategy="greedy"), [trace])
    assert S.overlay(ex, S.Style()).shape == ex.display.shape
    view = S.view_payload(ex, "attention", None, "k")
    assert view["side"] == 7 and len(S.unpacked(view["cells"])) == S.unpacked(view["maps"]).shape[1] == 49   # the page's numbers and view
    h, w = ex.display.shape[:2]                                     # clicks come in view pixels
    assert S.unit_at(ex, w - 1, h - 1) == 48


def test_precomputed_grids_are_read_and_checked(tmp_path):
    from viewer.engine.vision.precomputed import FeatureFiles, FeaturesNotFound
    photo = load_photo(os.path.join(ASSETS, "coffee.jpg"))
    np.save(tmp_path / "coffee.npy", np.ones((14, 14, 512), np.float32))
    assert FeatureFiles(str(tmp_path)).lookup(photo).grid.shape == (196, 512)
    np.save(tmp_path / "coffee.npy", np.ones((10, 512), np.float32))
    with pytest.raises(FeaturesNotFound, match="not a square grid"):
        FeatureFiles(str(tmp_path)).lookup(photo)


# --------------------------------------------------------------------------------------------
# Up-Down reference: ruotianluo's AttModel/UpDownCore and poojahira's DecoderWithAttention

class RtAttention(nn.Module):
    def __init__(self, rnn_size, att_hid_size):
        super().__init__()
        self.h2att = nn.Linear(rnn_size, att_hid_size)
        self.alpha_net = nn.Linear(att_hid_size, 1)


class RtCore(nn.Module):
    def __init__(self, input_encoding_size, rnn_size, att_hid_size):
        super().__init__()
        self.att_lstm = nn.LSTMCell(input_encoding_size + rnn_size * 2, rnn_size)
        self.lang_lstm = nn.LSTMCell(rnn_size * 2, rnn_size)
        self.attention = RtAttention(rnn_size, att_hid_size)


class RtUpDown(nn.Module):
    def __init__(self, vocab_size, input_encoding_size=16, rnn_size=24, att_hid_size=20, feat_size=2048):
        super().__init__()
        self.embed = nn.Sequential(nn.Embedding(vocab_size + 1, input_encoding_size), nn.ReLU(), nn.Dropout(0.5))
        self.fc_embed = nn.Sequential(nn.Linear(feat_size, rnn_size), nn.ReLU(), nn.Dropout(0.5))
        self.att_embed = nn.Sequential(nn.Linear(feat_size, rnn_size), nn.ReLU(), nn.Dropout(0.5))
        self.logit = nn.Linear(rnn_size, vocab_size + 1)
        self.ctx2att = nn.Linear(rnn_size, att_hid_size)
        self.core = RtCore(input_encoding_size, rnn_size, att_hid_size)
        self.rnn_size = rnn_size

    def reference(self, att_feats, tokens):
        """_prepare_feature + get_logprobs_state + UpDownCore.forward + Attention.forward, one image."""
        fc = self.fc_embed(att_feats.mean(1))
        att = self.att_embed(att_feats)
        p_att = self.ctx2att(att)
        z = att_feats.new_zeros(1, self.rnn_size)
        h, c = [z, z], [z, z]
        preds, alphas = [], []
        for word in tokens:
            xt = self.embed(torch.tensor([word]))
            h_att, c_att = self.core.att_lstm(torch.cat([h[1], fc, xt], 1), (h[0], c[0]))
            dot = self.core.attention.alpha_net(torch.tanh(p_att + self.core.attention.h2att(h_att).unsqueeze(1)))
            weight = torch.softmax(dot.squeeze(2), dim=1)
            att_res = torch.bmm(weight.unsqueeze(1), att).squeeze(1)
            h_lang, c_lang = self.core.lang_lstm(torch.cat([att_res, h_att], 1), (h[1], c[1]))
            h, c = [h_att, h_lang], [c_att, c_lang]
            preds.append(self.logit(h_lang)[0]); alphas.append(weight[0])
        return torch.stack(preds), torch.stack(alphas)


class PjAttention(nn.Module):
    def __init__(self, features_dim, decoder_dim, attention_dim, dropout=0.5):
        super().__init__()
        wn = nn.utils.weight_norm
        self.features_att = wn(nn.Linear(features_dim, attention_dim))
        self.decoder_att = wn(nn.Linear(decoder_dim, attention_dim))
        self.full_att = wn(nn.Linear(attention_dim, 1))
        self.relu = nn.ReLU()
        self.dropout = nn.Dropout(p=dropout)
        self.softmax = nn.Softmax(dim=1)

    def forward(self, image_features, decoder_hidden):
        att1 = self.features_att(image_features)
        att2 = self.decoder_att(decoder_hidden)
        att = self.full_att(self.dropout(self.relu(att1 + att2.unsqueeze(1)))).squeeze(2)
        alpha = self.softmax(att)
        return (image_features * alpha.unsqueeze(2)).sum(dim=1), alpha


class PjDecoder(nn.Module):
    def __init__(self, attention_dim, embed_dim, decoder_dim, vocab_size, features_dim=2048, dropout=0.5):
        super().__init__()
        wn = nn.utils.weight_norm
        self.attention = PjAttention(features_dim, decoder_dim, attention_dim)
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.dropout = nn.Dropout(p=dropout)
        self.top_down_attention = nn.LSTMCell(embed_dim + features_dim + decoder_dim, decoder_dim, bias=True)
        self.language_model = nn.LSTMCell(features_dim + decoder_dim, decoder_dim, bias=True)
        self.fc1 = wn(nn.Linear(decoder_dim, vocab_size))
        self.fc = wn(nn.Linear(decoder_dim, vocab_size))
        self.decoder_dim = decoder_dim

    def reference(self, image_features, tokens):
        mean = image_features.mean(1)
        h1 = c1 = h2 = c2 = image_features.new_zeros(1, self.decoder_dim)
        preds, alphas = [], []
        for word in tokens:
            h1, c1 = self.top_down_attention(torch.cat([h2, mean, self.embedding(torch.tensor([word]))], dim=1), (h1, c1))
            awe, alpha = self.attention(image_features, h1)
            h2, c2 = self.language_model(torch.cat([awe, h1], dim=1), (h2, c2))
            preds.append(self.fc(self.dropout(h2))[0]); alphas.append(alpha[0])
        return torch.stack(preds), torch.stack(alphas)


@pytest.fixture(scope="module")
def region_files(tmp_path_factory):
    """One photo's bottom-up features (10 boxes) in every supported layout."""
    folder = tmp_path_factory.mktemp("regions")
    g = np.random.default_rng(0)
    w, h = Image.open(os.path.join(ASSETS, "motorcycle.jpg")).size
    feats = g.random((10, 2048), dtype=np.float32)
    x1, y1 = g.uniform(0, w / 2, 10), g.uniform(0, h / 2, 10)
    boxes = np.stack([x1, y1, x1 + g.uniform(5, w / 2, 10), y1 + g.uniform(5, h / 2, 10)], 1).astype(np.float32)
    def tsv_row(image_id, f, b):
        return "\t".join([image_id, str(w), str(h), str(len(b)), base64.b64encode(b.tobytes()).decode(),
                          base64.b64encode(f.tobytes()).decode()]) + "\n"
    other = g.random((3, 2048), dtype=np.float32)
    (folder / "features.tsv").write_text(tsv_row("999", other, boxes[:3]) + tsv_row("12345", feats, boxes))
    os.makedirs(folder / "cocobu_att"); os.makedirs(folder / "cocobu_box"); os.makedirs(folder / "milvlg")
    np.savez_compressed(folder / "cocobu_att" / "motorcycle.npz", feat=feats)
    np.save(folder / "cocobu_box" / "motorcycle.npy", boxes)
    np.savez_compressed(folder / "milvlg" / "motorcycle.npz", x=feats.T, bbox=boxes, num_bbox=10, image_w=w,
                        image_h=h)   # the caffe-era MILVLG files store x as (2048, K)
    import h5py
    with h5py.File(folder / "val36.hdf5", "w") as f:
        f["image_features"] = feats[None]
        f["image_bb"] = boxes[None]
        norm = boxes / np.array([w, h, w, h], np.float32)
        f["spatial_features"] = np.concatenate([norm, norm[:, 2:] - norm[:, :2]], 1)[None]
    with open(folder / "val36_imgid2idx.pkl", "wb") as f:
        pickle.dump({12345: 0}, f)
    return folder, feats, boxes / np.array([w, h, w, h], np.float32)


@pytest.mark.parametrize("layout", ["features.tsv", "cocobu_att", "milvlg", "val36.hdf5"])
def test_every_region_feature_layout_reads_the_same_regions(region_files, layout, tmp_path):
    from viewer.engine.vision.precomputed import FeatureFiles
    folder, feats, boxes = region_files
    photo = load_photo(os.path.join(ASSETS, "motorcycle.jpg"))
    photo.name = "COCO_val2014_000000012345.jpg" if layout in ("features.tsv", "val36.hdf5") else "motorcycle.jpg"
    regions = FeatureFiles(str(folder / layout)).lookup(photo).regions
    np.testing.assert_allclose(regions.features, feats)
    np.testing.assert_allclose(regions.boxes, boxes, rtol=1e-5, atol=1e-6)


def test_ruotianluo_import_reproduces_the_original(region_files, tmp_path):
    folder, feats, _ = region_files
    vocab = {str(i + 1): w for i, w in enumerate(WORDS + ["UNK"])}
    model = randomise_(RtUpDown(len(vocab)), 5)
    torch.save(model.state_dict(), tmp_path / "model-best.pth")
    opt = argparse.Namespace(caption_model="updown", input_encoding_size=16, rnn_size=24, att_hid_size=20,
                             fc_feat_size=2048, att_feat_size=2048, use_bn=0, use_box=0, norm_att_feat=0, id="t")
    with open(tmp_path / "infos_t-best.pkl", "wb") as f:
        pickle.dump({"opt": opt, "vocab": vocab, "iter": 1000, "epoch": 3}, f, protocol=2)
    out = import_checkpoint(str(tmp_path / "model-best.pth"), str(tmp_path / "rt"), infos=str(tmp_path / "infos_t-best.pkl"))
    lm = checkpoints.load(out)

    x = torch.from_numpy(feats)[None]
    their_index = {w: int(i) for i, w in vocab.items()}
    with torch.no_grad():
        their_logits, their_alpha = model.reference(x, [0] + [their_index[w] for w in CAPTION])
    ours_logits, ours_alpha = teacher_forced(lm.model, x, [lm.vocab.index[w] for w in CAPTION], lm.vocab)
    check_same(ours_logits, ours_alpha, lm.vocab, their_logits, their_alpha,
               {**{("<unk>" if w == "UNK" else w): i for w, i in their_index.items()}, "<end>": 0})

    # through the pipeline, on the photo whose features the user has
    photo = load_photo(os.path.join(ASSETS, "motorcycle.jpg"))
    captioner = Captioner("cpu", checkpoint_dir=str(tmp_path), feature_files=str(folder / "cocobu_att"))
    trace = captioner.force([photo], out, [" ".join(CAPTION)])[0]
    torch.testing.assert_close(torch.tensor(np.stack([s.attention for s in trace.steps[:6]])), their_alpha[:6],
                               rtol=1e-3, atol=1e-5)
    assert trace.attends_to == "regions" and len(trace.region_labels) == 10
    other = load_photo(os.path.join(ASSETS, "rocket.jpg"))
    with pytest.raises(ValueError, match="no precomputed features for rocket.jpg"):
        captioner.caption([other], out)


def test_poojahira_import_folds_weight_norm_and_reproduces_the_original(region_files, tmp_path):
    folder, feats, _ = region_files
    word_map = sgrvinod_word_map()
    with foreign_module("models", Attention=PjAttention, DecoderWithAttention=PjDecoder):
        decoder = randomise_(PjDecoder(20, 16, 24, len(word_map)), 6)
        opt = torch.optim.Adamax(decoder.parameters())
        torch.save({"epoch": 12, "epochs_since_improvement": 1, "bleu-4": 0.31, "decoder": decoder,
                    "decoder_optimizer": opt}, tmp_path / "BEST_checkpoint_pj.pth.tar")
    (tmp_path / "WORDMAP.json").write_text(json.dumps(word_map))
    out = import_checkpoint(str(tmp_path / "BEST_checkpoint_pj.pth.tar"), str(tmp_path / "pj"),
                            word_map=str(tmp_path / "WORDMAP.json"))
    lm = checkpoints.load(out)
    assert lm.meta["model_type"] == "updown-poojahira"
    x = torch.from_numpy(feats)[None]
    with torch.no_grad():
        their_logits, their_alpha = decoder.reference(x, [word_map["<start>"]] + [word_map[w] for w in CAPTION])
    ours_logits, ours_alpha = teacher_forced(lm.model, x, [lm.vocab.index[w] for w in CAPTION], lm.vocab)
    check_same(ours_logits, ours_alpha, lm.vocab, their_logits, their_alpha, word_map)

    photo = load_photo(os.path.join(ASSETS, "motorcycle.jpg"))
    photo.name = "COCO_val2014_000000012345.jpg"
    captioner = Captioner("cpu", checkpoint_dir=str(tmp_path), feature_files=str(folder / "val36.hdf5"))
    hyps = captioner.caption([photo], out, DecodeSettings(strategy="beam", beam_size=3))[0]
    assert len(hyps) == 3 and all(abs(s.attention.sum() - 1) < 1e-5 for s in hyps[0].steps)


# --------------------------------------------------------------------------------------------
# safety

class Payload:
    """What an attacker pickles: unpickling calls open(path, 'w'), creating the file."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.mark.parametrize("how", ["torch-zip", "torch-legacy", "plain-pickle"])
def test_a_malicious_pickle_is_refused_without_running_its_payload(tmp_path, how):
    marker = tmp_path / "pwned"
    evil = {"encoder": None, "decoder": Payload(str(marker))}
    path = tmp_path / "evil.pth.tar"
    if how == "plain-pickle":
        path.write_bytes(pickle.dumps(evil))
    else:
        torch.save(evil, path, _use_new_zipfile_serialization=how == "torch-zip")
    with pytest.raises(UnsafePickleError, match="io.open"):
        import_checkpoint(str(path), str(tmp_path / "out"), word_map="unused.json")
    assert not marker.exists()
    assert not (tmp_path / "out.safetensors").exists()


def test_a_pickle_cannot_change_the_functions_it_is_allowed_to_call(tmp_path):
    import torch._utils
    before = torch._utils._rebuild_tensor_v2.__defaults__
    # GLOBAL torch._utils._rebuild_tensor_v2; BUILD (None, {"__defaults__": (...)}): setattr on the function
    payload = (b"ctorch._utils\n_rebuild_tensor_v2\n(N}S'__defaults__'\n(I1\ntstb.")
    (tmp_path / "build.pkl").write_bytes(payload)
    safe_load(str(tmp_path / "build.pkl"))
    assert torch._utils._rebuild_tensor_v2.__defaults__ == before


def test_unknown_globals_are_named_and_the_cli_prints_one_line(tmp_path, capsys):
    marker = tmp_path / "ran"
    path = tmp_path / "sys.pkl"
    path.write_bytes(b"cposix\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR.")   # os.system("touch ...")
    code = cli(["import", str(path), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "posix.system" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not marker.exists()


def test_torchscript_archives_are_refused(tmp_path):
    scripted = torch.jit.script(nn.Linear(2, 2))
    scripted.save(str(tmp_path / "model.pt"))
    with pytest.raises(UnsafePickleError, match="TorchScript"):
        safe_load(str(tmp_path / "model.pt"))


def test_records_keep_state_but_never_become_the_class(sgrvinod_files):
    folder, encoder, *_ = sgrvinod_files
    obj = safe_load(str(folder / "BEST_checkpoint_test.pth.tar"))
    assert type(obj["encoder"]).__name__ == "Encoder" and not isinstance(obj["encoder"], nn.Module)
    assert type(obj["decoder_optimizer"]).__name__ == "Adam"
    assert obj["bleu-4"] == 0.23


def test_not_a_checkpoint_is_a_clear_error(tmp_path):
    junk = tmp_path / "junk.pth"
    junk.write_bytes(b"\x00\x01not a pickle")
    with pytest.raises(ValueError, match="not a readable pickle or PyTorch file"):
        import_checkpoint(str(junk), str(tmp_path / "o"))
    torch.save({"something": torch.zeros(2)}, tmp_path / "other.pth")
    with pytest.raises(ConversionError, match="not a checkpoint of sgrvinod"):
        import_checkpoint(str(tmp_path / "other.pth"), str(tmp_path / "o"))


def test_beam_search_runs_on_an_imported_model(sgrvinod_files, tmp_path):
    folder, *_ = sgrvinod_files
    lm = checkpoints.load(import_checkpoint(str(folder / "BEST_checkpoint_test.pth.tar"), str(tmp_path / "b"),
                                            word_map=str(folder / "WORDMAP_test.json")))
    feats = torch.randn(2, 196, 2048)
    hyps = decode(lm.model, feats, torch.ones(2, 196, dtype=torch.bool), DecodeSettings(strategy="beam", beam_size=3),
                  lm.vocab)
    assert [len(h) for h in hyps] == [3, 3]


def test_an_imported_model_is_evaluated_from_the_photos_with_grounding(sgrvinod_files, tiny_data, tmp_path, capsys):
    """Imported models bring their own encoder, so evaluation runs through the pipeline; the
    forced references' "cat" (in the model's vocabulary) is grounded on the detector's cat box."""
    folder, *_ = sgrvinod_files
    assert cli(["--checkpoints", str(tmp_path), "import", str(folder / "BEST_checkpoint_test.pth.tar"),
                "--word-map", str(folder / "WORDMAP_test.json"), "--out", "sg"]) == 0
    capsys.readouterr()
    assert cli(["--checkpoints", str(tmp_path), "evaluate", "--model", "sg", "--data", tiny_data, "--json",
                "--beam", "2", "--max-len", "5", "--captions-out", str(tmp_path / "c.json")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["images"] == 2 and "CIDEr" in result
    forced = result["grounding"]["references_forced"]
    assert forced["object_words"] == 4 and forced["detected"] == 4        # chelsea.jpg: "cat" in all 3 captions, "tabby" (a cat) in one
    assert forced["entropy_uniform"] == round(float(np.log(196)), 4)
    # the block is computed from the imported model's forced attention: recompute it here
    from viewer.analysis.grounding import Caption, grid_units, grounding_block
    from viewer.engine.pipeline import Captioner
    from viewer.data.datasets import load_dataset
    data, captioner = load_dataset(tiny_data), Captioner("cpu", checkpoint_dir=str(tmp_path))
    captions = []
    for i, path in enumerate(data.split("dev")):
        photo = load_photo(path)
        feats = captioner.features([photo], with_regions=True)[0]
        for ref in data.captions[path]:
            trace = captioner.force([photo], "sg", [ref])[0]
            captions.append(Caption(i, trace.step_words(), np.stack([s.attention for s in trace.steps]),
                                    grid_units(196), feats.regions, (photo.width, photo.height)))
    again = grounding_block(captions)
    assert again["object_words"] == forced["object_words"] and again["detected"] == forced["detected"]
    assert np.isclose(again["mass_in_box"], forced["mass_in_box"], atol=2e-3)
    assert np.isclose(again["pointing"], forced["pointing"], atol=1e-4)


def test_the_app_lists_an_imported_model_and_explores_with_it(sgrvinod_files, tmp_path):
    from viewer.app import session as S

    folder, *_ = sgrvinod_files
    import_checkpoint(str(folder / "BEST_checkpoint_test.pth.tar"), str(tmp_path / "theirs"),
                      word_map=str(folder / "WORDMAP_test.json"))
    studio = S.Studio(Captioner("cpu", checkpoint_dir=str(tmp_path)))
    assert studio.models() == ["theirs"]
    ex = studio.explore(os.path.join(ASSETS, "chelsea.jpg"), "theirs", DecodeSettings(strategy="greedy", max_len=5))
    assert ex.trace.attends_to == "grid" and ex.trace.grid(0).shape == (14, 14)
    assert S.overlay(ex, S.Style()).ndim == 3
