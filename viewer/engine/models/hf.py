"""A Hugging Face captioning model behind our step interface: `--model hf:PATH` (a local folder) or
`--model hf-hub:ORG/NAME[@REVISION]` (fetched from the hub, only when asked in this form).

PATH is a folder as `save_pretrained` writes it or as the hub has it: config.json; the weights as
model.safetensors, pytorch_model.bin, or a sharded index of either; the tokenizer as
tokenizer.json (with or without tokenizer_config.json), GPT-2's vocab.json + merges.txt, or
WordPiece's vocab.txt; the image processor as preprocessor_config.json or nested in a processor's
processor_config.json. Supported: `VisionEncoderDecoderModel` with a ViT or DeiT encoder and a GPT-2
or BERT decoder (cross-attention), and `BlipForConditionalGeneration` (its ViT and its BERT-style
text decoder); any other architecture is refused by name.

Safe by default: the folder is checked before transformers reads it, and every problem is one
CheckpointError naming the file (a malformed config, a missing file, corrupt safetensors, weights
of another shape, relative position attention). A pickle (pytorch_model.bin) is read with
`torch.load(weights_only=True)`, which builds tensors and plain containers only: a file that needs
anything else is refused and nothing in it runs. Remote code is never trusted; nothing touches the
network unless `hf-hub:` asks, and of the hub's files only safetensors, JSON and text ones come.

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

Prompt: BLIP was fine-tuned to continue the text "a picture of". `hf:PATH#prompt` (or
`#prompt=TEXT`) forces those tokens after the start token before the first step; they are left out
of the caption, its steps and its maps, and the name (so every trace) says the prompt was on. Off
by default: figures of an `hf:` model name the option when they use it.
"""
from __future__ import annotations

import json
import os
import pickle
import re

import torch
import torch.nn.functional as F

from ..loaded import CheckpointError, LoadedModel
from ..images import AttendsTo
from ..vision.spec import FeatureSource, VisionSpec
from ..words import Word, marker_of, split_words, starts_word
from .base import CaptionModel, State, Step

PREFIX = "hf:"           # hf:PATH, a local folder (never a network request)
HUB_PREFIX = "hf-hub:"   # hf-hub:ORG/NAME[@REVISION]: fetched from the Hugging Face hub, only when asked this way
INSTALL = "pip install .[hf]"
SUPPORTED = {("vision-encoder-decoder", enc, dec): f"VisionEncoderDecoderModel ({enc_name} + {dec_name})"
             for enc, enc_name in (("vit", "ViT"), ("deit", "DeiT")) for dec, dec_name in (("gpt2", "GPT-2"), ("bert", "BERT"))}
SUPPORTED[("blip", "BlipForConditionalGeneration")] = "BlipForConditionalGeneration"
SPECIAL_TOKENS = {"deit": 2}   # tokens before the patches: ViT's class token (1), DeiT's class + distillation (2)
BLIP_PROMPT = "a picture of"   # the text prompt BLIP's captioner was fine-tuned with (the `#prompt` option)
IMAGE_SIZE = {"blip": 384}     # the config classes' defaults, which a saved config.json leaves out (ViT, DeiT: 224)
HUB_ID = re.compile(r"([A-Za-z0-9][\w.-]*/[\w.-]+)(?:@([\w./-]+))?")   # "Salesforce/blip-image-captioning-base@main"
HUB_FILES = ["*.json", "*.safetensors", "*.txt", "*.model"]   # what a model needs; never a pickle
PICKLES = (".bin", ".pt", ".pth", ".ckpt")
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")   # as written today: flat, or nested in a processor's
TOKENIZER_LAYOUTS = (("tokenizer.json",), ("vocab.json", "merges.txt"), ("vocab.txt",))   # fast; GPT-2's BPE; WordPiece


def require_transformers():
    try:
        import transformers
    except ImportError:
        raise CheckpointError(f"hf: models need the `transformers` package: {INSTALL}") from None
    transformers.logging.set_verbosity_error()        # what goes wrong is said once, by our error line
    transformers.logging.disable_progress_bar()
    return transformers


# ---------------------------------------------------------------- the folder, checked before anything reads it

