"""Rendering on the original photo: sizes, cell alignment, the paper's look on an absolute scale,
readable region boxes, coverage, strip, the soft-vs-hard figure and GIF."""
import numpy as np
import pytest
from PIL import Image

from viewer.engine.images import GRID, cell_boxes
from viewer.engine.render import (FULL_WEIGHT, place_labels, region_density, render_cells, render_coverage, render_figure,
                           render_gif, render_heatmap, render_regions, render_step, render_strip, shown_regions,
                           upsample)
from viewer.engine.trace import AttentionTrace, TraceStep

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
    heat = upsample(_one_hot(cell), 451, 300, "blocky", scale="stretch")
    x1, y1, x2, y2 = cell_boxes(451, 300)[cell]
    inside = heat[int(np.ceil(y1)):int(y2), int(np.ceil(x1)):int(x2)]
    assert inside.min() == 1.0 and np.isclose(heat.sum(), (x2 - x1) * (y2 - y1), rtol=0.05)


def test_smooth_map_peaks_at_the_attended_cell():
    cell = 10 * GRID + 2
    heat = upsample(_one_hot(cell), 451, 300, "smooth", scale="stretch")
    y, x = np.unravel_index(np.argmax(heat), heat.shape)
    x1, y1, x2, y2 = cell_boxes(451, 300)[cell]
    assert x1 - 20 <= x <= x2 + 20 and y1 - 20 <= y <= y2 + 20


@pytest.mark.parametrize("side", [14, 7])
def test_smooth_is_exactly_the_authors_pyramid_expand(side):
    """The fast separable form gives the picture of their notebook's call, for any grid side."""
    from skimage.transform import pyramid_expand
    from viewer.engine.render import PAPER_SIDE, PAPER_SIGMA, density
    grid = np.random.default_rng(side).dirichlet(np.full(side * side, 0.3)).reshape(side, side)
    theirs = pyramid_expand(grid * grid.size / (GRID * GRID), upscale=PAPER_SIDE / side, sigma=PAPER_SIGMA)
    ours = density(grid, PAPER_SIDE, PAPER_SIDE, "smooth")
    assert np.allclose(ours, theirs, rtol=1e-5, atol=1e-9 * theirs.max())


def test_spotlight_keeps_the_attended_place_and_greys_the_rest():
    rgb = np.zeros((300, 451, 3), np.uint8)
    out = render_heatmap(rgb, _one_hot(0), "blocky", "spotlight", opacity=1.0, scale="stretch")
    assert out.shape == rgb.shape and out.dtype == np.uint8
    assert out[2, 2].max() == 0 and out[-2, -2].min() >= 230


def test_paper_look_is_bright_where_attended_and_dark_elsewhere():
    out = render_heatmap(RGB, _one_hot(3 * GRID + 9), "smooth", "paper", opacity=0.8, bar=False)
    x1, y1, x2, y2 = cell_boxes(451, 300)[3 * GRID + 9]
    at = out[int(y1):int(y2), int(x1):int(x2)].mean()
    assert at > 200 and out[-20:, :40].mean() < 0.2 * 120 + 0.8 * 255 * 0.1 + 5   # photo at 20%, mask nearly black


def test_absolute_scale_keeps_a_flat_map_flat_and_stretch_does_not():
    flat = np.full((GRID, GRID), 1.0 / GRID ** 2)
    bumped = flat.copy()
    bumped[7, 7] += 1e-4
    bumped /= bumped.sum()
    for grid in (flat, bumped):
        light = upsample(grid, 451, 300, "smooth", "absolute")
        assert light.max() - light.min() < 0.01                     # uniform renders uniform...
        assert 0.2 < light.mean() < 0.5                             # ...and dim: far from the full scale
    assert np.ptp(upsample(bumped, 451, 300, "smooth", "stretch")) > 0.99   # stretch blows a 0.0001 bump up
    sharp = upsample(_one_hot(5), 451, 300, "smooth", "absolute")
    assert sharp.max() == 1.0                                      # a confident map reaches the top
    # the same weight gives the same brightness whatever the grid side (a 7x7 cell is four of ours)
    coarse = np.full((7, 7), 1.0 / 49)
    assert np.allclose(upsample(coarse, 451, 300, "blocky"), upsample(flat, 451, 300, "blocky"), atol=1e-4)


