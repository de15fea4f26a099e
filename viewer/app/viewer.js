// The page's own behaviour: keys, lecture mode and instant stepping. Loaded into the page's head
// (viewer/app/__init__.py: page_head); the server side of each part is named beside it.
// Keys: arrows move the word (the Previous/Next buttons), unless typing in a field.
const typing = (el) => !!el && (el.isContentEditable || el.tagName === 'TEXTAREA' || el.tagName === 'SELECT'
  || (el.tagName === 'INPUT' && !['range', 'checkbox', 'radio', 'button', 'submit'].includes(el.type)));
document.addEventListener('keydown', (e) => {
  if (typing(document.activeElement) || e.ctrlKey || e.metaKey || e.altKey) return;
  const move = (d, button) => { if (!window.__viewerMove?.(d)) document.querySelector(button)?.click(); };
  if (e.key === 'ArrowRight') { move(1, '#next'); e.preventDefault(); }
  if (e.key === 'ArrowLeft') { move(-1, '#prev'); e.preventDefault(); }
});
// Lecture mode: a class on <body> (the toggle #lecture, or --lecture at load), and its keys:
// space play/pause, a number key a model (the #model-N buttons that exist), F full screen, Escape out of full screen, then out of lecture mode.
(() => {
  const box = () => document.querySelector('#lecture input[type=checkbox]');
  let wasDark = null;
  const set = (on) => {
    const b = document.body;
    if (on === b.classList.contains('lecture')) return;
    if (on) { wasDark = b.classList.contains('dark'); b.classList.add('lecture', 'dark'); }
    else { b.classList.remove('lecture'); if (!wasDark) b.classList.remove('dark'); }
  };
  document.addEventListener('change', (e) => {
    if (e.target.closest?.('#lecture')) set(e.target.checked);
  }, true);
  const start = new MutationObserver(() => { const b = box(); if (b) { start.disconnect(); set(b.checked); } });
  start.observe(document.documentElement, {subtree: true, childList: true});
  const leave = () => { const b = box(); if (b && b.checked) b.click(); else set(false); };
  document.addEventListener('keydown', (e) => {
    const el = document.activeElement;
    if (!document.body.classList.contains('lecture') || typing(el) || e.ctrlKey || e.metaKey || e.altKey) return;
    const k = e.key;
    if (k === ' ' || k === 'Spacebar') { el?.blur?.(); document.querySelector('#play')?.click(); }
    else if (/^[1-9]$/.test(k)) document.querySelector('#model-' + k)?.click();
    else if (k === 'f' || k === 'F') {
      if (document.fullscreenElement) document.exitFullscreen?.();
      else document.documentElement.requestFullscreen?.().catch(() => {});
    } else if (k === 'Escape') {
      if (document.fullscreenElement) document.exitFullscreen?.(); else leave();
    } else return;
    e.preventDefault();
  });
})();
// Instant stepping: after a caption the server names every word's view (#view-urls); the page
// preloads them and, on a word click, Previous/Next or the slider, shows the new word's view at
// once, while the server's reply (panel, coverage, the same view) follows.
(() => {
  // The names come with the caption, while the server is still drawing the views in word order:
  // fetch them one after another in that order (a view not drawn yet is asked again shortly).
  const V = {key: null, urls: [], first: [], ready: new Set(), images: []};
  const fileUrl = (p) => (window.gradio_config?.root || location.origin) + '/gradio_api/file=' + p;
  const load = (key, i, tries) => {
    const u = V.urls[i];
    if (key !== V.key || !u) return;
    if (V.ready.has(u)) { load(key, i + 1, 0); return; }
    const im = new Image();
    V.images.push(im);   // kept, decoded: showing it is then a paint, not a JPEG decode
    im.onload = () => im.decode().catch(() => {}).finally(() => { V.ready.add(u); load(key, i + 1, 0); });
    im.onerror = () => { if (tries < 20) setTimeout(() => load(key, i, tries + 1), 100); else load(key, i + 1, 0); };
    im.src = u;
  };
  const refresh = () => {
    const el = document.querySelector('#view-urls [data-urls]');
    const key = el ? el.dataset.urls : null;
    if (key === V.key) return;
    V.key = key; V.ready = new Set(); V.images = [];
    V.urls = key ? JSON.parse(key).map(fileUrl) : [];
    V.first = el && el.dataset.first ? JSON.parse(el.dataset.first) : [];
    // the view the reply brought goes first: preloading starts once one of these views is on screen
    // (the caption's first word, or the word shown when Explain with brought new views), or after 1 s
    const begin = Date.now();
    const start = () => {
      const im = document.querySelector('#view img');
      if (key !== V.key) return;
      if (Date.now() - begin < 1000 && !(im && V.urls.includes(im.src) && im.complete)) { setTimeout(start, 30); return; }
      load(key, 0, 0);
    };
    start();
  };
  const show = (t) => {
    refresh();
    const u = V.urls[t], img = document.querySelector('#view img');
    if (u && img && V.ready.has(u) && img.src !== u) img.src = u;
  };
  // The word slider is the one record of the selected word: the page moves it at once (a word
  // click sets it quietly: the click's own event tells the server), so a quick next key counts
  // from the word shown, and the server, told by the slider's input event, agrees.
  const slider = () => document.querySelector('#step input[type=range]');
  const current = () => Number(slider()?.value || 1) - 1;
  window.__viewerMove = (d) => {
    const t = current() + d, s = slider();
    refresh();
    if (!s || !V.ready.has(V.urls[t])) return false;
    show(t);
    s.value = String(t + 1);
    s.dispatchEvent(new Event('input', {bubbles: true}));
    return true;
  };
  new MutationObserver(refresh).observe(document.documentElement, {subtree: true, childList: true});
  document.addEventListener('click', (e) => {
    const token = e.target.closest?.('#caption .token');
    if (token) {
      const i = [...document.querySelectorAll('#caption .token')].indexOf(token);
      const t = V.first[i] ?? i;   // a click on a word selects its first token
      show(t);
      if (slider() && V.ready.has(V.urls[t])) slider().value = String(t + 1);
    }
    else if (e.target.closest?.('#next')) show(current() + 1);
    else if (e.target.closest?.('#prev')) show(current() - 1);
  }, true);
  document.addEventListener('input', (e) => {
    if (e.target.closest?.('#step')) show(Number(e.target.value) - 1);
  }, true);
})();