def _json(path: str, label: str, name: str) -> dict:
    """A JSON object file of the folder, or CheckpointError naming the file and what is wrong."""
    try:
        with open(os.path.join(path, name), encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise CheckpointError(f"{label}: {name} is not readable JSON ({err})") from None
    if not isinstance(obj, dict):
        raise CheckpointError(f"{label}: {name} holds a {type(obj).__name__}, not a JSON object")
    return obj


def weight_files(path: str, label: str, files: set[str]) -> tuple[str, list[str]]:
    """("safetensors" | "pickle", the weight files): safetensors (one, or the shards an index names),
    else a PyTorch pickle (pytorch_model.bin or its shards), read later with weights_only."""
    for kind, single, index in (("safetensors", "model.safetensors", "model.safetensors.index.json"),
                                ("pickle", "pytorch_model.bin", "pytorch_model.bin.index.json")):
        if single in files:
            return kind, [single]
        if index in files:
            weight_map = _json(path, label, index).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise CheckpointError(f"{label}: {index} has no weight_map")
            shards = sorted({str(v) for v in weight_map.values()})
            missing = [f for f in shards if f not in files]
            if missing:
                raise CheckpointError(f"{label}: missing {missing[0]} (named by {index})")
            return kind, shards
    others = sorted(f for f in files if f.endswith((".safetensors", *PICKLES)))
    if others:
        raise CheckpointError(f"{label}: weights named {others[0]}; expected model.safetensors, pytorch_model.bin "
                              "or a sharded index of either")
    raise CheckpointError(f"{label}: missing model.safetensors (or pytorch_model.bin)")


def check_folder(path: str, label: str | None = None) -> dict:
    """The folder's config.json after checking every file a model needs is there and its config is
    one we run; CheckpointError naming the first missing or malformed file or unsupported architecture."""
    label = label or PREFIX + path
    if not os.path.isdir(path):
        raise CheckpointError(f"{label}: no such folder" + (
            f" (to fetch it from the Hugging Face hub, ask for {HUB_PREFIX}{path})" if HUB_ID.fullmatch(path) else ""))
    files = set(os.listdir(path))
    if "config.json" not in files:
        raise CheckpointError(f"{label}: missing config.json")
    config = _json(path, label, "config.json")
    parts = {"vision-encoder-decoder": ("encoder", "decoder"), "blip": ("vision_config", "text_config")}
    model_type = config.get("model_type")
    for part in parts.get(model_type, ()) if isinstance(model_type, str) else ():
        if not isinstance(config.get(part), dict):
            raise CheckpointError(f"{label}: config.json has no {part} object")
    kind = architecture(config)
    if kind not in SUPPORTED:
        known = "; ".join(SUPPORTED.values())
        raise CheckpointError(f"{label}: architecture {describe(config, kind)} is not supported; supported: {known}")
    text = text_config(config)
    for key in ("vocab_size", "hidden_size" if kind[-1] != "gpt2" else "n_embd"):
        if key in text and not (isinstance(text[key], int) and text[key] > 0):
            raise CheckpointError(f"{label}: config.json's {key} is {text[key]!r}, not a positive integer")
    if text.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"{label}: the decoder's position_embedding_type is {text['position_embedding_type']!r}; "
                              "only absolute positions are supported (BERT's relative attention is not)")
    weight_files(path, label, files)
    if not files & set(PROCESSOR_FILES):
        raise CheckpointError(f"{label}: missing preprocessor_config.json (or a processor_config.json)")
    if not any(all(f in files for f in layout) for layout in TOKENIZER_LAYOUTS):
        if "vocab.json" in files:
            raise CheckpointError(f"{label}: missing merges.txt (beside vocab.json)")
        raise CheckpointError(f"{label}: missing tokenizer.json (or vocab.json + merges.txt, or vocab.txt)")
    return config


def architecture(config: dict) -> tuple[str, ...]:
    """What config.json says the model is: (model_type, encoder type, decoder type) for a
    VisionEncoderDecoderModel, else (model_type, its first architecture)."""
    if config.get("model_type") == "vision-encoder-decoder":
        enc, dec = config.get("encoder"), config.get("decoder")
        return ("vision-encoder-decoder", str(enc.get("model_type") if isinstance(enc, dict) else None),
                str(dec.get("model_type") if isinstance(dec, dict) else None))
    names = config.get("architectures")
    return (str(config.get("model_type")), str(names[0] if isinstance(names, list) and names else "?"))


def describe(config: dict, kind: tuple[str, ...]) -> str:
    names = config.get("architectures")
    names = ", ".join(map(str, names)) if isinstance(names, list) and names else kind[0]
    return f"{names} ({kind[1]} + {kind[2]})" if kind[0] == "vision-encoder-decoder" else names


def encoder_config(config: dict) -> dict:
    return config["vision_config"] if architecture(config)[0] == "blip" else config["encoder"]


