"""Pictures of attention, drawn on the ORIGINAL photo: heatmaps, hard-attention cells, weighted boxes,
coverage, the paper's word strip, its soft-vs-hard figure and an animated GIF.

The default look is the authors' own (their notebook: the map upsampled x16 with a Gaussian, shown
as a grey mask, bright where the model looked) on an ABSOLUTE scale: the same brightness means the
same weight on every word, photo and model, so diffuse attention looks diffuse. Every view carries
a colour bar that says so and marks its peak.

All functions take the display copy of the photo (`Photo.rgb`) and return uint8 RGB arrays;
pixel <-> cell mapping comes from `images.cell_boxes`, so cells are non-square on non-square
photos exactly as the squashed model input implies.
"""
from __future__ import annotations

import functools

import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from .images import AttendsTo, GRID, cell_boxes
from .trace import AttentionTrace, entropy
from .vision.boxes import CONTEXT

UPSAMPLING = ("smooth", "bilinear", "blocky")
COLORMAPS = ("paper", "spotlight", "jet", "inferno", "viridis", "gray")
SCALES = ("absolute", "stretch")
# The absolute scale: a place holding this share of the attention per 1/196 of the photo (one of our
# cells) shows at full brightness, whatever the word, photo or model; brightness rises as the square
# root of the weight so that a uniform map (1/196 a cell) is dim but visible and a peak is bright.
FULL_WEIGHT = 0.05
GAMMA = 0.5
PAPER_SIDE, PAPER_SIGMA = 224, 20   # the authors' notebook: pyramid_expand to 224 px, Gaussian sigma 20 px
_FONT_CACHE: dict[int, ImageFont.ImageFont] = {}


def font(size: int) -> ImageFont.ImageFont:
    if size not in _FONT_CACHE:
        _FONT_CACHE[size] = ImageFont.load_default(size=size)
    return _FONT_CACHE[size]


def density(grid: np.ndarray, width: int, height: int, style: str = "smooth") -> np.ndarray:
    """A grid map -> (height, width) attention per 1/196 of the photo (our cell), so grids of any
    side read on one scale. 'smooth' is the authors' own rendering: `pyramid_expand` to 224 px
    with a Gaussian of sigma 20 px, then resized to the photo."""
    if style not in UPSAMPLING:
        raise ValueError(f"unknown upsampling {style!r}; choose from {', '.join(UPSAMPLING)}")
    g = np.asarray(grid, dtype=np.float64)
    g = g * g.size / (GRID * GRID)
    if style == "blocky":
        return cv2.resize(g.astype(np.float32), (width, height), interpolation=cv2.INTER_NEAREST)
    if style == "smooth":
        a = paper_operator(g.shape[0])
        g = a @ g @ a.T
    return np.clip(cv2.resize(g.astype(np.float32), (width, height), interpolation=cv2.INTER_LINEAR), 0, None)


@functools.lru_cache(maxsize=8)
def paper_operator(side: int) -> np.ndarray:
    """(PAPER_SIDE, side): the authors' `pyramid_expand(grid, upscale, sigma)` as a matrix A with
    pyramid_expand(G) == A @ G @ A.T. Both of its steps (bilinear upsampling, Gaussian blur) act on
    rows and columns separately, so two small products give the same picture ~10x faster, which
    is what lets every word's view be drawn right after a caption."""
    from skimage.transform import pyramid_expand   # here: scikit-image and matplotlib slow the app's start
    up, centre = PAPER_SIDE / side, side // 2
    one = np.zeros((side, side))
    one[centre, centre] = 1.0
    peak = pyramid_expand(one, upscale=up, sigma=PAPER_SIGMA)        # a_c a_c^T
    k = int(np.argmax(np.diag(peak)))
    scale = np.sqrt(peak[k, k])                                      # a_c[k]
    columns = []
    for i in range(side):
        unit = np.zeros((side, side))
        unit[i, centre] = 1.0
        columns.append(pyramid_expand(unit, upscale=up, sigma=PAPER_SIGMA)[:, k] / scale)   # a_i * a_c[k]
    return np.stack(columns, axis=1)


