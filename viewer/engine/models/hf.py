"""A local Hugging Face captioning model behind our step interface: `--model hf:PATH`.

PATH is a folder as `save_pretrained` writes it: config.json, the weights as *.safetensors,
the tokenizer and preprocessor_config.json. Supported: `VisionEncoderDecoderModel` with a ViT or
DeiT encoder and a GPT-2 or BERT decoder (cross-attention), and `BlipForConditionalGeneration`
(its ViT and its BERT-style text decoder); any other architecture is refused by name.

Safe by default: the folder is checked before transformers reads it; weights are read only from
safetensors (`use_safetensors=True`; a folder with only a pickled pytorch_model.bin is refused
before anything opens it), remote code is never trusted, nothing is downloaded but what a hub id
("org/name", when no such local path exists) names, and of it only safetensors, JSON and text files.

How it runs: the ViT (vision/hf.py) turns a photo into its special and patch tokens, once per
photo (the pipeline caches them like any carried encoder's features). The decoder then runs
in OUR decoding loop (greedy, beam, sampling, forced, branching) one token per `forward_step`,
built here from the HF modules' own layers (`HFDecoder`, one subclass per decoder kind: `HFGPT2`
for GPT-2, `HFBert` for BERT and BLIP's BERT-style text decoder; tests/test_hf.py checks each
against the model's own generate and forward). The state holds, per layer, the cross-attention
keys/values of [special tokens; patches] (computed once) and the self-attention keys/values of the
tokens so far (reordered with the beams).

Features and the mask: a grid model's units are the patches (K = (image/patch)^2, row-major), so
each patch row carries [patch token, special tokens] ((1 + n) x the encoder width; the special
tokens are ViT's class token, or DeiT's class and distillation tokens, n = 2); they are read from
the first visible row (every row holds the same copy), so hiding any patch, whatever its features,
changes nothing. Hiding takes patches out of every cross-attention; the special tokens are always
seen. (Per unit, as for every model: the ViT mixed all patches before the decoder sees them.)

What the viewer shows: `Step.heads` (B, layers, heads, K) is every layer's and head's
cross-attention on the patches, as the model computed it (these sum to 1 minus the special tokens'
weight); `Step.attention` is the last layer's head mean over the patches, renormalised to sum to 1,
and `Step.outside` the special tokens' weight in that mean (reported beside the map as the class
token's). Steering puts the steered map on the patches of every layer and head (the special tokens
get 0 at that step).

Tokens: each step is one tokenizer token (sub-words too); `HFVocab.words` are the tokenizer's
token strings (the JSON keeps every one), the caption is the tokenizer's decoded text.
"""
from __future__ import annotations

import json
import os
import re

import torch
import torch.nn.functional as F

from ..checkpoints import CheckpointError, LoadedModel
from ..images import AttendsTo
from ..vision.spec import FeatureSource, VisionSpec
from .base import CaptionModel, State, Step

PREFIX = "hf:"
INSTALL = "pip install .[hf]"
SUPPORTED = {("vision-encoder-decoder", enc, dec): f"VisionEncoderDecoderModel ({enc_name} + {dec_name})"
             for enc, enc_name in (("vit", "ViT"), ("deit", "DeiT")) for dec, dec_name in (("gpt2", "GPT-2"), ("bert", "BERT"))}
SUPPORTED[("blip", "BlipForConditionalGeneration")] = "BlipForConditionalGeneration"
SPECIAL_TOKENS = {"deit": 2}   # tokens before the patches: ViT's class token (1), DeiT's class + distillation (2)
TOKENIZER_FILES = ("tokenizer.json", "vocab.json")
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")   # "Salesforce/blip-image-captioning-base"
HUB_FILES = ["*.json", "*.safetensors", "*.txt", "*.model"]   # what a model needs; never a pickle   # one of them (fast tokenizer, or GPT-2's vocab + merges)


def require_transformers():
    try:
        import transformers
    except ImportError:
        raise CheckpointError(f"hf: models need the `transformers` package: {INSTALL}") from None
    return transformers


