"""Rendering on the original photo: sizes, cell alignment, spotlight, boxes, strip and GIF."""
import numpy as np
import pytest
from PIL import Image

from viewer.images import GRID, cell_boxes
from viewer.render import render_cells, render_gif, render_heatmap, render_regions, render_strip, upsample
from viewer.trace import AttentionTrace, TraceStep

RGB = np.full((300, 451, 3), 120, np.uint8)      # a non-square photo, like chelsea.jpg


def _one_hot(cell):
    g = np.full(GRID * GRID, 1e-4)
    g[cell] = 1.0
    return (g / g.sum()).reshape(GRID, GRID)


@pytest.mark.parametrize("style", ["smooth", "bilinear", "blocky"])
def test_maps_cover_the_whole_photo_in_range(style):
    heat = upsample(_one_hot(0), 451, 300, style)
    assert heat.shape == (300, 451) and heat.min() >= 0 and np.isclose(heat.max(), 1.0)


def test_blocky_cells_land_exactly_on_their_non_square_boxes():
    cell = 3 * GRID + 9
    heat = upsample(_one_hot(cell), 451, 300, "blocky")
    x1, y1, x2, y2 = cell_boxes(451, 300)[cell]
    inside = heat[int(np.ceil(y1)):int(y2), int(np.ceil(x1)):int(x2)]
    assert inside.min() == 1.0 and np.isclose(heat.sum(), (x2 - x1) * (y2 - y1), rtol=0.05)


def test_smooth_map_peaks_at_the_attended_cell():
    cell = 10 * GRID + 2
    heat = upsample(_one_hot(cell), 451, 300, "smooth")
    y, x = np.unravel_index(np.argmax(heat), heat.shape)
    x1, y1, x2, y2 = cell_boxes(451, 300)[cell]
    assert x1 - 20 <= x <= x2 + 20 and y1 - 20 <= y <= y2 + 20


def test_spotlight_keeps_the_attended_place_and_greys_the_rest():
    rgb = np.zeros((300, 451, 3), np.uint8)
    out = render_heatmap(rgb, _one_hot(0), "blocky", "spotlight", opacity=1.0)
    assert out.shape == rgb.shape and out.dtype == np.uint8
    assert out[2, 2].max() == 0 and out[-2, -2].min() >= 230


def test_colormap_overlay_and_bad_names():
    out = render_heatmap(RGB, _one_hot(5), "bilinear", "jet", 0.5)
    assert out.shape == RGB.shape and not np.array_equal(out, RGB)
    with pytest.raises(ValueError, match="colormap"):
        render_heatmap(RGB, _one_hot(5), "smooth", "rainbow-unicorn")
    with pytest.raises(ValueError, match="upsampling"):
        upsample(_one_hot(5), 10, 10, "lanczos")


def test_hard_cell_is_drawn_on_its_box():
    out = render_cells(RGB, [0], 451, 300, colour=(255, 0, 0), line=2)
    assert tuple(out[0, 5]) == (255, 0, 0) and tuple(out[150, 225]) == (120, 120, 120)


def test_region_boxes_emphasise_the_top_region():
    boxes = np.array([[10, 10, 200, 150], [250, 100, 440, 290]], float)
    out = render_regions(RGB, boxes, ["dog", "person"], [0.9, 0.8], [0.8, 0.2], 451, 300)
    assert out.shape == RGB.shape
    assert out[50:140, 40:190].mean(axis=(0, 1))[0] > 125     # the top box is tinted


def _trace():
    steps = [TraceStep(w, -1, -0.3, _one_hot(i * 20).ravel().astype(np.float32), []) for i, w in
             enumerate(["a", "cat", "<end>"])]
    return AttentionTrace("t", "grid", steps, 451, 300)


def test_strip_and_gif(tmp_path):
    strip = render_strip(RGB, _trace(), tile=100, per_row=6)
    assert strip.shape[1] == 6 * 106 + 6 and strip.shape[0] > 100
    path = render_gif(RGB, _trace(), str(tmp_path / "a.gif"))
    with Image.open(path) as gif:
        assert gif.n_frames == 3 and gif.size[0] == 451
