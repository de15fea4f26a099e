// The page's view (page_view.py): the body of gr.HTML's js_on_load (element, trigger, props, server, watch),
// after `const AV_CONSTANTS = {...}` (the absolute scale and colour tables render.py uses).
// It draws what render.py draws, the same way: density (the paper's A @ G @ A.T, bilinear or
// blocky), brightness (absolute or stretched), shading (the paper's grey mask, spotlight, a colour
// map), the colour bar, hard attention's cells, region boxes, the coverage. Steps and styles redraw
// here; the Explore view also shows the rest of the word's page from the trace (the selected word,
// its panel, the raw numbers, the next words, the coverage and the word strip). The server hears of
// a click on the photo (steering, hiding) through the `select` event, and that every frame of a new
// trace is made through `load` (the seen words follow it: a run of the model, kept off the cores
// while the page makes the frames).
const C = AV_CONSTANTS;
const root = element.querySelector('.av');
const canvas = element.querySelector('.av-canvas');
const title = element.querySelector('.av-title');
const ctx = canvas.getContext('2d');
const S = {payload: null, key: null, photo: null, step: 0, frames: new Map(), frameStyle: null, busy: false, hover: null,
           tiles: new Set(), tileTask: null};
// work that can wait for a free moment (the strip's tiles, warming up): a click or key goes first
const idle = window.requestIdleCallback ? (f) => window.requestIdleCallback(f, {timeout: 1000}) : (f) => setTimeout(f, 1);
const home = element.closest('#view, [id^="cmp-view-"]');
const main = !!element.closest('#view');
if (main) window.__viewerMain = S;   // the Explore view: the stepping keys drive it (viewer.js), its words are tinted
(window.__attentionViews = window.__attentionViews || {})[home ? home.id : 'view'] = S;
window.__viewerStyle = window.__viewerStyle || {upsampling: 'smooth', colormap: 'paper', opacity: 0.8,
  scale: 'absolute', show_alpha: true, hard_samples: 1};

// session.packed: a numeric array sent as one base64 string of float32s, back as nested plain arrays
// of numbers, as JSON would have given them (anything else is returned as it is)
function unpacked(v) {
  if (!v || typeof v.f32 !== 'string') return v;
  const bin = atob(v.f32), bytes = new Uint8Array(bin.length), shape = v.shape;
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  const flat = new Float32Array(bytes.buffer);
  const part = (at, d) => {
    if (d >= shape.length - 1) return Array.from(flat.subarray(at, at + (shape[d] ?? flat.length)));
    const size = shape.slice(d + 1).reduce((a, b) => a * b, 1);
    return Array.from({length: shape[d]}, (_, i) => part(at + i * size, d + 1));
  };
  return part(0, 0);
}
const unpackedAll = (o) => Object.fromEntries(Object.entries(o).map(([k, v]) => [k, unpacked(v)]));

// --- the drawing, as render.py -----------------------------------------------------------------
// cv2.resize(INTER_LINEAR) of a (sh, sw) float map to (h, w): half-pixel centres, edges replicated.
function bilinear(src, sw, sh, w, h) {
  const out = new Float32Array(w * h), xs = new Int32Array(w), xf = new Float32Array(w);
  const fxs = sw / w, fys = sh / h;
  for (let x = 0; x < w; x++) {
    let fx = (x + 0.5) * fxs - 0.5, sx = Math.floor(fx); fx -= sx;
    if (sx < 0) { fx = 0; sx = 0; }
    if (sx >= sw - 1) { fx = 0; sx = sw - 1; }
    xs[x] = sx; xf[x] = fx;
  }
  for (let y = 0; y < h; y++) {
    let fy = (y + 0.5) * fys - 0.5, sy = Math.floor(fy); fy -= sy;
    if (sy < 0) { fy = 0; sy = 0; }
    if (sy >= sh - 1) { fy = 0; sy = sh - 1; }
    const r0 = sy * sw, r1 = Math.min(sy + 1, sh - 1) * sw, o = y * w;
    for (let x = 0; x < w; x++) {
      const sx = xs[x], sx1 = Math.min(sx + 1, sw - 1), a = xf[x];
      const top = src[r0 + sx] * (1 - a) + src[r0 + sx1] * a, bot = src[r1 + sx] * (1 - a) + src[r1 + sx1] * a;
      const v = top * (1 - fy) + bot * fy;
      out[o + x] = v > 0 ? v : 0;
    }
  }
  return out;
}

// render.density: attention per 1/196 of the photo at every pixel.
function density(map, side, w, h, style, paper) {
  const k = (side * side) / 196, g = new Float64Array(side * side);
  for (let i = 0; i < g.length; i++) g[i] = map[i] * k;
  if (style === 'blocky') {
    const out = new Float32Array(w * h);
    for (let y = 0; y < h; y++) {
      const sy = Math.min(Math.floor(y * side / h), side - 1);
      for (let x = 0; x < w; x++) out[y * w + x] = g[sy * side + Math.min(Math.floor(x * side / w), side - 1)];
    }
    return out;
  }
  if (style === 'smooth') {   // the paper's pyramid_expand as A @ G @ A.T (A: paper_side x side)
    const P = paper.length, ag = new Float64Array(P * side), big = new Float32Array(P * P);
    for (let i = 0; i < P; i++) for (let j = 0; j < side; j++) {
      let s = 0; for (let m = 0; m < side; m++) s += paper[i][m] * g[m * side + j];
      ag[i * side + j] = s;
    }
    for (let i = 0; i < P; i++) for (let j = 0; j < P; j++) {
      let s = 0; for (let m = 0; m < side; m++) s += ag[i * side + m] * paper[j][m];
      big[i * P + j] = s;
    }
    return bilinear(big, P, P, w, h);
  }
  return bilinear(Float32Array.from(g), side, side, w, h);
}