# ---------------------------------------------------------------- the folder, checked before anything reads it

def check_folder(path: str) -> dict:
    """The folder's config.json after checking every file a model needs is there; CheckpointError
    naming the first missing file, a pickle-only folder or an unsupported architecture."""
    if not os.path.isdir(path):
        raise CheckpointError(f"{PREFIX}{path}: no such folder")
    files = set(os.listdir(path))
    if "config.json" not in files:
        raise CheckpointError(f"{PREFIX}{path}: missing config.json")
    if not any(f.endswith(".safetensors") for f in files):
        pickles = sorted(f for f in files if f.endswith((".bin", ".pt", ".pth", ".ckpt")))
        if pickles:
            raise CheckpointError(f"{PREFIX}{path}: weights only as a pickle ({pickles[0]}); this viewer reads "
                                  "weights only from safetensors (convert with save_pretrained(safe_serialization=True))")
        raise CheckpointError(f"{PREFIX}{path}: missing model.safetensors")
    if "model.safetensors.index.json" in files:
        with open(os.path.join(path, "model.safetensors.index.json")) as f:
            shards = sorted(set(json.load(f).get("weight_map", {}).values()))
        for shard in shards:
            if shard not in files:
                raise CheckpointError(f"{PREFIX}{path}: missing {shard}")
    if "preprocessor_config.json" not in files:
        raise CheckpointError(f"{PREFIX}{path}: missing preprocessor_config.json")
    if not files & set(TOKENIZER_FILES):
        raise CheckpointError(f"{PREFIX}{path}: missing tokenizer.json (or vocab.json + merges.txt)")
    if "vocab.json" in files and "tokenizer.json" not in files and "merges.txt" not in files:
        raise CheckpointError(f"{PREFIX}{path}: missing merges.txt")
    try:
        with open(os.path.join(path, "config.json")) as f:
            config = json.load(f)
    except (OSError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{PREFIX}{path}: config.json is not readable JSON ({err})") from None
    kind = architecture(config)
    if kind not in SUPPORTED:
        known = "; ".join(SUPPORTED.values())
        raise CheckpointError(f"{PREFIX}{path}: architecture {describe(config, kind)} is not supported; supported: {known}")
    return config


def architecture(config: dict) -> tuple[str, ...]:
    """What config.json says the model is: (model_type, encoder type, decoder type) for a
    VisionEncoderDecoderModel, else (model_type, its first architecture)."""
    if config.get("model_type") == "vision-encoder-decoder":
        return ("vision-encoder-decoder", str((config.get("encoder") or {}).get("model_type")),
                str((config.get("decoder") or {}).get("model_type")))
    return (str(config.get("model_type")), str((config.get("architectures") or ["?"])[0]))


def describe(config: dict, kind: tuple[str, ...]) -> str:
    names = ", ".join(config.get("architectures") or []) or kind[0]
    return f"{names} ({kind[1]} + {kind[2]})" if kind[0] == "vision-encoder-decoder" else names


def encoder_config(config: dict) -> dict:
    return config["vision_config"] if architecture(config)[0] == "blip" else config["encoder"]


def folder_meta(spec: str, folder: str, config: dict) -> dict:
    """The metadata a viewer checkpoint would carry, from config.json alone (nothing else is read):
    `checkpoints.read_meta` gives it for `hf:` folders, `load_folder` for the loaded model."""
    enc = encoder_config(config)
    text = config["text_config"] if architecture(config)[0] == "blip" else config["decoder"]
    side = enc.get("image_size", 224) // enc.get("patch_size", 16)
    special = SPECIAL_TOKENS.get(enc.get("model_type"), 1)
    vision = VisionSpec(FeatureSource.CARRIED, {"type": "hf-" + str(enc.get("model_type", "vit")),
                                                 "folder": os.path.basename(os.path.abspath(folder)),
                                                 "grid": side, "dim": (1 + special) * enc.get("hidden_size", 768)})
    return {"name": spec, "model_type": "hf:" + "+".join(architecture(config)[1:]), "hparams": {},
            "vocab_size": text.get("vocab_size"), "vision_spec_key": vision.key, "vision_spec": vision.to_json(),
            "hf_folder": os.path.abspath(folder)}


def folder_of(spec: str) -> str:
    """`hf:PATH` -> the local folder: PATH itself, or for a hub id ("org/name", no such folder here)
    the hub's copy, fetched once when the machine is online (safetensors, JSON and tokenizer files
    only, never a pickle) and read from the hub's cache after that."""
    path = spec[len(PREFIX):] if spec.startswith(PREFIX) else spec
    if os.path.isdir(path) or not HUB_ID.fullmatch(path) or os.path.exists(path.split("/")[0]):
        return path   # a local path (a mistyped one too: "runs/blip" never goes to the hub when runs/ is here)
    try:
        from huggingface_hub import snapshot_download
        return snapshot_download(path, allow_patterns=HUB_FILES)
    except Exception as err:   # offline, no such repository, no access: one message says what to do
        raise CheckpointError(f"{PREFIX}{path}: no such folder here, and the Hugging Face hub did not give it "
                              f"({type(err).__name__}); on a machine with internet run `huggingface-cli download "
                              f"{path} --local-dir FOLDER` and open hf:FOLDER") from None


# ---------------------------------------------------------------- tokens

class HFVocab:
    """The tokenizer as a `Vocabulary`: `words[i]` is token i's string, the end-of-text token is
    "<end>" (as every trace expects); one extra id, the decoder's vocab_size, is a virtual "<start>" that the
    model reads as the decoder start token (GPT-2's start and end are one token, and decoding never
    generates <start> or <pad>: the virtual id is both)."""

    def __init__(self, tokenizer, end_id: int, size: int):
        """`size`: the decoder's vocabulary (>= the tokenizer's; ids the tokenizer lacks are named "<id>")."""
        self.tokenizer = tokenizer
        words = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        self.words = [w if w is not None else f"<{i}>" for i, w in enumerate(words)]
        self.words += [f"<{i}>" for i in range(len(self.words), size)]
        self.end = end_id
        self.words[end_id] = "<end>"
        self.start = self.pad = size          # the virtual <start>
        self.words.append("<start>")
        self.unk = tokenizer.unk_token_id if tokenizer.unk_token_id is not None else end_id
        self.index = {}
        for i, w in enumerate(self.words):
            self.index.setdefault(w, i)

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids) -> list[str]:
        return [self.words[i] for i in ids]

    def text(self, ids, clean: bool = True) -> str:
        """The caption the tokens spell (sub-words joined as the tokenizer joins them; `clean`: with
        its clean-up of spaces before punctuation)."""
        kept = [i for i in ids if i not in (self.end, self.start)]
        return self.tokenizer.decode(kept, skip_special_tokens=True,
                                     **({} if clean else {"clean_up_tokenization_spaces": False})).strip()

    def pieces(self, ids) -> list[str]:
        """Each token's share of the text (decoded incrementally without the clean-up, which may
        rewrite earlier text, so any tokenizer's joining rule holds): " cup", "cake" are one word in
        two steps; the end token's share is ""."""
        out, before = [], ""
        for t in range(1, len(ids) + 1):
            now = self.text(ids[:t], clean=False)
            shared = len(os.path.commonprefix([before, now]))
            out.append(now[shared:])
            before = now
        return out


