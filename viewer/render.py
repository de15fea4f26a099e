"""Pictures of attention, drawn on the ORIGINAL photo: heatmaps, hard-attention cells, weighted boxes,
the paper's word strip and an animated GIF.

All functions take the display copy of the photo (`Photo.rgb`) and return uint8 RGB arrays;
pixel <-> cell mapping comes from `images.cell_boxes`, so cells are non-square on non-square
photos exactly as the squashed model input implies.
"""
from __future__ import annotations


import cv2
import numpy as np
from matplotlib import colormaps
from PIL import Image, ImageDraw, ImageFont

from .images import GRID, cell_boxes
from .trace import AttentionTrace

UPSAMPLING = ("smooth", "bilinear", "blocky")
COLORMAPS = ("spotlight", "jet", "inferno", "viridis", "gray")
_FONT_CACHE: dict[int, ImageFont.ImageFont] = {}


def font(size: int) -> ImageFont.ImageFont:
    if size not in _FONT_CACHE:
        _FONT_CACHE[size] = ImageFont.load_default(size=size)
    return _FONT_CACHE[size]


def upsample(grid: np.ndarray, width: int, height: int, style: str = "smooth") -> np.ndarray:
    """A grid map (14x14 for our models) -> (height, width) float map in [0, 1], stretched to the map's own range so the
    most and least attended places stand out even when attention is spread (entropy and the raw
    numbers in the app tell how spread it really is)."""
    if style not in UPSAMPLING:
        raise ValueError(f"unknown upsampling {style!r}; choose from {', '.join(UPSAMPLING)}")
    g = np.asarray(grid, dtype=np.float32)
    g = (g - g.min()) / max(float(g.max() - g.min()), 1e-12)
    if style == "blocky":
        return cv2.resize(g, (width, height), interpolation=cv2.INTER_NEAREST)
    if style == "bilinear":
        return np.clip(cv2.resize(g, (width, height), interpolation=cv2.INTER_LINEAR), 0, 1)
    # smooth, like the paper's figures: upsample x16 then a Gaussian of about one cell, at low resolution
    small = cv2.resize(g, (g.shape[1] * 16, g.shape[0] * 16), interpolation=cv2.INTER_CUBIC)
    small = cv2.GaussianBlur(small, (0, 0), sigmaX=8)
    out = cv2.resize(small, (width, height), interpolation=cv2.INTER_LINEAR)
    return np.clip((out - out.min()) / max(float(out.max() - out.min()), 1e-12), 0, 1)


def render_heatmap(rgb: np.ndarray, grid: np.ndarray, style: str = "smooth", cmap: str = "spotlight",
                   opacity: float = 0.6) -> np.ndarray:
    """Soft attention over the photo. 'spotlight' is the paper's look: unattended parts fade to grey."""
    h, w = rgb.shape[:2]
    heat = upsample(grid, w, h, style)
    rgb = np.ascontiguousarray(rgb)
    if cmap == "spotlight":
        keep = (1.0 - opacity * (1.0 - heat)).astype(np.float32)
        grey = np.full_like(rgb, 235)
        return cv2.blendLinear(rgb, grey, keep, 1.0 - keep)
    colours = cv2.applyColorMap((heat * 255).astype(np.uint8), _lut(cmap))
    return cv2.addWeighted(rgb, 1.0 - opacity, colours, opacity, 0.0)


_LUTS: dict[str, np.ndarray] = {}


def _lut(cmap: str) -> np.ndarray:
    """A matplotlib colormap as a 256x1x3 uint8 table for cv2.applyColorMap (RGB order kept)."""
    if cmap not in COLORMAPS or cmap == "spotlight":
        raise ValueError(f"unknown colormap {cmap!r}; choose from {', '.join(COLORMAPS)}")
    if cmap not in _LUTS:
        table = colormaps[cmap](np.linspace(0, 1, 256))[:, :3] * 255
        _LUTS[cmap] = np.ascontiguousarray(table.round().astype(np.uint8)[:, None, :])
    return _LUTS[cmap]


def render_cells(rgb: np.ndarray, cells: list[int], width: int, height: int, colour=(255, 40, 40),
                 line: int | None = None, grid: int = GRID) -> np.ndarray:
    """Hard attention: draw the sampled cell(s) crisply (cells are row-major indices into the grid)."""
    h, w = rgb.shape[:2]
    boxes = cell_boxes(width, height, grid) * np.array([w / width, h / height] * 2)
    img = Image.fromarray(rgb)
    draw = ImageDraw.Draw(img)
    line = line or max(2, round(min(w, h) / 150))
    for cell in dict.fromkeys(cells):
        x1, y1, x2, y2 = boxes[cell]
        draw.rectangle([x1, y1, x2, y2], outline=colour, width=line)
    return np.asarray(img)


