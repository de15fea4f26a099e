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
// Instant stepping: the view (page_view.js) holds every word's map and draws it in the page. A word
// click, Previous/Next, an arrow key or the slider redraws it at once; the word slider stays the one
// record of the word and tells the server (the step panel, coverage and numbers follow).
(() => {
  const slider = () => document.querySelector('#step input[type=range]');
  const current = () => Number(slider()?.value || 1) - 1;
  const view = () => (window.__viewerMain?.payload ? window.__viewerMain : null);
  const steps = () => view()?.payload.maps.length || 0;
  window.__viewerMove = (d) => {
    const t = current() + d, s = slider();
    if (!view() || !s || t < 0 || t >= steps()) return false;
    view().show(t);
    s.value = String(t + 1);
    s.dispatchEvent(new Event('input', {bubbles: true}));
    return true;
  };
  document.addEventListener('click', (e) => {
    const v = view();
    if (!v) return;
    const token = e.target.closest?.('#caption .token');
    if (token) {   // the click's own event tells the server; a click on a word selects its first token
      const i = [...document.querySelectorAll('#caption .token')].indexOf(token);
      const t = v.payload.first[i] ?? i;
      v.show(t);
      if (slider()) slider().value = String(t + 1);
    }
    else if (e.target.closest?.('#next') && current() + 1 < steps()) v.show(current() + 1);
    else if (e.target.closest?.('#prev') && current() > 0) v.show(current() - 1);
  }, true);
  document.addEventListener('input', (e) => {
    if (e.target.closest?.('#step')) view()?.show(Number(e.target.value) - 1);
  }, true);
})();
