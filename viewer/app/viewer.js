// The page's own behaviour: keys, lecture mode and instant stepping. Loaded into the page's head
// (viewer/app/__init__.py: page_head); the server side of each part is named beside it.
// Keys: arrows move the word (the Previous/Next buttons; Compare's word in Compare), unless typing in a field.
const typing = (el) => !!el && (el.isContentEditable || el.tagName === 'TEXTAREA' || el.tagName === 'SELECT'
  || (el.tagName === 'INPUT' && !['range', 'checkbox', 'radio', 'button', 'submit'].includes(el.type)));
document.addEventListener('keydown', (e) => {
  if (typing(document.activeElement) || e.ctrlKey || e.metaKey || e.altKey) return;
  const compare = document.querySelector('#cmp-step input[type=range]');
  const move = (d, button) => {
    if (compare && compare.offsetParent !== null) {   // Compare is the tab shown: the arrows move its word
      const v = Math.min(Math.max(Number(compare.value) + d, Number(compare.min)), Number(compare.max));
      if (String(v) !== compare.value) { compare.value = String(v); compare.dispatchEvent(new Event('input', {bubbles: true})); }
      return;
    }
    if (!window.__viewerMove?.(d)) document.querySelector(button)?.click();
  };
  if (e.key === 'ArrowRight') { move(1, '#next'); e.preventDefault(); }
  if (e.key === 'ArrowLeft') { move(-1, '#prev'); e.preventDefault(); }
});
// Lecture mode: a class on <body> (the toggle #lecture, or --lecture at load), and its keys:
// space play/pause, a number key a model (the #model-N buttons that exist), P the photo picker (the photo, the
// examples and Caption over the view; Caption closes it), F full screen, Escape out of full screen, then out of lecture mode.
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
  document.addEventListener('click', (e) => {
    if (e.target.closest?.('#run')) document.body.classList.remove('picking');
  }, true);
  document.addEventListener('keydown', (e) => {
    const el = document.activeElement;
    if (!document.body.classList.contains('lecture') || typing(el) || e.ctrlKey || e.metaKey || e.altKey) return;
    const k = e.key;
    if (k === ' ' || k === 'Spacebar') { el?.blur?.(); document.querySelector('#play')?.click(); }
    else if (/^[1-9]$/.test(k)) document.querySelector('#model-' + k)?.click();
    else if (k === 'p' || k === 'P') document.body.classList.toggle('picking');   // the photo picker
    else if (k === 'f' || k === 'F') {
      if (document.fullscreenElement) document.exitFullscreen?.();
      else document.documentElement.requestFullscreen?.().catch(() => {});
    } else if (k === 'Escape') {
      if (document.body.classList.contains('picking')) document.body.classList.remove('picking');
      else if (document.fullscreenElement) document.exitFullscreen?.(); else leave();
    } else return;
    e.preventDefault();
  });
})();
// Instant stepping: the view (page_view.js) holds every word's map and panel and draws them in the
// page. A word click, Previous/Next, an arrow key, the slider, a tile of the word strip and Play show
// the word at once, with no request: the word slider stays the one record of the word, read by the
// events that compute something for it (Diagnose, branching, steering, exports).
(() => {
  const slider = () => document.querySelector('#step input[type=range]');
  const current = () => Number(slider()?.value || 1) - 1;
  const view = () => (window.__viewerMain?.payload ? window.__viewerMain : null);
  const steps = () => view()?.payload.maps.length || 0;
  const go = (t) => {   // show step t and record it in the slider (Gradio reads its value from 'input')
    const s = slider();
    if (!view() || !s || t < 0 || t >= steps()) return false;
    if (s.value !== String(t + 1)) { s.value = String(t + 1); s.dispatchEvent(new Event('input', {bubbles: true})); }
    view().show(t);   // (drawn already by the slider's input listener below, when it moved)
    return true;
  };
  window.__viewerMove = (d) => go(current() + d);
  // Play: one word every "seconds per word", from the first word when the last is shown; again: pause
  let playing = null;
  const label = (on) => { const b = document.querySelector('#play'); if (b) b.textContent = on ? '⏸ Pause' : '▶ Play'; };
  const pause = () => { clearTimeout(playing); playing = null; label(false); };
  const every = () => 1000 * Number(document.querySelector('#speed input[type=range]')?.value || 0.9);
  const tick = () => { if (current() + 1 >= steps() || !go(current() + 1)) pause(); else playing = setTimeout(tick, every()); };
  const choose = (button) => {   // a next word to branch with: marked, and put in the hidden #alternative
    const box = document.querySelector('#alternative textarea');
    document.querySelectorAll('#alternatives .av-next').forEach((b) => b.classList.toggle('chosen', b === button));
    if (box) { box.value = button.dataset.word; box.dispatchEvent(new Event('input', {bubbles: true})); }
  };
  document.addEventListener('click', (e) => {
    const at = (sel) => e.target.closest?.(sel);
    if (at('#play')) {
      if (playing !== null) pause();
      else if (view()) { if (current() + 1 >= steps()) go(0); label(true); playing = setTimeout(tick, every()); }
      return;
    }
    if (!view()) return;
    const token = at('#caption .token'), tile = at('#strip .av-tile'), next = at('#alternatives .av-next');
    if (token) {   // a click on a word selects its first token
      const i = [...document.querySelectorAll('#caption .token')].indexOf(token);
      go(view().payload.first[i] ?? i);
    } else if (tile) go(Number(tile.dataset.t));
    else if (next) choose(next);
    else if (at('#next')) go(current() + 1);
    else if (at('#prev')) go(current() - 1);
  }, true);
  document.addEventListener('input', (e) => {
    if (e.target.closest?.('#step')) view()?.show(Number(e.target.value) - 1);
  }, true);
})();