// render.region_density: each pixel, the summed weight of the regions covering it.
function regionDensity(boxes, weights, w, h) {
  const out = new Float32Array(w * h);
  boxes.forEach((b, i) => {
    const x1 = Math.max(0, Math.round(b[0])), y1 = Math.max(0, Math.round(b[1]));
    const x2 = Math.min(w, Math.max(0, Math.round(b[2]))), y2 = Math.min(h, Math.max(0, Math.round(b[3])));
    for (let y = y1; y < y2; y++) for (let x = x1; x < x2; x++) out[y * w + x] += weights[i];
  });
  return out;
}

// render.brightness: [0, 1] on the absolute scale (FULL_WEIGHT, GAMMA) or the map's own range.
function brightness(d, scale) {
  const out = new Float32Array(d.length);
  if (scale === 'absolute') {
    for (let i = 0; i < d.length; i++) out[i] = Math.pow(Math.min(Math.max(d[i] / C.full_weight, 0), 1), C.gamma);
    return out;
  }
  let lo = Infinity, hi = -Infinity;
  for (let i = 0; i < d.length; i++) { if (d[i] < lo) lo = d[i]; if (d[i] > hi) hi = d[i]; }
  const span = Math.max(hi - lo, 1e-12);
  for (let i = 0; i < d.length; i++) out[i] = (d[i] - lo) / span;
  return out;
}

// render.shade: the light laid over the photo.
function shade(photo, light, cmap, opacity, out) {
  const p = photo.data, o = out.data, n = light.length, lut = C.luts[cmap];
  for (let i = 0, j = 0; i < n; i++, j += 4) {
    const l = light[i];
    if (cmap === 'paper') {
      const g = Math.floor(l * 255) * opacity;
      o[j] = p[j] * (1 - opacity) + g; o[j + 1] = p[j + 1] * (1 - opacity) + g; o[j + 2] = p[j + 2] * (1 - opacity) + g;
    } else if (cmap === 'spotlight') {
      const keep = 1 - opacity * (1 - l), grey = 235 * (1 - keep);
      o[j] = p[j] * keep + grey; o[j + 1] = p[j + 1] * keep + grey; o[j + 2] = p[j + 2] * keep + grey;
    } else {
      const c = lut[Math.floor(l * 255)];
      o[j] = p[j] * (1 - opacity) + c[0] * opacity; o[j + 1] = p[j + 1] * (1 - opacity) + c[1] * opacity;
      o[j + 2] = p[j + 2] * (1 - opacity) + c[2] * opacity;
    }
    o[j + 3] = 255;
  }
}

// render.colour_bar + paste_bar: a small legend in the bottom-left corner.
function colourBar(g, w, h, cmap, marker, left, right, label) {
  const bw = Math.floor(Math.min(Math.max(w * 0.28, 96), 280)), fs = Math.max(10, Math.floor(bw / 14));
  const rampH = Math.max(6, Math.floor(bw / 18)), pad = 4, bh = 2 * fs + rampH + 3 * pad;
  if (bh + 8 > h || bw + 8 > w) return;
  const x0 = 6, y0 = h - bh - 6;
  g.save();
  g.globalAlpha = 0.85;
  g.fillStyle = 'rgb(24,24,24)'; g.fillRect(x0, y0, bw, bh);
  const n = bw - 2 * pad;
  g.drawImage(ramp(cmap, n, rampH), x0 + pad, y0 + pad + fs + pad);
  g.font = `${fs}px sans-serif`; g.textBaseline = 'top';
  g.fillStyle = '#fff'; g.textAlign = 'left'; g.fillText(label, x0 + pad, y0 + pad);
  const y = y0 + pad + fs + pad + rampH + 1;
  g.fillStyle = 'rgb(200,200,200)'; g.fillText(left, x0 + pad, y);
  g.textAlign = 'right'; g.fillText(right, x0 + bw - pad, y);
  if (marker !== null) {
    const mx = x0 + pad + Math.min(Math.max(marker, 0), 1) * n, top = y0 + pad + fs + pad;
    g.fillStyle = 'rgb(245,158,11)'; g.beginPath();
    g.moveTo(mx - 4, top - 1); g.lineTo(mx + 4, top - 1); g.lineTo(mx, top + rampH * 0.6); g.fill();
  }
  g.restore();
}

function ramp(cmap, n, h) {   // the colour bar's ramp: n columns of the colour table, made once
  const key = `${cmap}|${n}|${h}`, made = (window.__viewerRamps = window.__viewerRamps || new Map());
  if (!made.has(key)) {
    const c = document.createElement('canvas'), lut = C.luts[cmap];
    c.width = n; c.height = h;
    const g = c.getContext('2d'), img = g.createImageData(n, h);
    for (let y = 0; y < h; y++) for (let i = 0; i < n; i++) {
      const v = lut[Math.floor(i * 255 / Math.max(n - 1, 1))], j = (y * n + i) * 4;
      img.data[j] = v[0]; img.data[j + 1] = v[1]; img.data[j + 2] = v[2]; img.data[j + 3] = 255;
    }
    g.putImageData(img, 0, 0);
    made.set(key, c);
  }
  return made.get(key);
}

// render.render_cells: a cell's outline drawn inside its box, as PIL's rectangle(width=...) does.
function cellOutline(g, box, colour, w, h) {
  const line = Math.max(2, Math.round(Math.min(w, h) / 150));
  g.strokeStyle = colour; g.lineWidth = line;
  const [x1, y1, x2, y2] = box;
  g.strokeRect(x1 + line / 2, y1 + line / 2, x2 - x1 + 1 - line, y2 - y1 + 1 - line);
}

