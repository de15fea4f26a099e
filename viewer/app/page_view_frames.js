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

// The view names the word it shows ("dog: where the model looked"), so the caption may scroll away,
// and says in a line under it why an object word the detector does not find was said.
const wordOf = (P, t) => (P.word_firsts ? P.word_firsts.filter((f) => f <= t).length - 1 : -1);
function viewTitle(P, t) {
  const title = P.title || '', i = wordOf(P, t), word = P.words && i >= 0 ? P.words[i] : '';
  return word ? `${word}: ${title.charAt(0).toLowerCase()}${title.slice(1)}` : title;
}
function unseenNote(P, t) {
  const why = (P.unseen || {})[String(wordOf(P, t))] || '';
  note.textContent = why;
  if (main) document.querySelectorAll('#caption .token').forEach((el, s) => {   // the why on hover too
    const w = (P.unseen || {})[String(wordOf(P, s))];
    if (w) el.title = w; else el.removeAttribute('title');
  });
}

function draw() {
  const P = S.payload, st = window.__viewerStyle;
  if (!P || !S.photo || P.key !== S.key) return;
  const t = Math.min(Math.max(S.step, 0), P.maps.length - 1), w = P.width, h = P.height;
  title.textContent = viewTitle(P, t);
  unseenNote(P, t);
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