def text_config(config: dict) -> dict:
    return config["text_config"] if architecture(config)[0] == "blip" else config["decoder"]


def patch_grid(kind: str, image_size, patch_size) -> int:
    """Patches per side, from the encoder's image and patch size (the config class defaults where omitted)."""
    image = image_size if image_size is not None else IMAGE_SIZE.get(kind, 224)
    patch = patch_size if patch_size is not None else 16
    if not (isinstance(image, int) and isinstance(patch, int) and 0 < patch <= image):
        raise CheckpointError(f"image_size {image!r} and patch_size {patch!r} make no patch grid")
    return image // patch


def folder_meta(spec: str, folder: str, config: dict, side: int | None = None) -> dict:
    """The metadata a viewer checkpoint would carry, from config.json alone (nothing else is read):
    `checkpoints.read_meta` gives it for `hf:` folders, `load_folder` for the loaded model (with the
    loaded config's patch grid `side`)."""
    enc = encoder_config(config)
    kind = architecture(config)
    if side is None:
        try:
            side = patch_grid(kind[0], enc.get("image_size"), enc.get("patch_size"))
        except CheckpointError as err:
            raise CheckpointError(f"{spec}: config.json's {err}") from None
    special = SPECIAL_TOKENS.get(enc.get("model_type"), 1)
    vision = VisionSpec(FeatureSource.CARRIED, {"type": "hf-" + str(enc.get("model_type", "vit")),
                                                 "folder": os.path.basename(os.path.abspath(folder)),
                                                 "grid": side, "dim": (1 + special) * enc.get("hidden_size", 768)})
    return {"name": spec, "model_type": "hf:" + "+".join(kind[1:]), "hparams": {},
            "vocab_size": text_config(config).get("vocab_size"), "vision_spec_key": vision.key,
            "vision_spec": vision.to_json(), "hf_folder": os.path.abspath(folder)}


def split_prompt(spec: str) -> tuple[str, str]:
    """`SPEC#prompt` (BLIP's fine-tuning prompt, `BLIP_PROMPT`) or `SPEC#prompt=TEXT` -> (SPEC, the
    prompt text); no `#` -> (SPEC, "")."""
    base, sep, option = spec.partition("#")
    if not sep:
        return spec, ""
    key, eq, text = option.partition("=")
    if key != "prompt" or (eq and not text.strip()):
        raise CheckpointError(f"{spec}: the one model option is #prompt (BLIP's {BLIP_PROMPT!r}) or #prompt=TEXT")
    return base, (text if eq else BLIP_PROMPT).strip()


