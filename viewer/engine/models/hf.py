"""A Hugging Face captioning model behind our step interface: `--model hf:PATH` (a local folder) or
`--model hf-hub:ORG/NAME[@REVISION]` (fetched from the hub, only when asked in this form).

PATH is a folder as `save_pretrained` writes it or as the hub has it: config.json; the weights as
model.safetensors, pytorch_model.bin, or a sharded index of either; the tokenizer as
tokenizer.json (with or without tokenizer_config.json), GPT-2's vocab.json + merges.txt, or
WordPiece's vocab.txt; the image processor as preprocessor_config.json or nested in a processor's
processor_config.json. Supported: `VisionEncoderDecoderModel` with a ViT or DeiT encoder and a GPT-2
or BERT decoder (cross-attention), `BlipForConditionalGeneration` (its ViT and its BERT-style
text decoder), and `BlipForQuestionAnswering` (a question answerer, `HFBlipAnswerer`: the question is
the prompt, as for models/vqa.py); any other architecture is refused by name.

Safe by default (hf_folder.py): the folder is checked before transformers reads it, and every problem is one
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

Tokens (hf_vocab.py): each step is one tokenizer token (sub-words too); `HFVocab.words` are the tokenizer's
token strings (the JSON keeps every one), the caption is the tokenizer's decoded text.

Prompt: BLIP was fine-tuned to continue the text "a picture of". `hf:PATH#prompt` (or
`#prompt=TEXT`) forces those tokens after the start token before the first step; they are left out
of the caption, its steps and its maps, and the name (so every trace) says the prompt was on. Off
by default: figures of an `hf:` model name the option when they use it.
"""
from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from ..loaded import CheckpointError, LoadedModel
from ..images import AttendsTo
from .base import CaptionModel, State, Step
from .hf_folder import (SPECIAL_TOKENS, _first_line, architecture, check_covered, check_folder, check_shapes,
                        folder_meta, folder_of, load_image_processor, load_tokenizer, patch_grid,
                        require_transformers, split_prompt, weight_files, weight_shapes)
from .hf_vocab import HFVocab

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
        return self.make_step(logits, self.photo_heads(heads, state)), new

    def photo_heads(self, heads: torch.Tensor, state: State) -> torch.Tensor:
        """Each layer's and head's weights over [special tokens; patches]: the cross-attention itself."""
        return heads

    def make_step(self, logits: torch.Tensor, heads: torch.Tensor) -> Step:
        """The Step from (B, layers, heads, n + K) weights: the last layer's head mean over the patches,
        renormalised, and the special tokens' share of it."""
        summary = heads[:, -1].mean(1)
        patches = summary[:, self.special:]
        attention = patches / patches.sum(-1, keepdim=True).clamp_min(1e-12)
        return Step(logits, attention, heads=heads[..., self.special:], outside=summary[:, :self.special].sum(-1))


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


