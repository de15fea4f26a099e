"""Photo loading, checking and the one preprocessing step shared by training and inference.

The Flickr8k training copies are squashed to 224x224 without keeping the aspect ratio, so every
photo the models see is squashed the same way (`squash`). Positions on the model's input
(normalised 0..1 coordinates, 14x14 grid cells) map back onto the ORIGINAL photo here and only
here (`cell_boxes`, `to_pixels`), so a grid cell on a 4:3 photo is a 4:3 rectangle.
"""
from __future__ import annotations

import io
import os
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

INPUT_SIZE = 224          # side of the squashed square every model sees
GRID = 14                 # attention grid side
MAX_PIXELS = 100_000_000  # above this a file is treated as a decompression bomb and refused
DISPLAY_SIDE = 2048       # decoded photos are kept at most this large for display
MAX_FILE_BYTES = 60 * 1024 * 1024


class AttendsTo(StrEnum):
    """What a model's attention weights are over: the cells of the encoder's grid (the SAT models,
    the Transformer) or the detector's regions (Up-Down). Equal to its string, as stored in traces."""

    GRID = "grid"
    REGIONS = "regions"

    @property
    def unit(self) -> str:
        """One attention weight's place, in words: "cell" or "region"."""
        return "cell" if self is AttendsTo.GRID else "region"


ImageFile.LOAD_TRUNCATED_IMAGES = False
Image.MAX_IMAGE_PIXELS = MAX_PIXELS


class ImageError(ValueError):
    """A photo that cannot be used; the message is meant for the person who gave it."""


@dataclass
class Photo:
    """An upright RGB photo: `rgb` for display (at most DISPLAY_SIDE), `width`/`height` of the original."""

    rgb: np.ndarray
    width: int
    height: int
    name: str = ""


def load_photo(source, name: str | None = None) -> Photo:
    """Open a path, bytes or PIL image as an upright 8-bit RGB photo, or raise ImageError.

    Handles EXIF rotation, palette/RGBA/LA (composited on white), CMYK, 16-bit and 32-bit
    greyscale, 1-bit, and animated files (first frame). Huge JPEGs are decoded at reduced size.
    """
    if isinstance(source, Image.Image):
        return _to_photo(source, name or "image")
    if isinstance(source, (bytes, bytearray)):
        label, opener = name or "image", (lambda: io.BytesIO(source))
        size = len(source)
    else:
        path = os.fspath(source)
        label, opener = name or os.path.basename(path), (lambda: path)
        if not os.path.isfile(path):
            raise ImageError(f"{label}: no such file")
        size = os.path.getsize(path)
    if size == 0:
        raise ImageError(f"{label}: the file is empty")
    if size > MAX_FILE_BYTES:
        raise ImageError(f"{label}: the file is {size / 2**20:.0f} MB; the limit is {MAX_FILE_BYTES // 2**20} MB")
    try:
        with Image.open(opener()) as img:
            return _to_photo(img, label)
    except Image.DecompressionBombError:
        raise ImageError(f"{label}: refused, the image claims more than {MAX_PIXELS // 1_000_000} megapixels") from None
    except UnidentifiedImageError:
        raise ImageError(f"{label}: not an image file (or a format that cannot be read)") from None
    except (OSError, SyntaxError, ValueError) as err:
        if isinstance(err, ImageError):
            raise
        raise ImageError(f"{label}: the image is damaged or truncated ({err})") from None


def photo_size(path: str) -> tuple[int, int]:
    """An upright photo's (width, height) from its header alone (EXIF rotation applied), for figures
    measured in the photo's own pixels without decoding it."""
    with Image.open(path) as img:
        width, height = img.size
        turned = img.getexif().get(0x0112) in (5, 6, 7, 8)   # EXIF orientations that swap the sides
    return (height, width) if turned else (width, height)


def _to_photo(img: Image.Image, label: str) -> Photo:
    if img.width * img.height > MAX_PIXELS:
        raise ImageError(f"{label}: refused, the image claims more than {MAX_PIXELS // 1_000_000} megapixels")
    if img.width < 1 or img.height < 1:
        raise ImageError(f"{label}: the image has no pixels")
    if getattr(img, "is_animated", False):
        img.seek(0)
    orientation = img.getexif().get(0x0112, 1)
    full = img.size
    if img.format == "JPEG":
        img.draft("RGB", (DISPLAY_SIDE, DISPLAY_SIDE))  # decode huge JPEGs at a fraction of their size
    img.load()
    decoded = img.size
    img = ImageOps.exif_transpose(img) if orientation != 1 else img
    # the original size, upright: turned only if the transpose turned it (not every format's tag does)
    width, height = full[::-1] if img.size != decoded else full
    rgb = _as_rgb(img)
    if max(rgb.size) > DISPLAY_SIDE:
        rgb.thumbnail((DISPLAY_SIDE, DISPLAY_SIDE), Image.Resampling.LANCZOS)
    return Photo(np.asarray(rgb, dtype=np.uint8).copy(), width, height, label)


def _as_rgb(img: Image.Image) -> Image.Image:
    if img.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        arr = np.asarray(img, dtype=np.float64)
        top = 65535.0 if img.mode.startswith("I;16") or arr.max() > 255 else 255.0
        arr = np.clip(arr / top * 255.0, 0, 255).astype(np.uint8)
        return Image.fromarray(arr, "L").convert("RGB")
    if img.mode == "P":
        img = img.convert("RGBA")
    if img.mode in ("RGBA", "LA", "PA"):
        rgba = img.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return img.convert("RGB")


def squash(photo: Photo, size: int = INPUT_SIZE) -> np.ndarray:
    """THE preprocessing: resize the whole photo to size x size without cropping (as Flickr8k was)."""
    img = Image.fromarray(photo.rgb)
    if img.size != (size, size):
        img = img.resize((size, size), Image.Resampling.BICUBIC, reducing_gap=3.0)
    return np.array(img, dtype=np.uint8)


def to_pixels(boxes: np.ndarray, width: int, height: int) -> np.ndarray:
    """Normalised [x1, y1, x2, y2] boxes (0..1 on the squashed input) -> original-photo pixels."""
    return np.asarray(boxes, dtype=np.float64) * np.array([width, height, width, height], dtype=np.float64)


def grid_side(cells: int) -> int:
    """Side of a square attention grid with this many cells."""
    side = int(round(cells ** 0.5))
    if side * side != cells:
        raise ValueError(f"{cells} attention cells do not make a square grid")
    return side


def cell_boxes(width: int, height: int, grid: int = GRID) -> np.ndarray:
    """The grid x grid attention cells as pixel boxes on the original photo, row-major."""
    edges = np.linspace(0.0, 1.0, grid + 1)
    y1, x1 = np.meshgrid(edges[:-1], edges[:-1], indexing="ij")
    y2, x2 = np.meshgrid(edges[1:], edges[1:], indexing="ij")
    norm = np.stack([x1, y1, x2, y2], axis=-1).reshape(-1, 4)
    return to_pixels(norm, width, height)