// render.shown_regions: the fewest regions, most weighted first, holding 90% of the weight.
function shownRegions(weights, most) {
  const order = weights.map((_, i) => i).sort((a, b) => weights[b] - weights[a] || a - b);
  const total = weights.reduce((a, b) => a + b, 0);
  let cum = 0, n = 0;
  for (const i of order) { cum += weights[i]; n++; if (cum >= 0.9 * total - 1e-9) break; }
  return order.slice(0, Math.min(n, most, order.length));
}

// render.place_labels: above the box, inside its top, below, inside its bottom; never overlapping.
function placeLabels(anchors, sizes, w, h) {
  const placed = [];
  return anchors.map(([x1, y1, x2, y2], k) => {
    const [lw, lh] = sizes[k];
    if (lw > w || lh > h) return null;
    const spots = [];
    for (const y of [y1 - lh, y1, y2, y2 - lh]) for (const x of [x1, x2 - lw]) spots.push([x, y]);
    for (let y = 0; y <= h - lh; y += Math.max(1, Math.floor(lh / 2))) spots.push([x1, y]);
    for (let [x, y] of spots) {
      x = Math.min(Math.max(Math.round(x), 0), w - lw); y = Math.min(Math.max(Math.round(y), 0), h - lh);
      const c = [x, y, x + lw, y + lh];
      if (placed.every((r) => c[2] <= r[0] || r[2] <= c[0] || c[3] <= r[1] || r[3] <= c[1])) { placed.push(c); return c; }
    }
    return null;
  });
}

// render.render_regions: filled as strongly as their weight, objects labelled "class score · weight".
// The boxes go on a layer whose pixels each rectangle REPLACES (as PIL draws on an RGBA layer: cleared,
// then filled), most weighted last, and the layer is then laid over the photo (the canvas's own
// compositing: within a level of render.py's, for the canvas keeps the layer premultiplied).
function drawRegions(g, P, weights, w, h) {
  const small = Math.max(w, h) < 300, shown = shownRegions(weights, small ? 3 : 8);
  const unit = Math.max(1, Math.min(w, h) / 300), fs = Math.max(11, Math.round(6 * unit));
  const TOP = [255, 200, 0], OBJ = [0, 190, 255], CTX = [210, 210, 210];
  const layer = S.regionLayer || (S.regionLayer = document.createElement('canvas'));
  if (layer.width !== w || layer.height !== h) { layer.width = w; layer.height = h; }
  const lg = layer.getContext('2d');
  lg.clearRect(0, 0, w, h);
  const paint = (x1, y1, x2, y2, c, a) => {   // both corners inclusive, as PIL's rectangle
    const x = Math.max(0, x1), y = Math.max(0, y1), rw = Math.min(w - 1, x2) - x + 1, rh = Math.min(h - 1, y2) - y + 1;
    if (rw <= 0 || rh <= 0) return;
    lg.clearRect(x, y, rw, rh);
    lg.fillStyle = `rgba(${c[0]},${c[1]},${c[2]},${a / 255})`;
    lg.fillRect(x, y, rw, rh);
  };
  for (const i of [...shown].reverse()) {
    const top = i === shown[0], quiet = P.context[i] && !top, col = top ? TOP : P.context[i] ? CTX : OBJ;
    const fill = Math.floor(255 * C.fill_max * Math.sqrt(weights[i]) * (quiet ? 0.5 : 1));
    const line = quiet ? 1 : Math.max(1, Math.round(unit * (1 + 4 * Math.sqrt(weights[i]))));
    const [x1, y1, x2, y2] = P.boxes[i].map(Math.round);
    paint(x1, y1, x2, y2, col, fill);
    const edge = quiet ? 140 : 255;
    paint(x1, y1, x2, y1 + line - 1, col, edge); paint(x1, y2 - line + 1, x2, y2, col, edge);
    paint(x1, y1, x1 + line - 1, y2, col, edge); paint(x2 - line + 1, y1, x2, y2, col, edge);
  }
  g.drawImage(S.photoCanvas, 0, 0);
  g.drawImage(layer, 0, 0);
  const named = shown.filter((i) => i === shown[0] || (!small && !P.context[i]));
  g.font = `${fs}px sans-serif`; g.textBaseline = 'top';
  const texts = named.map((i) => P.context[i] ? `${P.labels[i]} · ${weights[i].toFixed(2)}`
    : `${P.labels[i]} ${P.scores[i].toFixed(2)} · ${weights[i].toFixed(2)}`);
  const sizes = texts.map((t) => [Math.ceil(g.measureText(t).width) + 6, fs + 4]);
  placeLabels(named.map((i) => P.boxes[i]), sizes, w, h).forEach((r, k) => {
    if (!r) return;
    g.fillStyle = 'rgba(0,0,0,0.78)'; g.fillRect(r[0], r[1], r[2] - r[0], r[3] - r[1]);
    g.strokeStyle = named[k] === shown[0] ? 'rgb(255,200,0)' : 'rgb(0,190,255)'; g.lineWidth = 1;
    g.strokeRect(r[0] + 0.5, r[1] + 0.5, r[2] - r[0] - 1, r[3] - r[1] - 1);
    g.fillStyle = '#fff'; g.textAlign = 'left'; g.fillText(texts[k], r[0] + 3, r[1] + 2);
  });
  const peak = Math.max(...weights);
  colourBar(g, w, h, 'regions', Math.sqrt(peak), '0', '1', `top region ${peak.toFixed(2)}`);
}


// render.render_coverage: attention summed over words 0..t, stretched, in inferno.
const COVER = {colormap: 'inferno', opacity: 0.65, scale: 'stretch'};
function coverage(P, t) {
  const out = new Float64Array(P.maps[0].length);
  for (let s = 0; s <= t; s++) P.maps[s].forEach((v, i) => { out[i] += v; });
  return out;
}