def brightness(d: np.ndarray, scale: str = "absolute") -> np.ndarray:
    """Attention density -> [0, 1]: 'absolute' (FULL_WEIGHT and GAMMA, the same for every map) or
    'stretch' (this map's own range, which makes a nearly flat map look as sharp as a peaked one)."""
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; choose from {', '.join(SCALES)}")
    if scale == "absolute":
        return np.clip(d / FULL_WEIGHT, 0, 1) ** GAMMA
    return (d - d.min()) / max(float(d.max() - d.min()), 1e-12)


def upsample(grid: np.ndarray, width: int, height: int, style: str = "smooth", scale: str = "absolute") -> np.ndarray:
    """A grid map -> (height, width) brightness in [0, 1] on the chosen scale."""
    return brightness(density(grid, width, height, style), scale).astype(np.float32)


def shade(rgb: np.ndarray, light: np.ndarray, cmap: str = "paper", opacity: float = 0.8) -> np.ndarray:
    """Lay a [0, 1] map over the photo. 'paper': the figures of Show, Attend and Tell, a grey mask
    (white where attended, black where not) at `opacity`; 'spotlight': ignored places fade to grey;
    the others: a matplotlib colour map."""
    rgb = np.ascontiguousarray(rgb)
    if cmap == "paper":
        grey = np.repeat((light * 255).astype(np.uint8)[..., None], 3, axis=2)
        return cv2.addWeighted(rgb, 1.0 - opacity, grey, opacity, 0.0)
    if cmap == "spotlight":
        keep = (1.0 - opacity * (1.0 - light)).astype(np.float32)
        return cv2.blendLinear(rgb, np.full_like(rgb, 235), keep, 1.0 - keep)
    colours = cv2.applyColorMap((light * 255).astype(np.uint8), colour_table(cmap))
    return cv2.addWeighted(rgb, 1.0 - opacity, colours, opacity, 0.0)


def render_heatmap(rgb: np.ndarray, grid: np.ndarray, style: str = "smooth", cmap: str = "paper",
                   opacity: float = 0.8, scale: str = "absolute", bar: bool = True) -> np.ndarray:
    """Soft attention over the photo, with a colour bar that says what full brightness means and
    where this map's peak lies on it."""
    h, w = rgb.shape[:2]
    d = density(grid, w, h, style)
    out = shade(rgb, brightness(d, scale), cmap, opacity)
    if not bar:
        return out
    peak = float(np.max(grid))
    if scale == "absolute":
        return paste_bar(out, cmap, float(brightness(np.array(d.max()))), "0", f"{FULL_WEIGHT:.0%}/cell",
                         f"peak cell {peak:.1%}")
    return paste_bar(out, cmap, 1.0, "min", "max", f"peak cell {peak:.1%} (stretched)")


_LUTS: dict[str, np.ndarray] = {}


def colour_table(cmap: str) -> np.ndarray:
    """A colour map as a 256x1x3 uint8 table for cv2.applyColorMap (RGB order kept); the paper's mask
    and the spotlight are grey ramps."""
    if cmap not in COLORMAPS and cmap != "regions":
        raise ValueError(f"unknown colormap {cmap!r}; choose from {', '.join(COLORMAPS)}")
    if cmap not in _LUTS:
        ramp = np.linspace(0, 1, 256)[:, None]
        if cmap == "regions":   # the region fill: from nothing to the top region's colour
            table = ramp * np.array(TOP_COLOUR)
        else:
            from matplotlib import colormaps
            table = colormaps["gray" if cmap in ("paper", "spotlight") else cmap](ramp[:, 0])[:, :3] * 255
        _LUTS[cmap] = np.ascontiguousarray(table.round().astype(np.uint8)[:, None, :])
    return _LUTS[cmap]