def folder_of(spec: str) -> tuple[str, str]:
    """(the local folder, the model's name): `hf:PATH` is PATH and nothing else (a path that does not
    exist is "no such folder", never a hub request); `hf-hub:ORG/NAME[@REVISION]` is the hub's copy at
    that revision (default main), fetched once (safetensors, JSON and tokenizer files only, never a
    pickle) and named with the commit it resolved to, which every trace then records. A `#prompt`
    option (`split_prompt`) stays in the name."""
    spec, prompt = split_prompt(spec)
    option = ("#prompt" + ("" if prompt == BLIP_PROMPT else "=" + prompt)) if prompt else ""
    if spec.startswith(PREFIX):
        return spec[len(PREFIX):], spec + option
    if not spec.startswith(HUB_PREFIX):
        raise CheckpointError(f"{spec}: not an hf: or {HUB_PREFIX} model")
    found = HUB_ID.fullmatch(spec[len(HUB_PREFIX):])
    if not found:
        raise CheckpointError(f"{spec}: a hub model is {HUB_PREFIX}ORG/NAME or {HUB_PREFIX}ORG/NAME@REVISION")
    repo, revision = found.group(1), found.group(2)
    try:
        from huggingface_hub import snapshot_download
        folder = snapshot_download(repo, revision=revision, allow_patterns=HUB_FILES)
    except Exception as err:   # offline, no such repository, no access: one message says what to do
        raise CheckpointError(f"{spec}: the Hugging Face hub did not give it ({type(err).__name__}); on a machine "
                              f"with internet run `huggingface-cli download {repo} --local-dir FOLDER` and open "
                              f"hf:FOLDER") from None
    return folder, f"{HUB_PREFIX}{repo}@{os.path.basename(os.path.normpath(folder))}{option}"


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
        self.marker = marker_of(self.words)   # 'Ġ' (byte-level BPE), '##' (WordPiece), '▁', or None

    subword = True

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

    def display(self, token: int) -> str:
        """A token as a person reads it: its own text, '-ic' for a piece that continues a word."""
        if token in (self.end, self.start):
            return self.words[token]
        text = self.tokenizer.decode([token], clean_up_tokenization_spaces=False).strip()
        if starts_word(self.words[token], self.marker):
            return text
        return "-" + (text[len(self.marker):] if self.marker and text.startswith(self.marker) else text)

    def word_spans(self, ids) -> list[Word]:
        """The words of a token sequence, grouped by the tokenizer's own markers (words.py)."""
        specials = {self.end, self.start} | (set(self.tokenizer.all_special_ids) - {self.unk})
        return split_words(self.decode(ids), self.pieces(ids), self.marker, [i in specials for i in ids],
                           [i == self.unk and self.unk != self.end for i in ids])

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
                 special: int = 1, prompt: tuple[int, ...] = ()):
        """`start_id`: the decoder start token, fed whenever decoding feeds the virtual <start> (id vocab_size);
        `special`: the encoder's tokens before its patches (class, distillation); `prompt`: token ids
        forced after the start token before the first step (BLIP's "a picture of"): `init_state` runs
        all of them but the last, the first step feeds the last, so the caption, its steps and their
        maps begin with the first word after the prompt."""
        super().__init__()
        self.hf = hf_model
        self.lead = (start_id, *prompt)
        self.start_id, self.virtual_start = start_id, vocab_size
        self.enc_dim, self.n_layers, self.n_heads, self.special = enc_dim, n_layers, n_heads, special
        self.feature_width = enc_dim   # a row is [patch token, special tokens]: Grad-CAM reads the patch part
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
        for token in self.lead[:-1]:   # the prompt's tokens into the self-attention cache
            _, state = self.forward_step(state, torch.full((len(enc),), token, dtype=torch.long, device=enc.device))
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
        ids = torch.where(words == self.virtual_start, torch.full_like(words, self.lead[-1]), words)
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

    def __init__(self, hf_model, start_id: int, special: int = 1, prompt: tuple[int, ...] = ()):
        cfg = hf_model.config.decoder
        super().__init__(hf_model, start_id, cfg.vocab_size, hf_model.config.encoder.hidden_size, cfg.n_layer, cfg.n_head,
                         special, prompt)
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
        tied = self.decoder.lm_head.weight is self.gpt.wte.weight
        head = [("lm_head (tied to the word embedding wte)", self.decoder.lm_head)] if tied else \
            [("lm_head", self.decoder.lm_head)]
        embed = [] if tied else [("wte", self.gpt.wte)]
        return [*head, ("ln_f", self.gpt.ln_f), *blocks, ("wpe", self.gpt.wpe), *embed, *first]


class HFBert(HFDecoder):
    """A BERT-style decoder (post-LayerNorm layers with cross-attention): a VisionEncoderDecoderModel's
    BertLMHeadModel, or BlipForConditionalGeneration's text decoder (the same layout)."""

    def __init__(self, hf_model, start_id: int, special: int = 1, prompt: tuple[int, ...] = ()):
        blip = hasattr(hf_model, "text_decoder")
        cfg = hf_model.config.text_config if blip else hf_model.config.decoder
        enc = hf_model.config.vision_config if blip else hf_model.config.encoder
        super().__init__(hf_model, start_id, cfg.vocab_size, enc.hidden_size, cfg.num_hidden_layers,
                         cfg.num_attention_heads, special, prompt)
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
        words = self.text.bert.embeddings.word_embeddings
        tied = any(p is words.weight for p in self.text.cls.parameters())
        return [("cls (tied to the word embedding)" if tied else "cls", self.text.cls), *layers,
                ("embeddings", self.text.bert.embeddings), *first]


# ---------------------------------------------------------------- loading

class HFLoadedModel(LoadedModel):
    """A LoadedModel whose image encoder is the HF model's own (`image_encoder`, used by the pipeline)."""

    def __init__(self, model, vocab, meta, path, image_encoder):
        super().__init__(model, vocab, meta, path)
        self.image_encoder = image_encoder


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:200]}" if text else type(err).__name__


