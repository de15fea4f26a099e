"""Photo loading and the shared preprocessing: every odd input gives a correct photo or one ImageError."""
import io
import os

import numpy as np
import pytest
from PIL import Image

from viewer.engine.images import (GRID, INPUT_SIZE, DISPLAY_SIDE, ImageError, Photo, cell_boxes, load_photo, squash,
                           to_pixels)

ASSETS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "assets")


def _save(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def _gradient(w=64, h=48) -> Image.Image:
    x = np.linspace(0, 255, w, dtype=np.uint8)[None, :].repeat(h, 0)
    return Image.fromarray(np.stack([x, x[::-1], np.full_like(x, 90)], -1))


@pytest.mark.parametrize("mode", ["L", "P", "RGBA", "LA", "CMYK", "1", "I;16"])
def test_colour_modes_become_rgb(mode):
    ramp = np.linspace(0, 255, 64).round().astype(np.uint8)[None, :].repeat(48, 0)
    if mode == "I;16":
        img = Image.fromarray(ramp.astype(np.uint16) * 257)
        assert img.mode == "I;16"
    elif mode == "L":
        img = Image.fromarray(ramp)
    else:
        img = _gradient().convert(mode)
    fmt = "TIFF" if mode == "CMYK" else "PNG"
    photo = load_photo(_save(img, fmt))
    assert photo.rgb.dtype == np.uint8 and photo.rgb.shape == (48, 64, 3)
    assert (photo.width, photo.height) == (64, 48)
    if mode in ("L", "I;16"):   # a grey ramp keeps its range: 16-bit is scaled, not clipped to white
        assert photo.rgb[..., 0].min() < 10 and photo.rgb[..., 0].max() > 245


def test_transparent_pixels_are_composited_on_white():
    img = Image.new("RGBA", (8, 8), (255, 0, 0, 0))
    assert (load_photo(_save(img, "PNG")).rgb == 255).all()


def test_exif_rotation_is_applied_and_size_is_upright():
    img = _gradient(60, 20)
    exif = img.getexif()
    exif[0x0112] = 6      # rotate 90 degrees clockwise to display
    photo = load_photo(_save(img, "JPEG", exif=exif))
    assert (photo.width, photo.height) == (20, 60)
    assert photo.rgb.shape[:2] == (60, 20)


def test_animated_gif_gives_first_frame():
    frames = [Image.new("RGB", (10, 10), c) for c in ((255, 0, 0), (0, 0, 255))]
    data = _save(frames[0], "GIF", save_all=True, append_images=frames[1:])
    rgb = load_photo(data).rgb
    assert rgb[..., 0].mean() > 200 and rgb[..., 2].mean() < 50


def test_one_pixel_image():
    photo = load_photo(_save(Image.new("RGB", (1, 1), (10, 20, 30)), "PNG"))
    assert squash(photo).shape == (INPUT_SIZE, INPUT_SIZE, 3)
    assert tuple(squash(photo)[0, 0]) == (10, 20, 30)


def test_huge_valid_photo_is_decoded_small_but_keeps_its_size():
    img = Image.new("RGB", (9000, 6000), (40, 120, 200))
    photo = load_photo(_save(img, "JPEG", quality=30))
    assert (photo.width, photo.height) == (9000, 6000)
    assert max(photo.rgb.shape[:2]) <= DISPLAY_SIDE


@pytest.mark.parametrize("data, words", [
    (b"", "empty"),
    (b"this is not an image at all", "not an image"),
    (b"GIF89a" + b"\x00" * 10, "not an image"),
])
def test_non_images_are_refused(data, words):
    with pytest.raises(ImageError, match=words):
        load_photo(data, name="upload")


def test_truncated_jpeg_is_refused():
    data = _save(_gradient(256, 256), "JPEG")
    with pytest.raises(ImageError, match="damaged or truncated"):
        load_photo(data[: len(data) // 2])


def test_decompression_bomb_is_refused():
    # a tiny PNG whose header claims 20000 x 20000 pixels
    data = _save(Image.new("1", (20000, 20000)), "PNG")
    assert len(data) < 200_000
    with pytest.raises(ImageError, match="megapixels"):
        load_photo(data)


def test_missing_file(tmp_path):
    with pytest.raises(ImageError, match="no such file"):
        load_photo(tmp_path / "nope.jpg")


def test_squash_keeps_no_aspect_and_crops_nothing():
    rgb = np.zeros((100, 400, 3), np.uint8)
    rgb[:, :200] = 255                      # left half white
    out = squash(Photo(rgb, 400, 100))
    assert out.shape == (INPUT_SIZE, INPUT_SIZE, 3)
    assert out[:, : INPUT_SIZE // 2 - 2].min() == 255 and out[:, INPUT_SIZE // 2 + 2:].max() == 0


def test_squash_of_training_sized_image_is_identity():
    rgb = np.random.default_rng(0).integers(0, 255, (INPUT_SIZE, INPUT_SIZE, 3), dtype=np.uint8)
    assert np.array_equal(squash(Photo(rgb, INPUT_SIZE, INPUT_SIZE)), rgb)


def test_cells_map_onto_the_original_photo():
    boxes = cell_boxes(640, 480)
    assert boxes.shape == (GRID * GRID, 4)
    assert np.allclose(boxes[0], [0, 0, 640 / GRID, 480 / GRID])          # non-square cells
    assert np.allclose(boxes[-1], [640 - 640 / GRID, 480 - 480 / GRID, 640, 480])
    assert np.allclose(boxes[1, 0], 640 / GRID)                           # row-major: next cell is to the right
    assert np.allclose(to_pixels(np.array([[0.5, 0.5, 1, 1]]), 640, 480), [[320, 240, 640, 480]])


def test_example_assets_load():
    for name in os.listdir(ASSETS):
        if name.endswith(".jpg"):
            photo = load_photo(os.path.join(ASSETS, name))
            assert photo.rgb.ndim == 3 and photo.width > 100