def colour_bar(width: int, cmap: str, marker: float | None, left: str, right: str, title: str) -> np.ndarray:
    """A small legend: `title` over a ramp of the colour map from `left` to `right`, with a
    triangle at `marker` (0..1 along the ramp)."""
    fnt = font(max(10, width // 14))
    ramp_h = max(6, width // 18)
    pad = 4
    height = 2 * fnt.size + ramp_h + 3 * pad
    img = Image.new("RGB", (width, height), (24, 24, 24))
    draw = ImageDraw.Draw(img)
    ramp = colour_table(cmap)[np.linspace(0, 255, width - 2 * pad).astype(int), 0]
    img.paste(Image.fromarray(np.repeat(ramp[None], ramp_h, axis=0)), (pad, pad + fnt.size + pad))
    draw.text((pad, pad), title, fill=(255, 255, 255), font=fnt)
    y = pad + fnt.size + pad + ramp_h
    draw.text((pad, y + 1), left, fill=(200, 200, 200), font=fnt)
    draw.text((width - pad, y + 1), right, fill=(200, 200, 200), font=fnt, anchor="ra")
    if marker is not None:
        x = pad + float(np.clip(marker, 0, 1)) * (width - 2 * pad)
        top = pad + fnt.size + pad
        draw.polygon([(x - 4, top - 1), (x + 4, top - 1), (x, top + ramp_h * 0.6)], fill=(245, 158, 11))
    return np.asarray(img)


def paste_bar(rgb: np.ndarray, cmap: str, marker: float | None, left: str, right: str, title: str) -> np.ndarray:
    """`colour_bar` in the bottom-left corner of a view (sized to the view)."""
    h, w = rgb.shape[:2]
    bar = colour_bar(int(np.clip(w * 0.28, 96, 280)), cmap, marker, left, right, title)
    if bar.shape[0] + 8 > h or bar.shape[1] + 8 > w:
        return rgb
    out = rgb.copy()
    y, x = h - bar.shape[0] - 6, 6
    out[y:y + bar.shape[0], x:x + bar.shape[1]] = cv2.addWeighted(out[y:y + bar.shape[0], x:x + bar.shape[1]], 0.15,
                                                                    bar, 0.85, 0.0)
    return out


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


def shown_regions(weights, mass: float = 0.9, most: int = 8) -> list[int]:
    """The fewest regions (most weighted first) that hold `mass` of the weight, at most `most`."""
    weights = np.asarray(weights, dtype=np.float64)
    order = np.argsort(-weights, kind="stable")
    n = int(np.searchsorted(np.cumsum(weights[order]), mass * weights.sum() - 1e-9)) + 1
    return order[:min(n, most, len(order))].tolist()


def place_labels(anchors: np.ndarray, sizes: list[tuple[int, int]], width: int, height: int
                 ) -> list[tuple[int, int, int, int] | None]:
    """Label rectangles for boxes, first come first placed: just above the box, inside its top,
    below it, inside its bottom (left, then right aligned), always inside the photo and never over
    an earlier label; a label with no free place is left out (None)."""
    placed: list[tuple[int, int, int, int]] = []
    out = []
    for (x1, y1, x2, y2), (w, h) in zip(np.asarray(anchors, dtype=float).tolist(), sizes):
        if w > width or h > height:
            out.append(None)
            continue
        spots = [(x, y) for y in (y1 - h, y1, y2, y2 - h) for x in (x1, x2 - w)]
        spots += [(x1, y) for y in np.arange(0, height - h + 1, max(1, h // 2))]   # last resort: slide down
        rect = None
        for x, y in spots:
            x, y = int(np.clip(round(x), 0, width - w)), int(np.clip(round(y), 0, height - h))
            cand = (x, y, x + w, y + h)
            if all(cand[2] <= r[0] or r[2] <= cand[0] or cand[3] <= r[1] or r[3] <= cand[1] for r in placed):
                rect = cand
                break
        if rect is not None:
            placed.append(rect)
        out.append(rect)
    return out


OBJECT_COLOUR, TOP_COLOUR, CONTEXT_COLOUR = (0, 190, 255), (255, 200, 0), (210, 210, 210)
FILL_MAX = 0.5   # fill opacity of a region holding all the weight (absolute: it follows the weight)


def render_regions(rgb: np.ndarray, boxes_px: np.ndarray, labels: list[str], scores, weights, width: int,
                   height: int, most: int = 8, label_all: bool = True, bar: bool = True) -> np.ndarray:
    """Region attention: the fewest regions holding 90% of the weight (at most `most`), filled as
    strongly as their weight (the same scale on every view); objects labelled 'class score · weight',
    the fixed context regions drawn quietly and unlabelled unless they hold the most weight; labels
    never overlap each other or leave the photo."""
    h, w = rgb.shape[:2]
    scale = np.array([w / width, h / height] * 2)
    weights = np.asarray(weights, dtype=np.float64)
    shown = shown_regions(weights, most=most)
    base = Image.fromarray(np.ascontiguousarray(rgb)).convert("RGBA")
    layer = Image.new("RGBA", base.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(layer)
    unit = max(1.0, min(w, h) / 300)
    fnt = font(max(11, round(6 * unit)))
    boxes = np.asarray(boxes_px, dtype=np.float64)[shown] * scale
    for i, box in reversed(list(zip(shown, boxes.tolist()))):
        is_top, quiet = i == shown[0], labels[i] in CONTEXT
        colour = TOP_COLOUR if is_top else CONTEXT_COLOUR if quiet else OBJECT_COLOUR
        fill = int(255 * FILL_MAX * np.sqrt(weights[i]) * (0.5 if quiet and not is_top else 1.0))
        line = 1 if quiet and not is_top else max(1, round(unit * (1 + 4 * np.sqrt(weights[i]))))
        draw.rectangle(box, fill=colour + (fill,), outline=colour + (140 if quiet and not is_top else 255,), width=line)
    named = [(i, box) for i, box in zip(shown, boxes.tolist())
             if i == shown[0] or (label_all and labels[i] not in CONTEXT)]
    texts = [f"{labels[i]} · {weights[i]:.2f}" if labels[i] in CONTEXT else
             f"{labels[i]} {float(scores[i]):.2f} · {weights[i]:.2f}" for i, _ in named]
    sizes = []
    for text in texts:
        x1, y1, x2, y2 = draw.textbbox((0, 0), text, font=fnt)
        sizes.append((x2 + 6, y2 + 4))
    for (i, _), text, rect in zip(named, texts, place_labels(np.array([b for _, b in named]).reshape(-1, 4),
                                                             sizes, w, h)):
        if rect is not None:
            draw.rectangle(rect, fill=(0, 0, 0, 200), outline=(TOP_COLOUR if i == shown[0] else OBJECT_COLOUR) + (255,))
            draw.text((rect[0] + 3, rect[1] + 2), text, fill=(255, 255, 255, 255), font=fnt)
    out = np.asarray(Image.alpha_composite(base, layer).convert("RGB"))
    if not bar:
        return out
    return paste_bar(out, "regions", float(np.sqrt(weights.max())), "0", "1",
                     f"top region {weights.max():.2f}")


def region_density(boxes_px: np.ndarray, weights, width: int, height: int, w: int, h: int) -> np.ndarray:
    """Region weights as a (h, w) map: each pixel gets the summed weight of the regions covering it."""
    out = np.zeros((h, w), np.float32)
    scale = np.array([w / width, h / height] * 2)
    for (x1, y1, x2, y2), wt in zip((np.asarray(boxes_px) * scale).round().astype(int).tolist(), weights):
        out[max(0, y1):max(0, y2), max(0, x1):max(0, x2)] += wt
    return out


def render_coverage(rgb: np.ndarray, trace: AttentionTrace, t: int, style: str = "smooth") -> np.ndarray:
    """Attention summed over words 1..t (the doubly stochastic regulariser's quantity): grid cells
    or, for region models, the summed weight per pixel; stretched to its own range, as it grows."""
    h, w = rgb.shape[:2]
    cov = trace.coverage(t)
    if trace.attends_to == AttendsTo.GRID:
        d = density(cov.reshape(trace.grid_side, trace.grid_side), w, h, style)
        peak, unit = float(cov.max()), "cell"
    else:
        d = region_density(trace.boxes_pixels(), cov, trace.width, trace.height, w, h)
        peak, unit = float(d.max()), "pixel"
    out = shade(rgb, brightness(d, "stretch"), "inferno", 0.65)
    return paste_bar(out, "inferno", 1.0, "0", f"{peak:.2f}", f"summed attention, peak {unit} {peak:.2f}")


def render_step(rgb: np.ndarray, trace: AttentionTrace, t: int, style: str = "smooth", cmap: str = "paper",
                opacity: float = 0.8, scale: str = "absolute", show_alpha: bool = True, bar: bool = True,
                head: tuple[int, int] | None = None) -> np.ndarray:
    """The overlay for step t of a trace, whatever kind of attention the model has; `head` (layer,
    head) shows one head of a multi-head model instead of the trace's summary map."""
    step = trace.steps[t]
    if head is not None and step.heads is not None:
        return render_heatmap(rgb, step.heads[head].reshape(trace.grid_side, trace.grid_side), style, cmap, opacity,
                              scale, bar=bar)
    if trace.attends_to == AttendsTo.REGIONS:
        small = max(rgb.shape[:2]) < 300
        return render_regions(rgb, trace.boxes_pixels(), trace.region_labels, trace.region_scores, step.attention,
                              trace.width, trace.height, most=3 if small else 8, label_all=not small, bar=bar)
    out = rgb
    if show_alpha or step.sample is None:
        out = render_heatmap(rgb, trace.grid(t), style, cmap, opacity, scale, bar=bar)
    if step.sample is not None:
        out = render_cells(out, [step.sample], trace.width, trace.height, grid=trace.grid_side)
    return out


def step_legend(trace: AttentionTrace, t: int) -> str:
    """What a tile says under its word: the peak weight, SAT's gate beta (or updown-copy's p(copy)) and
    the map's entropy."""
    s = trace.steps[t]
    parts = [f"peak {s.attention.max():.0%}"] + ([f"beta {s.beta:.2f}"] if s.beta is not None else []) \
        + ([f"copy {s.copy:.2f}"] if s.copy is not None else [])
    return " · ".join(parts + [f"H {s.entropy:.2f}"])


def tile_bar(trace: AttentionTrace, t: int, width: int, cmap: str, scale: str, style: str = "smooth") -> np.ndarray:
    """A tile's colour bar: where its peak lies on the scale (regions: the top weight)."""
    s = trace.steps[t]
    if trace.attends_to == AttendsTo.REGIONS:
        return colour_bar(width, "regions", float(np.sqrt(s.attention.max())), "0", "1", step_legend(trace, t))
    return map_bar(trace.grid(t), width, cmap, scale, style, step_legend(trace, t))


def map_bar(grid: np.ndarray, width: int, cmap: str, scale: str, style: str, title: str) -> np.ndarray:
    """A small tile's colour bar: where the map's (smoothed) peak lies on the scale."""
    d = density(grid, 56, 56, style)
    marker = float(brightness(np.array(d.max()), "absolute")) if scale == "absolute" else 1.0
    right = f"{FULL_WEIGHT:.0%}" if scale == "absolute" else "max"
    return colour_bar(width, cmap, marker, "0", right, title)


def _style(style: dict) -> tuple[str, str]:
    return style.get("cmap", "paper"), style.get("scale", "absolute")


def render_strip(rgb: np.ndarray, trace: AttentionTrace, tile: int = 160, per_row: int = 6, **style) -> np.ndarray:
    """The paper's figure: every word with its small overlay in reading order; under each, a colour
    bar with the peak weight, beta and the entropy (the authors' notebook puts beta there)."""
    h, w = rgb.shape[:2]
    small = cv2.resize(rgb, (tile, max(1, round(tile * h / w))), interpolation=cv2.INTER_AREA)
    th = small.shape[0]
    label_h = 26
    cmap, scale = _style(style)
    tiles = [("(photo)", small, None)] + [
        (s.word, render_step(small, trace, t, bar=False, **style), tile_bar(trace, t, tile, cmap, scale))
        for t, s in enumerate(trace.steps)]
    bar_h = max(b.shape[0] for _, _, b in tiles[1:]) if len(tiles) > 1 else 0
    cell_h = label_h + th + bar_h + 8
    rows = (len(tiles) + per_row - 1) // per_row
    sheet = Image.new("RGB", (per_row * (tile + 6) + 6, rows * cell_h + 6), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    for i, (word, img, bar) in enumerate(tiles):
        x, y = 6 + (i % per_row) * (tile + 6), 6 + (i // per_row) * cell_h
        sheet.paste(Image.fromarray(img), (x, y + label_h))
        if bar is not None:
            sheet.paste(Image.fromarray(bar), (x, y + label_h + th + 2))
        draw.text((x + tile / 2, y + label_h / 2), word, fill=(20, 20, 20), font=font(18), anchor="mm")
    return np.asarray(sheet)


def render_figure(rgb: np.ndarray, traces: list[AttentionTrace], tile: int = 150, **style) -> np.ndarray:
    """The paper's soft-vs-hard figure: the same caption through two or three models, one row per
    model (named on the left), one column per word; each tile has its colour bar underneath."""
    h, w = rgb.shape[:2]
    small = cv2.resize(rgb, (tile, max(1, round(tile * h / w))), interpolation=cv2.INTER_AREA)
    th = small.shape[0]
    cmap, scale = _style(style)
    n_words = max(len(tr.steps) for tr in traces)
    head_h, name_w, gap = 30, tile, 6
    bar_h = colour_bar(tile, cmap, 0.0, "0", "1", "x").shape[0]
    row_h = th + bar_h + gap + 4
    sheet = Image.new("RGB", (name_w + (n_words + 1) * (tile + gap) + gap, head_h + len(traces) * row_h + gap),
                      (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    words = max(traces, key=lambda tr: len(tr.steps)).steps
    for t, s in enumerate(words):
        draw.text((name_w + (t + 1) * (tile + gap) + gap + tile / 2, head_h / 2), s.word, fill=(20, 20, 20),
                  font=font(18), anchor="mm")
    for r, tr in enumerate(traces):
        y = head_h + r * row_h
        draw.text((gap, y + th / 2), tr.model, fill=(20, 20, 20), font=font(18), anchor="lm")
        sheet.paste(Image.fromarray(small), (name_w + gap, y))
        for t in range(len(tr.steps)):
            x = name_w + (t + 1) * (tile + gap) + gap
            sheet.paste(Image.fromarray(render_step(small, tr, t, bar=False, **style)), (x, y))
            sheet.paste(Image.fromarray(tile_bar(tr, t, tile, cmap, scale)), (x, y + th + 2))
    return np.asarray(sheet)


def render_heads(rgb: np.ndarray, trace: AttentionTrace, t: int, tile: int = 130, **style) -> np.ndarray:
    """Every layer's and head's cross-attention for word t as small multiples (layers as rows, heads
    as columns, as bertviz lays them out), each tile with its colour bar."""
    heads = trace.steps[t].heads
    if heads is None:
        raise ValueError(f"{trace.model} has one attention map per word, not heads")
    h, w = rgb.shape[:2]
    small = cv2.resize(rgb, (tile, max(1, round(tile * h / w))), interpolation=cv2.INTER_AREA)
    th = small.shape[0]
    cmap, scale = _style(style)
    n_layers, n_heads = heads.shape[:2]
    side = trace.grid_side
    bar_h = colour_bar(tile, cmap, 0.0, "0", "1", "x").shape[0]
    head_h, name_w, gap = 28, 80, 6
    row_h = th + bar_h + gap + 2
    sheet = Image.new("RGB", (name_w + n_heads * (tile + gap) + gap, head_h + n_layers * row_h + gap), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    for j in range(n_heads):
        draw.text((name_w + j * (tile + gap) + tile / 2, head_h / 2), f"head {j + 1}", fill=(20, 20, 20),
                  font=font(16), anchor="mm")
    for i in range(n_layers):
        y = head_h + i * row_h
        draw.text((gap, y + th / 2), f"layer {i + 1}", fill=(20, 20, 20), font=font(16), anchor="lm")
        for j in range(n_heads):
            x = name_w + j * (tile + gap)
            grid = heads[i, j].reshape(side, side)
            sheet.paste(Image.fromarray(render_heatmap(small, grid, style.get("style", "smooth"), cmap,
                                                       style.get("opacity", 0.8), scale, bar=False)), (x, y))
            bar = map_bar(grid, tile, cmap, scale, style.get("style", "smooth"),
                          f"peak {grid.max():.0%} · H {entropy(grid):.2f}")
            sheet.paste(Image.fromarray(bar), (x, y + th + 2))
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