def render_regions(rgb: np.ndarray, boxes_px: np.ndarray, labels: list[str], scores, weights, width: int,
                   height: int, show: int = 8, min_weight: float = 0.02, label_all: bool = True) -> np.ndarray:
    """Region attention: the most weighted boxes, line width and opacity following the weight,
    labelled 'class score | weight', the top region emphasised."""
    h, w = rgb.shape[:2]
    scale = np.array([w / width, h / height] * 2)
    weights = np.asarray(weights, dtype=np.float64)
    order = [i for i in np.argsort(-weights)[:show] if weights[i] >= min_weight or i == np.argmax(weights)]
    top = weights.max() if len(weights) else 1.0
    base = Image.fromarray(rgb).convert("RGBA")
    layer = Image.new("RGBA", base.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(layer)
    unit = max(1.0, min(w, h) / 300)
    fnt = font(max(11, round(6 * unit)))
    for rank, i in enumerate(reversed(order)):
        strength = weights[i] / top
        x1, y1, x2, y2 = (boxes_px[i] * scale).tolist()
        is_top = i == order[0]
        colour = (255, 200, 0) if is_top else (0, 190, 255)
        alpha = int(90 + 165 * strength)
        draw.rectangle([x1, y1, x2, y2], outline=colour + (alpha,), width=max(1, round(unit * (1 + 5 * strength))))
        if is_top:
            draw.rectangle([x1, y1, x2, y2], fill=colour + (40,))
        if not (label_all or is_top):
            continue
        text = f"{labels[i]} {float(scores[i]):.2f} | {weights[i]:.2f}"
        tx, ty = x1 + 2, max(0, y1 - fnt.size - 4) if y1 > fnt.size + 4 else y1 + 2
        bbox = draw.textbbox((tx, ty), text, font=fnt)
        draw.rectangle([bbox[0] - 2, bbox[1] - 1, bbox[2] + 2, bbox[3] + 1], fill=(0, 0, 0, min(255, alpha)))
        draw.text((tx, ty), text, fill=(255, 255, 255, 255), font=fnt)
    return np.asarray(Image.alpha_composite(base, layer).convert("RGB"))


def render_step(rgb: np.ndarray, trace: AttentionTrace, t: int, style: str = "smooth", cmap: str = "spotlight",
                opacity: float = 0.6, show_alpha: bool = True, regions_shown: int = 8) -> np.ndarray:
    """The overlay for step t of a trace, whatever kind of attention the model has."""
    step = trace.steps[t]
    if trace.attends_to == "regions":
        small = max(rgb.shape[:2]) < 300
        return render_regions(rgb, trace.boxes_pixels(), trace.region_labels, trace.region_scores, step.attention,
                              trace.width, trace.height, show=3 if small else regions_shown, label_all=not small)
    out = render_heatmap(rgb, trace.grid(t), style, cmap, opacity) if (show_alpha or step.sample is None) else rgb
    if step.sample is not None:
        out = render_cells(out, [step.sample], trace.width, trace.height, grid=trace.grid_side)
    return out


def render_strip(rgb: np.ndarray, trace: AttentionTrace, tile: int = 160, per_row: int = 6, **style) -> np.ndarray:
    """The paper's figure: every word with its small overlay, in reading order."""
    h, w = rgb.shape[:2]
    small = cv2.resize(rgb, (tile, max(1, round(tile * h / w))), interpolation=cv2.INTER_AREA)
    th = small.shape[0]
    label_h = 26
    items = [("(photo)", small)] + [(s.word, render_step(small, trace, t, **style)) for t, s in enumerate(trace.steps)]
    rows = (len(items) + per_row - 1) // per_row
    sheet = Image.new("RGB", (per_row * (tile + 6) + 6, rows * (th + label_h + 6) + 6), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    for i, (word, img) in enumerate(items):
        x, y = 6 + (i % per_row) * (tile + 6), 6 + (i // per_row) * (th + label_h + 6)
        sheet.paste(Image.fromarray(img), (x, y + label_h))
        draw.text((x + tile / 2, y + label_h / 2), word, fill=(20, 20, 20), font=font(18), anchor="mm")
    return np.asarray(sheet)


def render_gif(rgb: np.ndarray, trace: AttentionTrace, path: str, max_side: int = 480, ms_per_word: int = 800,
               **style) -> str:
    """Animated GIF of the word-by-word attention with the caption so far written under it."""
    h, w = rgb.shape[:2]
    s = min(1.0, max_side / max(h, w))
    small = cv2.resize(rgb, (max(1, round(w * s)), max(1, round(h * s))), interpolation=cv2.INTER_AREA)
    frames = []
    for t in range(len(trace.steps)):
        img = Image.fromarray(render_step(small, trace, t, **style))
        canvas = Image.new("RGB", (img.width, img.height + 40), (255, 255, 255))
        canvas.paste(img, (0, 0))
        words = [st.word for st in trace.steps[: t + 1]]
        ImageDraw.Draw(canvas).text((8, img.height + 20), " ".join(words[-8:]), fill=(0, 0, 0), font=font(20), anchor="lm")
        frames.append(canvas)
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=ms_per_word, loop=0)
    return path
