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
function load(V = props.value) {
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
S.load = load;   // a trace as the server sends it (the memory test replays one many times)
watch('value', () => load());
load();
