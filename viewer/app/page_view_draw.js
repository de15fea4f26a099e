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