function coverFrame(P, t, upsampling) {
  const cov = coverage(P, t), w = P.width, h = P.height;
  const d = P.kind === 'regions' ? regionDensity(P.boxes, cov, w, h) : density(cov, P.side, w, h, upsampling, P.paper);
  const img = ctx.createImageData(w, h);
  shade(S.photo, brightness(d, COVER.scale), COVER.colormap, COVER.opacity, img);
  let dmax = 0; for (let i = 0; i < d.length; i++) if (d[i] > dmax) dmax = d[i];
  return [img, dmax];
}


// --- frames: each word's picture in the current style, made ahead so a step is one drawImage ------------
// Frame t is word t's view, frame 'c'+t its coverage (the Explore view only). Grid maps are made in a
// worker (the same functions, one frame at a time: the shown word's view and coverage, then the
// others nearest first); region views on the main thread between events. A grid view missing when
// asked for is previewed at once (preview), a region view drawn at once.
const styleKey = (st) => `${st.upsampling}|${st.colormap}|${st.opacity}|${st.scale}`;
const frameKey = (P, st) => (P.kind === 'regions' ? 'regions' : styleKey(st));
const KERNEL = `const C = ${JSON.stringify(C)};\n${[bilinear, density, brightness, shade].map(String).join('\n')}
let photo = null, W = 0, H = 0;
onmessage = (e) => {
  const m = e.data;
  if (m.photo) { photo = {data: new Uint8ClampedArray(m.photo)}; W = m.w; H = m.h; return; }
  const d = density(m.map, m.side, W, H, m.style.upsampling, m.paper), light = brightness(d, m.style.scale);
  const out = {data: new Uint8ClampedArray(W * H * 4)};
  shade(photo, light, m.style.colormap, Number(m.style.opacity), out);
  let dmax = 0; for (let i = 0; i < d.length; i++) if (d[i] > dmax) dmax = d[i];
  postMessage({key: m.key, t: m.t, style: m.styleKey, pixels: out.data.buffer, w: W, dmax}, [out.data.buffer]);
};`;
let worker = null;
try { worker = new Worker(URL.createObjectURL(new Blob([KERNEL], {type: 'text/javascript'}))); } catch (e) { worker = null; }
if (worker) worker.onerror = () => { S.busy = false; };
if (worker) worker.onmessage = (e) => {
  const r = e.data;
  S.busy = false;
  if (r.key === S.key && r.style === S.frameStyle) keep(r.t, new ImageData(new Uint8ClampedArray(r.pixels), r.w), r.dmax);
  ahead();
};

// A frame made (its pixels, or a canvas holding them): drawn if its word's preview is shown, its coverage
// drawn, its strip tile when idle. It is then turned into a bitmap (off the page's thread), so that
// showing it is one drawImage, not a conversion of every pixel (paintFrame).
function keep(id, image, dmax) {
  const frame = {image, bitmap: null, dmax};
  S.frames.set(id, frame);
  createImageBitmap(image).then((bitmap) => {   // (a new trace or style starts a new S.frames)
    if (S.frames.get(id) !== frame) { bitmap.close(); return; }
    frame.bitmap = bitmap; frame.image = null;
    live(1);
  }, () => {});
  if (id === S.previewing && id === S.step) draw();
  if (!main) return;
  if (typeof id === 'number') { S.tiles.add(id); if (!S.tileTask) S.tileTask = idle(drawTiles); }
  else if (id === 'c' + S.step) drawCoverage(S.step);
}

// Every bitmap is closed when its frames are replaced (a new trace or style), so the page's memory is
// the current frames' whatever the number of captions; canvas.dataset.bitmaps counts the live ones.
function live(n) { S.bitmaps = (S.bitmaps || 0) + n; canvas.dataset.bitmaps = String(S.bitmaps); }
function dropFrames(style) {
  for (const f of S.frames.values()) if (f.bitmap) { f.bitmap.close(); live(-1); }
  S.frames = new Map(); S.frameStyle = style;
}

function gridFrame(P, t, st) {
  const d = density(P.maps[t], P.side, P.width, P.height, st.upsampling, P.paper);
  const img = ctx.createImageData(P.width, P.height);
  shade(S.photo, brightness(d, st.scale), st.colormap, Number(st.opacity), img);
  let dmax = 0; for (let i = 0; i < d.length; i++) if (d[i] > dmax) dmax = d[i];
  return [img, dmax];
}

function regionFrame(P, t) {   // on a canvas of its own (kept until its bitmap is made)
  const off = document.createElement('canvas');
  off.width = P.width; off.height = P.height;
  drawRegions(off.getContext('2d'), P, P.maps[t], P.width, P.height);
  return [off, null];
}

function nextFrame(P) {   // the shown word's view and coverage, then the other words', nearest first
  const order = P.maps.map((_, i) => i).sort((a, b) => Math.abs(a - S.step) - Math.abs(b - S.step));
  const ids = main && coverCanvas() ? [order[0], 'c' + order[0], ...order.slice(1), ...order.slice(1).map((i) => 'c' + i)]
    : order;
  return ids.find((id) => !S.frames.has(id));
}

