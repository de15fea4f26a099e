"""CPU/CUDA parity: the same photo and model give the same trace on either device.

Tolerances. With TF32 off (as here), CPU and CUDA both compute in IEEE float32 and differ only in
the order of their sums (blocked matmuls, cuDNN's convolution algorithms): about 1e-6 relative
per operation. Through the decoder alone that stays near 1e-6, so its attention maps are held to
1e-5 (0.2% of a uniform cell's 1/196). Through the ResNet as well (~50 layers) feature errors grow
to ~1e-5 relative, so the end-to-end maps are held to 1e-4: 2% of a uniform cell, invisible on a
heat map, and still ten times below a real bug such as a map from the wrong step or beam (which
moves weights by 1e-2 and more). Words must be identical: a flip would mean a near tie, which the
tiny models trained on six photos do not have.
"""
import numpy as np
import pytest
import torch

from viewer.engine import checkpoints
from viewer.engine.decoding import DecodeSettings, decode
from viewer.engine.vision import model_inputs

from conftest import MODEL_TYPES

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available on this machine")

SETTINGS = [DecodeSettings(strategy="greedy"), DecodeSettings(strategy="beam", beam_size=3)]


@pytest.fixture
def full_float32():
    """TF32 (10-bit mantissa) would make the comparison about precision modes, not about our code."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.fixture(scope="module")
def gpu_captioner(tiny_checkpoints):
    from viewer.engine.pipeline import Captioner
    return Captioner("cuda", checkpoint_dir=tiny_checkpoints)


@pytest.mark.parametrize("model", MODEL_TYPES)
@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: s.strategy)
def test_decoder_gives_the_same_hypotheses_on_cpu_and_cuda(captioner, photo, model, settings, full_float32):
    """Same features (encoded once, on the CPU) into the same weights on each device."""
    cpu_lm = captioner.model(model)
    gpu_lm = checkpoints.load(cpu_lm.path, "cuda")
    feats = captioner.inputs(cpu_lm, [photo])
    out = {}
    for device, lm in (("cpu", cpu_lm), ("cuda", gpu_lm)):
        x, mask = model_inputs(feats, lm.attends_to, device)
        out[device] = decode(lm.model, x, mask, settings, lm.vocab)[0]
    assert len(out["cpu"]) == len(out["cuda"]) == settings.width
    for a, b in zip(out["cpu"], out["cuda"]):
        assert a.tokens == b.tokens and a.finished == b.finished
        assert np.allclose(a.logprobs, b.logprobs, atol=1e-4)
        assert torch.allclose(a.attention, b.attention, atol=1e-5)
        assert (a.sample is None) == (b.sample is None)
        if a.sample is not None:   # hard attention: the counter-based draw is the same on both devices
            assert torch.equal(a.sample, b.sample)


@pytest.mark.parametrize("model", MODEL_TYPES)
@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: s.strategy)
def test_photo_to_trace_is_the_same_on_cpu_and_cuda(captioner, gpu_captioner, photo, model, settings, full_float32):
    """The whole path, encoder (and detector, for updown) included, on each device."""
    cpu = captioner.caption([photo], model, settings)[0]
    gpu = gpu_captioner.caption([photo], model, settings)[0]
    assert [t.words for t in cpu] == [t.words for t in gpu]
    for a, b in zip(cpu, gpu):
        for sa, sb in zip(a.steps, b.steps):
            assert sa.attention.shape == sb.attention.shape
            assert np.allclose(sa.attention, sb.attention, atol=1e-4)
            assert sa.sample == sb.sample