def test_colour_bar_marks_the_peak_on_the_scale():
    def marker_x(grid):
        out = render_heatmap(np.zeros((300, 451, 3), np.uint8), grid, "smooth", "paper")
        amber = (out[..., 0] > 200) & (out[..., 1] > 120) & (out[..., 1] < 180) & (out[..., 2] < 60)
        ys, xs = np.nonzero(amber)
        assert len(xs) and ys.min() > 200                           # the bar sits in the bottom-left corner
        return xs.mean()
    weak = np.full(GRID * GRID, 1.0)
    weak[20] = 3.0
    assert marker_x((weak / weak.sum()).reshape(GRID, GRID)) < marker_x(_one_hot(20))
    assert 0 < FULL_WEIGHT < 1


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
    out = render_regions(RGB, boxes, ["dog", "person"], [0.9, 0.8], [0.8, 0.2], 451, 300, bar=False)
    assert out.shape == RGB.shape
    assert out[50:140, 40:190].mean(axis=(0, 1))[0] > 125     # the top box is tinted
    weaker = render_regions(RGB, boxes, ["dog", "person"], [0.9, 0.8], [0.4, 0.6], 451, 300, bar=False)
    assert out[200:280, 300:400].mean() < weaker[200:280, 300:400].mean() + 40   # fill follows the weight...
    assert abs(out[50:140, 40:190].mean() - weaker[50:140, 40:190].mean()) > 3   # ...not the rank


def test_fewest_regions_holding_most_of_the_weight():
    assert shown_regions([0.5, 0.3, 0.15, 0.05]) == [0, 1, 2]
    assert shown_regions([0.95, 0.05]) == [0]
    assert len(shown_regions(np.full(20, 0.05))) == 8


def test_labels_never_overlap_or_leave_the_photo():
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 400, (12, 2))
    anchors = np.concatenate([xy, xy + rng.uniform(20, 120, (12, 2))], 1)
    sizes = [(int(rng.integers(60, 160)), 18) for _ in anchors]
    rects = place_labels(anchors, sizes, 451, 300)
    placed = [r for r in rects if r is not None]
    assert len(placed) >= 8
    for i, a in enumerate(placed):
        assert 0 <= a[0] and a[2] <= 451 and 0 <= a[1] and a[3] <= 300
        for b in placed[i + 1:]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)


def test_context_regions_are_quiet_and_unlabelled_unless_on_top():
    boxes = np.array([[100, 80, 300, 250], [0, 0, 451, 300], [0, 0, 225, 150]], float)
    labels, scores = ["dog", "whole image", "quarter top left"], [0.9, 1.0, 1.0]
    with_label = render_regions(RGB, boxes, labels, scores, [0.5, 0.3, 0.2], 451, 300, bar=False)
    as_top = render_regions(RGB, boxes, labels, scores, [0.2, 0.3, 0.5], 451, 300, bar=False)
    white = lambda img: int(((img > 230).all(-1)).sum())  # noqa: E731  (label text is white)
    assert white(with_label) > 0 and white(as_top) > 0
    only_object = render_regions(RGB, boxes[:1], labels[:1], scores[:1], [1.0], 451, 300, bar=False)
    assert abs(white(with_label) - white(only_object)) < 0.2 * white(only_object)   # no context labels


def test_region_coverage_sums_the_weight_per_pixel():
    boxes = np.array([[0, 0, 100, 100], [50, 50, 150, 150]], float)
    d = region_density(boxes, [0.25, 0.5], 200, 200, 200, 200)
    assert d[25, 25] == 0.25 and d[75, 75] == 0.75 and d[125, 125] == 0.5 and d[175, 175] == 0


def _trace():
    steps = [TraceStep(w, -1, -0.3, _one_hot(i * 20).ravel().astype(np.float32), []) for i, w in
             enumerate(["a", "cat", "<end>"])]
    return AttentionTrace("t", "grid", steps, 451, 300)


