// The page's view (page_view.py): the body of gr.HTML's js_on_load (element, trigger, props, server, watch),
// this file then page_view_draw.js, page_view_frames.js and page_view_panels.js, as page_view.SCRIPT joins them,
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
const note = element.querySelector('.av-note');   // an object word the detector does not find: why, in a line
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