function ahead() {   // the next missing frame (none while a new trace's photo is decoded: S.key is already its)
  const P = S.payload, st = window.__viewerStyle;
  if (!P || P.key !== S.key || S.busy || S.frameStyle !== frameKey(P, st)) return;
  const id = nextFrame(P);
  if (id === undefined) {   // every frame made: the server may now do what the caption's page can wait for
    if (main && S.loaded !== S.key) { S.loaded = S.key; trigger('load'); }
    return;
  }
  const cover = typeof id === 'string', t = cover ? Number(id.slice(1)) : id;
  S.busy = true;
  if (P.kind === 'regions' || !worker) {
    setTimeout(() => {
      S.busy = false;
      if (S.payload === P && !S.frames.has(id) && S.frameStyle === frameKey(P, st))
        keep(id, ...(cover ? coverFrame(P, t, st.upsampling) : P.kind === 'regions' ? regionFrame(P, t) : gridFrame(P, t, st)));
      ahead();
    }, 0);
    return;
  }
  worker.postMessage({key: S.key, t: id, styleKey: S.frameStyle, map: cover ? coverage(P, t) : P.maps[t], side: P.side,
                      paper: P.paper, style: {upsampling: st.upsampling, ...(cover ? COVER
                        : {colormap: st.colormap, opacity: st.opacity, scale: st.scale})}});
}

const pct = (v) => `${(v * 100).toFixed(1)}%`;

function draw() {
  const P = S.payload, st = window.__viewerStyle;
  if (!P || !S.photo || P.key !== S.key) return;
  const t = Math.min(Math.max(S.step, 0), P.maps.length - 1), w = P.width, h = P.height;
  const sk = frameKey(P, st);
  if (S.frameStyle !== sk) dropFrames(sk);
  let exact = true;
  if (P.kind === 'regions') {   // drawn straight onto the canvas when its frame is not made yet (ahead makes it)
    if (S.frames.has(t)) paintFrame(ctx, S.frames.get(t), w, h);
    else drawRegions(ctx, P, P.maps[t], w, h);
  } else {
    const map = P.maps[t], hard = P.samples[t] !== null;
    if (st.show_alpha || !hard) {
      if (!S.frames.has(t) && !worker) keep(t, ...gridFrame(P, t, st));
      const f = S.frames.get(t), peak = Math.max(...map);
      if (f) paintFrame(ctx, f, w, h);
      exact = !!f;
      const dmax = f ? f.dmax : preview(P, t, st);
      if (st.scale === 'absolute') colourBar(ctx, w, h, st.colormap, Math.pow(Math.min(dmax / C.full_weight, 1), C.gamma),
        '0', `${Math.round(C.full_weight * 100)}%/cell`, `peak cell ${pct(peak)}`);
      else colourBar(ctx, w, h, st.colormap, 1, 'min', 'max', `peak cell ${pct(peak)} (stretched)`);
    } else ctx.drawImage(S.photoCanvas, 0, 0);
    if (hard) {
      const n = Number(st.hard_samples) || 1;
      if (n > 1 && P.draws[t]) for (const c of new Set(P.draws[t].slice(0, n))) cellOutline(ctx, P.cells[c], 'rgb(255,150,0)', w, h);
      cellOutline(ctx, P.cells[P.samples[t]], 'rgb(255,40,40)', w, h);
    }
  }
  // what is on the canvas, for tests and the benchmark: `shown` names the last exact frame (render.py's
  // pixels), `preview` a word's preview while its exact frame is being made
  const what = `${S.key}|${t}|${st.upsampling}|${st.colormap}|${st.opacity}|${st.scale}|${st.show_alpha}|${st.hard_samples}`;
  canvas.dataset.step = String(t);
  if (exact) { canvas.dataset.drawnAt = String(performance.now()); canvas.dataset.shown = what; delete canvas.dataset.preview; }
  else { canvas.dataset.previewAt = String(performance.now()); canvas.dataset.preview = what; }
  S.previewing = exact ? null : t;
  tint();
  if (main) followStep(t);
  ahead();
}

// A word whose frame the worker has not made yet (a click the moment the caption shows, a new style):
// the photo with the light laid over it as a 224 x 224 layer the browser scales up, so the word shows
// at once; the exact frame replaces it when the worker delivers it (keep). Each shading of `shade` is
// such a layer: the photo * (1 - alpha) + colour * alpha. Returns the peak density, for the colour bar.
function preview(P, t, st) {
  const n = st.upsampling === 'blocky' ? P.side : 224, op = Number(st.opacity), lut = C.luts[st.colormap];
  const d = density(P.maps[t], P.side, n, n, st.upsampling, P.paper), light = brightness(d, st.scale);
  const layer = S.layer || (S.layer = document.createElement('canvas'));
  layer.width = n; layer.height = n;
  const g = layer.getContext('2d'), img = g.createImageData(n, n), o = img.data;
  for (let i = 0, j = 0; i < light.length; i++, j += 4) {
    const l = light[i];
    if (st.colormap === 'paper') { o[j] = o[j + 1] = o[j + 2] = Math.floor(l * 255); o[j + 3] = 255 * op; }
    else if (st.colormap === 'spotlight') { o[j] = o[j + 1] = o[j + 2] = 235; o[j + 3] = 255 * op * (1 - l); }
    else { const c = lut[Math.floor(l * 255)]; o[j] = c[0]; o[j + 1] = c[1]; o[j + 2] = c[2]; o[j + 3] = 255 * op; }
  }
  g.putImageData(img, 0, 0);
  ctx.drawImage(S.photoCanvas, 0, 0);
  ctx.imageSmoothingEnabled = st.upsampling !== 'blocky';
  ctx.drawImage(layer, 0, 0, P.width, P.height);
  ctx.imageSmoothingEnabled = true;
  let dmax = 0; for (let i = 0; i < d.length; i++) if (d[i] > dmax) dmax = d[i];
  return dmax;
}