def test_view_of_word_t_is_word_t_map():
    trace = _trace()
    views = [render_step(RGB, trace, t) for t in range(len(trace.steps))]
    for t, view in enumerate(views):
        light = view.astype(float).mean(-1)
        light[-80:, :140] = 0                                      # leave the colour bar out
        y, x = np.argwhere(light >= 0.98 * light.max()).mean(0)     # the middle of the brightest area
        x1, y1, x2, y2 = cell_boxes(451, 300)[t * 20]
        assert x1 - 25 <= x <= x2 + 25 and y1 - 25 <= y <= y2 + 25
    assert not np.array_equal(views[0], views[1])


def test_coverage_for_grid_and_region_traces():
    """Coverage at word t is the attention summed over words 0..t: brighter where more was summed."""
    def light(out, r, c):       # mean brightness around the centre of grid cell (r, c) of the 451x300 photo
        x, y = int((c + 0.5) * 451 / 14), int((r + 0.5) * 300 / 14)
        return out[y - 3:y + 4, x - 3:x + 4].astype(float).mean()

    cells = {"A": (2, 2), "B": (10, 10), "C": (2, 10), "D": (7, 5)}
    maps = [{"A": 0.7, "B": 0.3}, {"B": 0.6, "C": 0.4}, {"D": 1.0}]
    steps = []
    for w, m in zip(["a", "cat", "<end>"], maps):
        a = np.zeros((14, 14), np.float32)
        for name, v in m.items():
            a[cells[name]] = v
        steps.append(TraceStep(w, -1, -0.3, a.ravel(), []))
    trace = AttentionTrace("t", "grid", steps, 451, 300)
    assert np.allclose(trace.coverage(1), steps[0].attention + steps[1].attention)
    assert np.allclose(trace.coverage(2).sum(), 3.0)
    out = render_coverage(RGB, trace, 1)
    assert out.shape == RGB.shape
    b, a, c, d = (light(out, *cells[k]) for k in "BACD")    # summed: B 0.9 > A 0.7 > C 0.4 > D 0 (word 2 not yet)
    assert b > a > c > d + 10, (b, a, c, d)
    steps = [TraceStep(w, -1, -0.3, np.array(a, np.float32), [])
             for w, a in [("a", [0.9, 0.1]), ("dog", [0.4, 0.6]), ("runs", [0.0, 1.0])]]
    regions = AttentionTrace("r", "regions", steps, 451, 300, region_boxes=np.array([[0, 0, .5, .5], [.5, .5, 1, 1]]),
                             region_labels=["dog", "cat"], region_scores=np.array([0.9, 0.8]))
    assert np.allclose(regions.coverage(1), [1.3, 0.7])
    out = render_coverage(RGB, regions, 1)      # top-left region 1.3 > bottom-right 0.7 (word 1 alone: the reverse)
    assert out.shape == RGB.shape
    top_left, bottom_right = out[40:110, 150:210].astype(float).mean(), out[190:260, 260:420].astype(float).mean()
    assert top_left > bottom_right + 10, (top_left, bottom_right)
    out = render_coverage(RGB, regions, 2)      # 1.3 < 1.7 once word 2 is summed in
    assert out[40:110, 150:210].astype(float).mean() + 10 < out[190:260, 260:420].astype(float).mean()


def test_strip_tiles_carry_bars_and_the_figure_has_a_row_per_model():
    strip = render_strip(RGB, _trace(), tile=100, per_row=6)
    assert strip.shape[1] == 6 * 106 + 6 and strip.shape[0] > 26 + 67 + 20
    fig = render_figure(RGB, [_trace(), _trace()], tile=90)
    one = render_figure(RGB, [_trace()], tile=90)
    assert fig.shape[1] == one.shape[1] and fig.shape[0] > one.shape[0] + 60
    assert fig.shape[1] >= 90 * (len(_trace().steps) + 2)


def test_strip_and_gif(tmp_path):
    path = render_gif(RGB, _trace(), str(tmp_path / "a.gif"))
    with Image.open(path) as gif:
        assert gif.n_frames == 3 and gif.size[0] == 451