def weight_shapes(path: str, label: str, kind: str, files: list[str]) -> tuple[dict[str, tuple], dict | None]:
    """(name -> shape of every stored tensor, the tensors themselves for a pickle). Safetensors are
    read by header; a pickle through `torch.load(weights_only=True)`, which unpickles tensors and
    plain containers only: anything else (a payload) is refused by name, and its code never runs."""
    shapes, tensors = {}, {} if kind == "pickle" else None
    for name in files:
        file = os.path.join(path, name)
        if kind == "safetensors":
            from safetensors import safe_open
            try:
                with safe_open(file, framework="pt") as f:
                    shapes.update((k, tuple(f.get_slice(k).get_shape())) for k in f.keys())
            except Exception as err:   # a bad header, a truncated file: safetensors says which
                raise CheckpointError(f"{label}: {name} is not a readable safetensors file ({_first_line(err)})") from None
            continue
        check_torch_loads_safely(label)
        try:
            obj = torch.load(file, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as err:
            raise CheckpointError(f"{label}: {name} needs more than tensors to load and was refused, nothing in it "
                                  f"run ({_first_line(err)})") from None
        except Exception as err:
            raise CheckpointError(f"{label}: {name} is not a readable PyTorch weights file ({_first_line(err)})") from None
        if not isinstance(obj, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items()):
            raise CheckpointError(f"{label}: {name} is not a dictionary of named tensors")
        tensors.update(obj)
        shapes.update((k, tuple(v.shape)) for k, v in obj.items())
    return shapes, tensors


SAFE_TORCH = (2, 6)   # below 2.6, torch.load(weights_only=True) can run a crafted file's code (CVE-2025-32434)


def check_torch_loads_safely(label: str, version: str | None = None) -> None:
    """Refuse to unpickle weights with a torch whose `weights_only` is not safe."""
    version = version or torch.__version__
    found = tuple(int(p) for p in re.findall(r"\d+", version)[:2])
    if found < SAFE_TORCH:
        raise CheckpointError(f"{label}: reading pickled weights needs torch >= {'.'.join(map(str, SAFE_TORCH))} "
                              f"(this is {version}, whose weights_only loading can run code: CVE-2025-32434); "
                              "upgrade torch, or use a folder with model.safetensors")


def check_shapes(model, shapes: dict[str, tuple], label: str) -> None:
    """The stored tensors fit the model built from config.json (else the weights are another model's)."""
    own = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    common = [k for k in shapes if k in own]
    if not common:
        raise CheckpointError(f"{label}: none of the stored weights' names is the model's (e.g. {next(iter(shapes), '?')})")
    wrong = [k for k in common if shapes[k] != own[k]]
    if wrong:
        raise CheckpointError(f"{label}: weight {wrong[0]} has shape {list(shapes[wrong[0]])}, config.json makes it "
                              f"{list(own[wrong[0]])}")


def check_covered(missing: list[str], label: str) -> None:
    """A folder whose weights lack part of the model (transformers' own missing keys, tied weights
    already accounted for) is refused, never run with that part randomly initialised."""
    if missing:
        parts = sorted({".".join(k.split(".")[:2]) for k in missing})
        raise CheckpointError(f"{label}: the weights do not cover the model: {len(missing)} tensors missing, in "
                              f"{', '.join(parts[:4])}{' ...' if len(parts) > 4 else ''} (e.g. {missing[0]})")


def load_tokenizer(transformers, path: str, label: str):
    """The folder's tokenizer in any layout transformers writes or the hub has: tokenizer_config.json
    with its files, tokenizer.json alone, GPT-2's vocab.json + merges.txt, or WordPiece's vocab.txt."""
    files = set(os.listdir(path))
    kw = {"local_files_only": True, "trust_remote_code": False}
    if "tokenizer_config.json" in files:
        return transformers.AutoTokenizer.from_pretrained(path, **kw)
    if "tokenizer.json" in files:
        cls = transformers.PreTrainedTokenizerFast
    elif {"vocab.json", "merges.txt"} <= files:
        cls = transformers.GPT2TokenizerFast
    else:
        cls = transformers.BertTokenizerFast
    return cls.from_pretrained(path, **kw)   # (each finds its own files; the constructors' names differ by version)


def load_image_processor(transformers, path: str, label: str):
    """preprocessor_config.json, or the image processor nested in a processor's processor_config.json
    (as transformers 5 saves a BLIP processor)."""
    if os.path.exists(os.path.join(path, "preprocessor_config.json")):
        return transformers.AutoImageProcessor.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    nested = _json(path, label, "processor_config.json").get("image_processor")
    name = nested.get("image_processor_type") if isinstance(nested, dict) else None
    cls = getattr(transformers, str(name), None) if isinstance(name, str) and name.endswith(("ImageProcessor", "ImageProcessorFast")) else None
    if cls is None:
        raise CheckpointError(f"{label}: processor_config.json names no image processor this transformers has ({name!r})")
    return cls.from_dict({k: v for k, v in nested.items() if k != "image_processor_type"})


def load_folder(spec: str, device: torch.device | str = "cpu", attn_implementation: str | None = None) -> HFLoadedModel:
    """`hf:PATH` or `hf-hub:ORG/NAME[@REVISION]` -> a model ready for the pipeline; CheckpointError (one
    line naming the file and what is wrong) for anything that cannot be run."""
    path, name = folder_of(spec)
    prompt_text = split_prompt(spec)[1]
    config = check_folder(path, spec)           # before transformers is imported or any file is read by it
    kind = architecture(config)
    weights, files = weight_files(path, spec, set(os.listdir(path)))
    shapes, tensors = weight_shapes(path, spec, weights, files)
    transformers = require_transformers()
    from ..vision.hf import HFImageEncoder
    blip = kind[0] == "blip"
    cls = transformers.BlipForConditionalGeneration if blip else transformers.VisionEncoderDecoderModel
    attn = {"attn_implementation": attn_implementation} if attn_implementation else {}
    try:
        cfg = cls.config_class.from_pretrained(path, local_files_only=True)
        with torch.device("meta"):   # the model config.json makes, without memory: do the weights fit it?
            check_shapes(cls(cfg), shapes, spec)
        if tensors is None:
            model, info = cls.from_pretrained(path, use_safetensors=True, trust_remote_code=False, local_files_only=True,
                                              output_loading_info=True, **attn)
        else:   # the tensors read above, never a second unpickling
            model, info = cls.from_pretrained(None, config=cfg, state_dict=tensors, output_loading_info=True, **attn)
        check_covered(sorted(info.get("missing_keys") or []), spec)
        tokenizer = load_tokenizer(transformers, path, spec)
        processor = load_image_processor(transformers, path, spec)
    except CheckpointError:
        raise
    except Exception as err:   # whatever transformers raises on a folder it cannot use: one line, no traceback
        raise CheckpointError(f"{spec}: transformers could not load it ({_first_line(err)})") from None
    model = model.to(device).eval().requires_grad_(False)
    if blip:    # as BlipForConditionalGeneration.generate: start with bos ([DEC]), end at [SEP]
        text, enc = model.config.text_config, model.config.vision_config
        start, end, size, vision_module = text.bos_token_id, text.sep_token_id, text.vocab_size, model.vision_model
    else:
        cfg, text, enc = model.config, model.config.decoder, model.config.encoder
        start = getattr(cfg, "decoder_start_token_id", None)   # (a saved config may leave these out)
        start = start if start is not None else getattr(text, "bos_token_id", None)
        end = getattr(cfg, "eos_token_id", None)
        end = end if end is not None else getattr(text, "eos_token_id", None)
        size, vision_module = text.vocab_size, model.encoder
    start = start if start is not None else tokenizer.cls_token_id     # BERT decoders: [CLS] ... [SEP]
    end = end if end is not None else (tokenizer.eos_token_id if tokenizer.eos_token_id is not None
                                       else tokenizer.sep_token_id)
    if start is None or end is None:
        raise CheckpointError(f"{spec}: config.json names no decoder start token or end token")
    for role, token in (("decoder start", start), ("end", end)):
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < size:
            raise CheckpointError(f"{spec}: config.json's {role} token {token!r} is no token id of its "
                                  f"{size}-token vocabulary")
    if len(tokenizer) > size:
        raise CheckpointError(f"{spec}: the tokenizer has {len(tokenizer)} tokens, the decoder {size}")
    vocab = HFVocab(tokenizer, int(end), size)
    special = SPECIAL_TOKENS.get(enc.model_type, 1)
    prompt = tuple(tokenizer(prompt_text, add_special_tokens=False)["input_ids"]) if prompt_text else ()
    decoder = (HFGPT2 if kind[-1] == "gpt2" else HFBert)(model, int(start), special, prompt)
    side = patch_grid(kind[0], enc.image_size, enc.patch_size)   # the LOADED config's (its defaults filled in)
    meta = {**folder_meta(name, path, config, side), "vocab_size": len(vocab)}
    return HFLoadedModel(decoder, vocab, meta, name, HFImageEncoder(vision_module, processor, side, special, device))


__all__ = ["HFVocab", "HFDecoder", "HFGPT2", "HFBert", "HFLoadedModel", "load_folder", "check_folder", "folder_meta",
           "PREFIX", "HUB_PREFIX"]