# ---------------------------------------------------------------- the decoder behind the step interface

class HFDecoder(CaptionModel):
    """What every supported decoder shares: the virtual <start>, the packed features, the cached
    cross-attention keys/values, the masked (or steered) cross-attention and the Step it makes.
    A subclass says how its layers embed a token, project keys/values and run one layer."""

    attends_to = AttendsTo.GRID

    def __init__(self, hf_model, start_id: int, vocab_size: int, enc_dim: int, n_layers: int, n_heads: int,
                 special: int = 1):
        """`start_id`: the decoder start token, fed whenever decoding feeds the virtual <start> (id vocab_size);
        `special`: the encoder's tokens before its patches (class, distillation)."""
        super().__init__()
        self.hf = hf_model
        self.start_id, self.virtual_start = start_id, vocab_size
        self.enc_dim, self.n_layers, self.n_heads, self.special = enc_dim, n_layers, n_heads, special
        self.proj = getattr(hf_model, "enc_to_dec_proj", None)   # encoder width -> decoder width, where they differ

    @property
    def image_state(self) -> tuple[str, ...]:
        return ("mask", *(f"cross_{kv}{i}" for i in range(self.n_layers) for kv in "kv"))

    def _split(self, t: torch.Tensor) -> torch.Tensor:
        return t.view(t.shape[0], t.shape[1], self.n_heads, -1).transpose(1, 2)

    def _merge(self, t: torch.Tensor) -> torch.Tensor:
        return t.transpose(1, 2).reshape(t.shape[0], t.shape[2], -1)

    def split_features(self, feats: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, K, (1 + n) D) packed rows -> (B, n + K, D') encoder states [special tokens; patches]
        (see above), projected to the decoder's width where the model has that projection."""
        d = self.enc_dim
        first = mask.float().argmax(1)                      # the first visible row (every row holds the special tokens)
        special = feats[torch.arange(len(feats), device=feats.device), first, d:].view(len(feats), self.special, d)
        states = torch.cat([special, feats[..., :d]], 1)
        return self.proj(states) if self.proj is not None else states

    def init_state(self, feats, mask, seed=None) -> State:
        enc = self.split_features(feats, mask)
        state = {"mask": mask, "t": torch.zeros(len(feats), dtype=torch.long, device=feats.device)}
        for i in range(self.n_layers):
            state[f"cross_k{i}"], state[f"cross_v{i}"] = self.cross_keys_values(i, enc)
            state[f"self_k{i}"] = state[f"self_v{i}"] = enc.new_zeros(len(enc), 0, state[f"cross_k{i}"].shape[-1])
        return state

    def self_attend(self, state, new, i, q, k, v, scale):
        """Attention over the tokens so far: this token's k, v appended to the cached ones."""
        new[f"self_k{i}"] = torch.cat([state[f"self_k{i}"], k], 1)
        new[f"self_v{i}"] = torch.cat([state[f"self_v{i}"], v], 1)
        w = F.softmax((self._split(q) @ self._split(new[f"self_k{i}"]).transpose(-1, -2)) * scale, -1)
        return self._merge(w @ self._split(new[f"self_v{i}"]))

    def cross_attend(self, state, i, q, scale):
        """Attention over [special tokens; patches], hidden patches masked out, or steered; -> output, (B, H, n + K)."""
        n = self.special
        allowed = torch.cat([torch.ones_like(state["mask"][:, :1]).expand(-1, n), state["mask"]], 1)[:, None, None, :]
        q = self._split(q)
        scores = (q @ self._split(state[f"cross_k{i}"]).transpose(-1, -2)) * scale
        w = F.softmax(scores.float().masked_fill(~allowed, float("-inf")), -1).to(q.dtype)
        if "steer" in state:   # base.steered: every layer and head looks at the map; the special tokens get 0
            steer = state["steer"]
            w = torch.cat([torch.zeros_like(steer[:, :1]).expand(-1, n), steer], 1).to(w.dtype)[:, None, None].expand_as(w)
        return self._merge(w @ self._split(state[f"cross_v{i}"])), w[:, :, 0]

    def forward_step(self, state: State, words: torch.Tensor) -> tuple[Step, State]:
        ids = torch.where(words == self.virtual_start, torch.full_like(words, self.start_id), words)
        new = {**state, "t": state["t"] + 1}
        x = self.embed(ids[:, None], state["t"][:, None])
        heads = []
        for i in range(self.n_layers):
            x, w = self.layer(i, x, state, new)
            heads.append(w)
        heads = torch.stack(heads, 1)                                       # (B, layers, heads, n + K)
        logits = self.logits(x[:, 0]).float()
        logits = torch.cat([logits, logits.new_full((len(logits), 1), float("-inf"))], 1)   # the virtual <start>
        summary = heads[:, -1].mean(1)
        patches = summary[:, self.special:]
        attention = patches / patches.sum(-1, keepdim=True).clamp_min(1e-12)
        return Step(logits, attention, heads=heads[..., self.special:], outside=summary[:, :self.special].sum(-1)), new


class HFGPT2(HFDecoder):
    """A VisionEncoderDecoderModel's GPT-2 decoder (pre-LayerNorm blocks, Conv1D projections)."""

    def __init__(self, hf_model, start_id: int, special: int = 1):
        cfg = hf_model.config.decoder
        super().__init__(hf_model, start_id, cfg.vocab_size, hf_model.config.encoder.hidden_size, cfg.n_layer, cfg.n_head,
                         special)
        self.decoder = hf_model.decoder                     # GPT2LMHeadModel
        self.gpt = self.decoder.transformer

    @staticmethod
    def _scale(attn) -> float:
        scale = (attn.embed_dim // attn.num_heads) ** -0.5 if attn.scale_attn_weights else 1.0
        return scale / float(attn.layer_idx + 1) if attn.scale_attn_by_inverse_layer_idx else scale

    def cross_keys_values(self, i, enc):
        ca = self.gpt.h[i].crossattention
        return ca.c_attn(enc).split(ca.split_size, dim=2)

    def embed(self, ids, positions):
        return self.gpt.wte(ids) + self.gpt.wpe(positions)

    def layer(self, i, x, state, new):
        block = self.gpt.h[i]
        sa, ca = block.attn, block.crossattention
        q, k, v = sa.c_attn(block.ln_1(x)).split(sa.split_size, dim=2)
        x = x + sa.c_proj(self.self_attend(state, new, i, q, k, v, self._scale(sa)))
        attended, w = self.cross_attend(state, i, ca.q_attn(block.ln_cross_attn(x)), self._scale(ca))
        x = x + ca.c_proj(attended)
        return x + block.mlp(block.ln_2(x)), w

    def logits(self, x):
        return self.decoder.lm_head(self.gpt.ln_f(x))

    def cascade(self):
        """The decoder's parts from the output back to the input (explain.randomisation_check)."""
        blocks = [(f"h.{i}", self.gpt.h[i]) for i in reversed(range(self.n_layers))]
        first = [("enc_to_dec_proj", self.proj)] if self.proj is not None else []
        return [("lm_head", self.decoder.lm_head), ("ln_f", self.gpt.ln_f), *blocks, ("wpe", self.gpt.wpe), *first]


class HFBert(HFDecoder):
    """A BERT-style decoder (post-LayerNorm layers with cross-attention): a VisionEncoderDecoderModel's
    BertLMHeadModel, or BlipForConditionalGeneration's text decoder (the same layout)."""

    def __init__(self, hf_model, start_id: int, special: int = 1):
        blip = hasattr(hf_model, "text_decoder")
        cfg = hf_model.config.text_config if blip else hf_model.config.decoder
        enc = hf_model.config.vision_config if blip else hf_model.config.encoder
        super().__init__(hf_model, start_id, cfg.vocab_size, enc.hidden_size, cfg.num_hidden_layers,
                         cfg.num_attention_heads, special)
        self.text = hf_model.text_decoder if blip else hf_model.decoder   # BlipTextLMHeadModel / BertLMHeadModel
        self.scale = (cfg.hidden_size // cfg.num_attention_heads) ** -0.5

    def cross_keys_values(self, i, enc):
        ca = self.text.bert.encoder.layer[i].crossattention.self
        return ca.key(enc), ca.value(enc)

    def embed(self, ids, positions):
        return self.text.bert.embeddings(input_ids=ids, position_ids=positions)   # (BERT adds token type 0)

    def layer(self, i, x, state, new):
        layer = self.text.bert.encoder.layer[i]
        sa, ca = layer.attention, layer.crossattention
        x = sa.output(self.self_attend(state, new, i, sa.self.query(x), sa.self.key(x), sa.self.value(x), self.scale), x)
        attended, w = self.cross_attend(state, i, ca.self.query(x), self.scale)
        x = ca.output(attended, x)
        return layer.output(layer.intermediate(x), x), w

    def logits(self, x):
        return self.text.cls(x)

    def cascade(self):
        """The decoder's parts from the output back to the input (explain.randomisation_check)."""
        layers = [(f"layer.{i}", self.text.bert.encoder.layer[i]) for i in reversed(range(self.n_layers))]
        first = [("enc_to_dec_proj", self.proj)] if self.proj is not None else []
        return [("cls", self.text.cls), *layers, ("embeddings", self.text.bert.embeddings), *first]


# ---------------------------------------------------------------- loading

class HFLoadedModel(LoadedModel):
    """A LoadedModel whose image encoder is the HF model's own (`image_encoder`, used by the pipeline)."""

    def __init__(self, model, vocab, meta, path, image_encoder):
        super().__init__(model, vocab, meta, path)
        self.image_encoder = image_encoder


def load_folder(spec: str, device: torch.device | str = "cpu", attn_implementation: str | None = None) -> HFLoadedModel:
    """`hf:PATH` -> a model ready for the pipeline; CheckpointError says what is wrong."""
    path = folder_of(spec)
    config = check_folder(path)                 # before transformers is imported or any file is read by it
    transformers = require_transformers()
    from ..vision.hf import HFImageEncoder
    kw = {"use_safetensors": True, "trust_remote_code": False, "local_files_only": True}
    kind = architecture(config)
    blip = kind[0] == "blip"
    cls = transformers.BlipForConditionalGeneration if blip else transformers.VisionEncoderDecoderModel
    try:
        model = cls.from_pretrained(path, **kw, **({"attn_implementation": attn_implementation} if attn_implementation else {}))
        tokenizer = transformers.AutoTokenizer.from_pretrained(path, **kw)
        processor = transformers.AutoImageProcessor.from_pretrained(path, **kw)
    except (OSError, ValueError, KeyError) as err:
        raise CheckpointError(f"{spec}: transformers could not load it ({err})") from None
    model = model.to(device).eval().requires_grad_(False)
    if blip:    # as BlipForConditionalGeneration.generate: start with bos ([DEC]), end at [SEP]
        text, enc = model.config.text_config, model.config.vision_config
        start, end, size, vision_module = text.bos_token_id, text.sep_token_id, text.vocab_size, model.vision_model
    else:
        cfg, text, enc = model.config, model.config.decoder, model.config.encoder
        start = cfg.decoder_start_token_id if cfg.decoder_start_token_id is not None else text.bos_token_id
        end = cfg.eos_token_id if cfg.eos_token_id is not None else text.eos_token_id
        size, vision_module = text.vocab_size, model.encoder
    start = start if start is not None else tokenizer.cls_token_id     # BERT decoders: [CLS] ... [SEP]
    end = end if end is not None else (tokenizer.eos_token_id if tokenizer.eos_token_id is not None
                                       else tokenizer.sep_token_id)
    if start is None or end is None:
        raise CheckpointError(f"{spec}: config.json names no decoder start token or end token")
    if len(tokenizer) > size:
        raise CheckpointError(f"{spec}: the tokenizer has {len(tokenizer)} tokens, the decoder {size}")
    vocab = HFVocab(tokenizer, int(end), size)
    special = SPECIAL_TOKENS.get(enc.model_type, 1)
    decoder = (HFGPT2 if kind[-1] == "gpt2" else HFBert)(model, int(start), special)
    meta = {**folder_meta(spec, path, config), "vocab_size": len(vocab)}
    side = meta["vision_spec"]["grid"]   # the patch grid, as folder_meta read it from config.json
    return HFLoadedModel(decoder, vocab, meta, spec, HFImageEncoder(vision_module, processor, side, special, device))


__all__ = ["HFVocab", "HFDecoder", "HFGPT2", "HFBert", "HFLoadedModel", "load_folder", "check_folder", "folder_meta",
           "PREFIX"]
