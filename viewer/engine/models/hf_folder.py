"""A Hugging Face folder checked before anything reads it, and its weights, tokenizer and image
processor read safely: every problem is one CheckpointError naming the file (a malformed config, a
missing file, corrupt safetensors, weights of another shape or that do not cover the model,
relative position attention, a pickle read by a torch whose `weights_only` can run code). The
model itself is `hf.py`; its tokens, `hf_vocab.py`."""
from __future__ import annotations

import json
import os
import pickle
import re

import torch

from ..loaded import CheckpointError
from ..vision.spec import FeatureSource, VisionSpec

PREFIX = "hf:"           # hf:PATH, a local folder (never a network request)
HUB_PREFIX = "hf-hub:"   # hf-hub:ORG/NAME[@REVISION]: fetched from the Hugging Face hub, only when asked this way
INSTALL = "pip install .[hf]"
SUPPORTED = {("vision-encoder-decoder", enc, dec): f"VisionEncoderDecoderModel ({enc_name} + {dec_name})"
             for enc, enc_name in (("vit", "ViT"), ("deit", "DeiT")) for dec, dec_name in (("gpt2", "GPT-2"), ("bert", "BERT"))}
SUPPORTED[("blip", "BlipForConditionalGeneration")] = "BlipForConditionalGeneration"
SUPPORTED[("blip", "BlipForQuestionAnswering")] = "BlipForQuestionAnswering"   # task "answer" (models/hf.py)
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
    task = "answer" if kind[-1] == "BlipForQuestionAnswering" else "caption"
    return {"name": spec, "model_type": "hf:" + "+".join(kind[1:]), "task": task, "hparams": {},
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