class HFBlipAnswerer(HFBert):
    """BlipForQuestionAnswering: its text encoder reads the question (the prompt), each token attending
    to the photo's [class token; patches]; its text decoder writes the answer, attending to the
    question's encoded tokens, never to the photo itself. So the map an answer token was read from is
    carried through the question: per encoder layer and head, the question tokens' cross-attention to
    the photo weighted by the decoder's last-layer head-mean attention over those tokens (a two-hop
    rollout, Abnar and Zuidema 2020, of the attention the model computed); `attention` is the last
    encoder layer's head mean over the patches, as for the captioners. Hiding a patch hides it from
    the question's reading (re-read with the new mask); steering is refused (no map is fed back)."""

    answers = True

    def __init__(self, hf_model, start_id: int, special: int = 1, pad_id: int = 0):
        super().__init__(hf_model, start_id, special)
        self.reader, self.pad_id = hf_model.text_encoder, pad_id   # BlipTextModel, the question's encoder

    @property
    def image_state(self) -> tuple[str, ...]:
        return (*super().image_state, "image", "question", "qmask", "reads")

    def init_state(self, feats, mask, seed=None) -> State:
        return {"mask": mask, "t": torch.zeros(len(feats), dtype=torch.long, device=feats.device),
                "image": self.split_features(feats, mask)}

    def with_prompt(self, state: State, question: torch.Tensor) -> State:
        """The question's token ids (B, L; padded with the tokenizer's pad id) read against the photo."""
        question = question.to(state["image"].device)
        state = self._read({**state, "question": question, "qmask": question != self.pad_id})
        for i in range(self.n_layers):
            state[f"self_k{i}"] = state[f"self_v{i}"] = state[f"cross_k{i}"].new_zeros(len(question), 0,
                                                                                     state[f"cross_k{i}"].shape[-1])
        return state

    def _read(self, state: State) -> State:
        """The question encoded over what of the photo the mask lets it see; the decoder's keys/values
        of it, and every encoder layer's cross-attention (B, layers, heads, L, n + K). Run layer by
        layer here, as the decoder is: transformers' BlipTextLayer drops the photo's attention mask
        on its way to the cross-attention (5.x), so hidden patches and a batch's padding would be read."""
        image, question = state["image"], state["question"]
        pad = ~state["qmask"][:, None, None, :]
        hidden = ~torch.cat([torch.ones_like(state["mask"][:, :1]).expand(-1, self.special), state["mask"]], 1)
        hidden = hidden[:, None, None, :]

        def attend(module, x, keys_from, masked):
            q, k, v = (self._split(f(y)) for f, y in ((module.query, x), (module.key, keys_from), (module.value, keys_from)))
            w = F.softmax(((q @ k.transpose(-1, -2)) * self.scale).float().masked_fill(masked, float("-inf")), -1)
            return self._merge(w.to(q.dtype) @ v), w
        x = self.reader.embeddings(input_ids=question)
        reads = []
        for layer in self.reader.encoder.layer:
            x = layer.attention.output(attend(layer.attention.self, x, x, pad)[0], x)
            attended, w = attend(layer.crossattention.self, x, image, hidden)
            x = layer.crossattention.output(attended, x)
            x = layer.output(layer.intermediate(x), x)
            reads.append(w)
        state = {**state, "reads": torch.stack(reads, 1)}
        for i in range(self.n_layers):
            state[f"cross_k{i}"], state[f"cross_v{i}"] = self.cross_keys_values(i, x)
        return state

    def with_mask(self, state: State, mask: torch.Tensor) -> State:
        return self._read({**state, "mask": mask})

    def cross_attend(self, state, i, q, scale):
        """Attention over the question's encoded tokens (padding masked) -> output, (B, H, L)."""
        if "steer" in state:
            raise ValueError("a BLIP question answering model cannot be steered: its answer reads the question, "
                             "which read the photo")
        q = self._split(q)
        scores = (q @ self._split(state[f"cross_k{i}"]).transpose(-1, -2)) * scale
        w = F.softmax(scores.float().masked_fill(~state["qmask"][:, None, None, :], float("-inf")), -1).to(q.dtype)
        return self._merge(w @ self._split(state[f"cross_v{i}"])), w[:, :, 0]

    def forward_step(self, state: State, words: torch.Tensor) -> tuple[Step, State]:
        if "reads" not in state:
            raise ValueError("a question answering model needs a question")
        return super().forward_step(state, words)

    def photo_heads(self, heads: torch.Tensor, state: State) -> torch.Tensor:
        """(B, layers, heads, L) over the question -> (B, encoder layers, heads, n + K) over the photo."""
        over_question = heads[:, -1].mean(1)                                   # (B, L)
        return torch.einsum("bq,blhqk->blhk", over_question.to(state["reads"].dtype), state["reads"])

    def cascade(self):
        return [*super().cascade(), ("text_encoder (the question's reader)", self.reader)]


# ---------------------------------------------------------------- loading

class HFLoadedModel(LoadedModel):
    """A LoadedModel whose image encoder is the HF model's own (`image_encoder`, used by the pipeline)."""

    def __init__(self, model, vocab, meta, path, image_encoder, tokenizer=None):
        super().__init__(model, vocab, meta, path)
        self.image_encoder, self.tokenizer = image_encoder, tokenizer

    def question_ids(self, questions: list[str]) -> torch.Tensor:
        """Questions as the tokenizer makes them for the model (its special tokens too), padded."""
        ids = [self.tokenizer(q)["input_ids"] for q in questions]
        pad = self.model.pad_id
        out = torch.full((len(ids), max(map(len, ids))), pad, dtype=torch.long)
        for i, row in enumerate(ids):
            out[i, :len(row)] = torch.tensor(row)
        return out


def _start_and_end(model, tokenizer, blip: bool, spec: str) -> tuple:
    """The decoder's start and end token ids (checked against its vocabulary), its vocabulary size, text and vision
    configs and vision module: as the model's own `generate` would start and stop."""
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
    return start, end, size, text, enc, vision_module


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
    blip, answers = kind[0] == "blip", kind[-1] == "BlipForQuestionAnswering"
    cls = getattr(transformers, kind[-1]) if blip else transformers.VisionEncoderDecoderModel
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
    start, end, size, text, enc, vision_module = _start_and_end(model, tokenizer, blip, spec)
    vocab = HFVocab(tokenizer, int(end), size)
    special = SPECIAL_TOKENS.get(enc.model_type, 1)
    prompt = tuple(tokenizer(prompt_text, add_special_tokens=False)["input_ids"]) if prompt_text else ()
    if answers:
        if prompt:
            raise CheckpointError(f"{spec}: a question answering model takes a question, not a #prompt")
        decoder = HFBlipAnswerer(model, int(start), special, text.pad_token_id or 0)
    else:
        decoder = (HFGPT2 if kind[-1] == "gpt2" else HFBert)(model, int(start), special, prompt)
    side = patch_grid(kind[0], enc.image_size, enc.patch_size)   # the LOADED config's (its defaults filled in)
    meta = {**folder_meta(name, path, config, side), "vocab_size": len(vocab)}
    return HFLoadedModel(decoder, vocab, meta, name, HFImageEncoder(vision_module, processor, side, special, device),
                         tokenizer)


__all__ = ["HFVocab", "HFDecoder", "HFGPT2", "HFBert", "HFBlipAnswerer", "HFLoadedModel", "load_folder", "check_folder", "folder_meta",
           "PREFIX", "HUB_PREFIX"]