// --- the rest of the word's page (the Explore view): all from the trace in the page ----------------
const esc = (v) => String(v).replace(/[&<>"']/g, (ch) => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'})[ch]);
const coverCanvas = () => document.querySelector('#coverage canvas.av-coverage');

function followStep(t) {
  const P = S.payload, panel = document.querySelector('#panel .av-panel');
  markWord(t);
  if (panel && P.panels) panel.innerHTML = P.panels[t];   // the server's HTML of each step's facts and next words
  clearTimeout(S.follow);
  S.follow = setTimeout(() => {   // after the frame is on screen
    if (S.payload !== P || S.step !== t) return;
    const numbers = document.querySelector('#numbers .av-numbers');
    if (numbers) numbers.innerHTML = numbersTable(P, t);
    nextWords(P, t);
    if (S.frames.has('c' + t)) drawCoverage(t);
    drawHeads();
    document.querySelectorAll('#strip .av-tile').forEach((el) => el.classList.toggle('av-selected', Number(el.dataset.t) === t));
  }, 0);
}

function markWord(t) {   // the caption's token of step t
  document.querySelectorAll('#caption .token').forEach((el, i) => el.classList.toggle('av-selected', i === t));
}

// The raw numbers: the grid in percent, shaded by its peak, or the regions by weight.
function numbersTable(P, t) {
  const m = P.maps[t];
  if (P.kind === 'regions') {
    const order = m.map((_, i) => i).sort((a, b) => m[b] - m[a] || a - b);
    return `<table class="regions" data-step="${t}"><tr><th>region</th><th>score</th><th>weight</th></tr>` + order.map((i) =>
      `<tr><td>${esc(P.labels[i])}</td><td>${P.scores[i].toFixed(2)}</td><td>${m[i].toFixed(3)}</td></tr>`).join('') + '</table>';
  }
  const top = Math.max(...m) || 1;
  let rows = '';
  for (let r = 0; r < P.side; r++) {
    rows += '<tr>';
    for (let c = 0; c < P.side; c++) {
      const v = m[r * P.side + c];
      rows += `<td style="background:rgba(255,120,0,${(v / top).toFixed(2)})">${(v * 100).toFixed(1)}</td>`;
    }
    rows += '</tr>';
  }
  return `<table class="grid14" data-step="${t}">${rows}</table>`;
}

function nextWords(P, t) {   // the words to branch with here; choosing one fills #alternative (viewer.js)
  const box = document.querySelector('#alternatives .av-next-words'), chosen = document.querySelector('#alternative textarea');
  if (box) box.innerHTML = (P.alternatives?.[t] || []).map((w) =>
    `<button type="button" class="av-next" data-word="${esc(w)}">${esc(w)}</button>`).join('');
  if (chosen && chosen.value) { chosen.value = ''; chosen.dispatchEvent(new Event('input', {bubbles: true})); }
}

function drawCoverage(t) {
  const P = S.payload, c = coverCanvas(), f = S.frames.get('c' + t);
  if (!P || !c || !f) return;
  if (c.width !== P.width || c.height !== P.height) { c.width = P.width; c.height = P.height; }
  const g = c.getContext('2d'), grid = P.kind !== 'regions';
  paintFrame(g, f, P.width, P.height);
  const peak = grid ? Math.max(...coverage(P, t)) : f.dmax, said = `peak ${grid ? 'cell' : 'pixel'} ${peak.toFixed(2)}`;
  colourBar(g, P.width, P.height, COVER.colormap, 1.0, '0', peak.toFixed(2), `summed attention, ${said}`);
  c.dataset.shown = `${S.key}|${t}|${S.frameStyle}`;
  const note = c.parentElement.querySelector('.av-caption');   // (the bar's text is small in this panel: said here too)
  if (note) note.textContent = `Coverage: attention summed up to this word, ${said}`;
}

// The heads grid (layers as rows, heads as columns, as render.py's render_heads): each head's map of
// the selected word over a small copy of the photo, in the current style, and under each the head's
// weight where the pointer rests on the photo. The server sends the heads once (Handlers.show_heads):
// every word's, or only the word asked for when they are many.
S.drawHeads = (heads) => {
  S.heads = heads && {...heads, steps: unpackedAll(heads.steps)}; S.headsDrawn = null; drawHeads();
};
const HEAD_TILE = 130;

// cv2.resize(INTER_AREA) to a smaller size: each pixel the mean of the source area it covers
function areaWeights(n, m) {   // for each of m outputs: [source index, weight] over n inputs
  const s = n / m;
  return Array.from({length: m}, (_, i) => {
    const out = [], lo = i * s, hi = (i + 1) * s;
    for (let k = Math.floor(lo); k < Math.min(n, Math.ceil(hi)); k++) {
      const wgt = Math.min(hi, k + 1) - Math.max(lo, k);
      if (wgt > 1e-9) out.push([k, wgt / s]);
    }
    return out;
  });
}
function areaResized(src, sw, sh, w, h) {
  const xs = areaWeights(sw, w), ys = areaWeights(sh, h), out = new ImageData(w, h), o = out.data, p = src.data;
  const acc = new Float64Array(3);
  for (let y = 0; y < h; y++)
    for (let x = 0; x < w; x++) {
      acc.fill(0);
      for (const [sy, wy] of ys[y]) for (const [sx, wx] of xs[x]) {
        const j = (sy * sw + sx) * 4, k = wy * wx;
        acc[0] += p[j] * k; acc[1] += p[j + 1] * k; acc[2] += p[j + 2] * k;
      }
      const j = (y * w + x) * 4;
      o[j] = Math.round(acc[0]); o[j + 1] = Math.round(acc[1]); o[j + 2] = Math.round(acc[2]); o[j + 3] = 255;
    }
  return out;
}

function smallPhoto(w, h) {   // the photo at a tile's size, as render_heads makes it (INTER_AREA)
  if (S.small?.key === S.key && S.small.w === w) return S.small.img;
  S.small = {key: S.key, w, img: areaResized(S.photo, S.payload.width, S.payload.height, w, h)};
  return S.small.img;
}

function drawHeads() {
  const box = document.querySelector('#heads .av-heads'), P = S.payload, H = S.heads, st = window.__viewerStyle;
  if (!box || !P || !H || P.kind !== 'grid') return;
  const drawn = `${S.key}|${S.step}|${styleKey(st)}`;
  if (S.headsDrawn === drawn) return;
  S.headsDrawn = drawn;
  const maps = H.steps[String(S.step)];
  if (H.key !== S.key || !maps) {
    box.innerHTML = `<div class="av-caption">${H.key !== S.key ? 'These heads belong to another view'
      : `Heads of word ${Number(Object.keys(H.steps)[0]) + 1} only`}: press the button again for this word.</div>`;
    return;
  }
  const w = HEAD_TILE, h = Math.max(1, Math.round(w * P.height / P.width)), photo = smallPhoto(w, h);
  let html = '<table class="av-heads-grid"><tr><th></th>';
  for (let j = 0; j < H.heads; j++) html += `<th>head ${j + 1}</th>`;
  html += '</tr>';
  for (let i = 0; i < H.layers; i++) {
    html += `<tr><th>layer ${i + 1}</th>`;
    for (let j = 0; j < H.heads; j++)
      html += `<td class="av-head" data-layer="${i}" data-head="${j}"><canvas width="${w}" height="${h}"></canvas>`
        + `<div class="av-tile-note">peak ${pct(Math.max(...maps[i][j]))}</div><div class="av-tile-note av-here"></div></td>`;
    html += '</tr>';
  }
  box.innerHTML = html + `</table><div class="av-caption">word ${S.step + 1}: ${esc(P.tokens[S.step])}</div>`;
  box.querySelectorAll('td.av-head').forEach((td) => {
    const m = maps[Number(td.dataset.layer)][Number(td.dataset.head)], c = td.querySelector('canvas');
    const img = c.getContext('2d').createImageData(w, h);
    shade(photo, brightness(density(m, P.side, w, h, st.upsampling, P.paper), st.scale), st.colormap, Number(st.opacity), img);
    c.getContext('2d').putImageData(img, 0, 0);
  });
  tintHeads();
}

function tintHeads() {   // each head's weight at the cell under the pointer
  const H = S.heads, P = S.payload, maps = H && P && H.key === S.key ? H.steps[String(S.step)] : null;
  if (!maps) return;
  const cell = S.hover && P.kind === 'grid' ? cellAt(P, S.hover[0], S.hover[1]) : -1;
  document.querySelectorAll('#heads td.av-head').forEach((td) => {
    const here = td.querySelector('.av-here');
    if (cell < 0) { here.textContent = ''; delete td.dataset.looked; return; }
    const v = maps[Number(td.dataset.layer)][Number(td.dataset.head)][cell];
    td.dataset.looked = String(v);
    here.textContent = `here ${pct(v)}`;
  });
}

// The word strip (the paper's figure): a tile per word, filled as its frame is made.
const TILE = 160;
function buildStrip(P) {
  const box = document.querySelector('#strip .av-strip');
  if (!box) return;
  const th = Math.max(1, Math.round(TILE * P.height / P.width));
  box.innerHTML = P.maps.map((m, t) => {
    const peak = Math.max(...m), note = P.kind === 'regions' ? `top region ${peak.toFixed(2)}` : `peak cell ${pct(peak)}`;
    return `<figure class="av-tile" data-t="${t}"><figcaption>${esc(P.tokens[t])}</figcaption>`
      + `<canvas width="${TILE}" height="${th}"></canvas><div class="av-tile-note">${note}</div></figure>`;
  }).join('');
}

function drawTiles(deadline) {
  S.tileTask = null;
  for (const t of S.tiles) {
    if (deadline?.timeRemaining && deadline.timeRemaining() < 5 && !deadline.didTimeout) break;
    S.tiles.delete(t);
    tile(t);
  }
  if (S.tiles.size) S.tileTask = idle(drawTiles);
}

function warmUp(P) {   // a small frame in every upsampling on the page's own thread, so that its first
  // drawing of a word the worker has not made yet (a click the moment the caption shows) runs compiled code
  if (S.warm || P.kind !== 'grid') return;
  S.warm = true;
  const w = 192, h = 128, img = {data: new Uint8ClampedArray(w * h * 4)};
  for (const up of ['smooth', 'bilinear', 'blocky'])
    for (const sc of ['absolute', 'stretch']) shade(img, brightness(density(P.maps[0], P.side, w, h, up, P.paper), sc), 'paper', 0.8, img);
}

function paintFrame(g, f, w, h) {   // a frame drawn at w x h (its view's size, or a strip tile's)
  if (f.bitmap) { g.drawImage(f.bitmap, 0, 0, w, h); return; }
  let src = f.image;
  if (src instanceof ImageData) {
    if (src.width === w && src.height === h) { g.putImageData(src, 0, 0); return; }
    src = S.staging || (S.staging = document.createElement('canvas'));
    if (src.width !== f.image.width || src.height !== f.image.height) { src.width = f.image.width; src.height = f.image.height; }
    src.getContext('2d').putImageData(f.image, 0, 0);
  }
  g.drawImage(src, 0, 0, w, h);
}

function tile(t) {
  const P = S.payload, f = S.frames.get(t), c = document.querySelector(`#strip .av-tile[data-t="${t}"] canvas`);
  if (P && f && c) paintFrame(c.getContext('2d'), f, c.width, c.height);
}

// --- the inverse view: which words looked at the place under the pointer -------------------------
const cellAt = (P, x, y) => P.cells.findIndex((b) => b[0] <= x && x < b[2] && b[1] <= y && y < b[3]);   // grid maps

function lookedAt(P, x, y) {
  if (P.kind === 'regions') {
    const inside = P.boxes.map((b) => b[0] <= x && x <= b[2] && b[1] <= y && y <= b[3]);
    return P.maps.map((m) => m.reduce((s, v, i) => s + (inside[i] ? v : 0), 0));
  }
  const cell = cellAt(P, x, y);
  return cell < 0 ? null : P.maps.map((m) => m[cell]);
}

function tint() {
  if (!main) return;
  tintHeads();
  const P = S.payload, tokens = document.querySelectorAll('#caption .token');
  const values = S.hover && P ? lookedAt(P, S.hover[0], S.hover[1]) : null;
  const top = values ? Math.max(...P.first.map((f) => values[f]), 1e-12) : 1;
  tokens.forEach((el, i) => {
    if (!values || !P || i >= P.first.length) { el.style.boxShadow = ''; delete el.dataset.looked; return; }
    const v = values[P.first[i]];   // a word's tokens share its first token's attention
    el.dataset.looked = String(v);
    el.style.boxShadow = `inset 0 -0.6em 0 rgba(245,158,11,${(0.85 * v / top).toFixed(3)})`;
  });
}

// The photo's box on the screen: the canvas is laid out to fill the stage, its picture contained.
function picture() {
  const r = canvas.getBoundingClientRect(), s = Math.min(r.width / canvas.width, r.height / canvas.height);
  const w = canvas.width * s, h = canvas.height * s;
  return {left: r.left + (r.width - w) / 2, top: r.top + (r.height - h) / 2, width: w, height: h};
}
S.picture = picture;
function pointer(e) {
  const b = picture();
  return [(e.clientX - b.left) * canvas.width / b.width, (e.clientY - b.top) * canvas.height / b.height];
}
const onPhoto = ([x, y]) => x >= 0 && y >= 0 && x < canvas.width && y < canvas.height;
canvas.addEventListener('pointermove', (e) => { const at = pointer(e); S.hover = onPhoto(at) ? at : null; tint(); });
canvas.addEventListener('pointerdown', (e) => { if (e.pointerType === 'touch') { S.hover = pointer(e); tint(); } });
canvas.addEventListener('pointerleave', (e) => { if (e.pointerType !== 'touch') { S.hover = null; tint(); } });
canvas.addEventListener('click', (e) => {
  const at = pointer(e);
  if (S.payload && onPhoto(at)) trigger('select', {index: at.map(Math.floor), value: null});
});

// --- the photos: each fetched once by the name a payload gives it (Studio.view_photo, no turn in the
// queue), as soon as it is chosen (the server names it then: PHOTO_JS), and decoded to pixels before
// its caption arrives; shared by every view of the page
const photos = window.__viewerPhotos || (window.__viewerPhotos = {held: new Map(), ready: null});
function photoFor(key) {
  let got = photos.held.get(key);
  if (!got) {
    got = server.view_photo(key).then(async (uri) => {
      if (!uri) throw new Error('the server no longer holds this photo');
      const im = new Image();
      im.src = uri;
      await im.decode();
      const c = document.createElement('canvas');
      c.width = im.naturalWidth; c.height = im.naturalHeight;
      const g = c.getContext('2d');
      g.drawImage(im, 0, 0);
      photos.ready = key;   // (the benchmark waits for it, as a person's pause before Caption would)
      return {pixels: g.getImageData(0, 0, c.width, c.height), canvas: c};   // (read only: views share them)
    });
    got.catch(() => photos.held.delete(key));
    photos.held.set(key, got);
    while (photos.held.size > 4) photos.held.delete(photos.held.keys().next().value);
  }
  return got;
}
if (main) window.__viewerPrefetch = (key) => { if (key) photoFor(key).catch(() => {}); };

// --- a new trace from the server; a step or a style from the page ---------------------------------
function load() {
  const V = props.value;
  if (!V || !V.maps) { root.classList.remove('ready'); S.payload = null; title.textContent = ''; return; }
  title.textContent = V.title || '';
  if (V.key === S.key) { if (main) trigger('load'); return; }
  const P = unpackedAll(V);
  S.key = P.key; S.step = P.step || 0;   // a frame job in flight (S.busy) ends first: one job at a time
  dropFrames(null);
  canvas.dataset.receivedAt = String(performance.now());   // the trace arrived (the benchmark splits the wait)
  photoFor(P.photo).then((photo) => {
    if (S.key !== P.key) return;
    canvas.dataset.decodedAt = String(performance.now());
    canvas.width = P.width; canvas.height = P.height;
    S.photo = photo.pixels; S.photoCanvas = photo.canvas;   // the pixels to shade, the canvas to draw
    if (worker && P.kind === 'grid' && S.workerPhoto !== P.photo) {
      S.workerPhoto = P.photo;
      worker.postMessage({photo: S.photo.data.buffer.slice(0), w: P.width, h: P.height});
    }
    S.payload = P;
    root.classList.add('ready');
    if (main) { buildStrip(P); watchCaption(); S.tiles.clear(); }
    draw();
    idle(() => warmUp(P));
    canvas.dataset.key = P.key;
  }, (err) => { if (S.key === P.key) title.textContent = `${err.message}: choose it again and caption it.`; });
}
function watchCaption() {   // the caption re-rendered (the seen words): its selected word and tint again
  const cap = document.querySelector('#caption');
  if (S.captionWatch || !cap) return;
  S.captionWatch = new MutationObserver(() => { if (S.payload) { markWord(S.step); tint(); } });
  S.captionWatch.observe(cap, {childList: true, subtree: true});
}
S.show = (t) => {   // word t; nothing to do when it is on the canvas already (the slider's echo)
  if (!S.payload || (t === S.step && canvas.dataset.shown?.startsWith(`${S.key}|${t}|`))) return;
  S.step = t; draw();
};
S.showWord = (i) => { const f = S.payload?.word_firsts; if (f) S.show(f[Math.min(Math.max(i, 0), f.length - 1)]); };
S.redraw = () => draw();
watch('value', load);
load();
