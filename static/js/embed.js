// embed.js — the page inside a blog's iframe: it tells the host page its
// height, that it is ready, its verdicts and its errors, and takes setup
// and run messages from an allowed origin only. No message to the host
// carries the control token.
//
// To the host: {source:"fencelab", type:"ready"|"height"|"verdict"|"matrix"|"error", ...}.
// From the host, only from an allowed origin: {type:"setup", ordering, mode,
// broken, lease_ms, pace_ms, same_identity, skew_ms} and {type:"run", ...the same}.

const framed = window.parent !== window;
const hostOrigin = location.ancestorOrigins && location.ancestorOrigins.length ? location.ancestorOrigins[0] : "*";

/** Tell the host page something, if there is one. */
export function post(type, detail) {
  if (!framed) return;
  window.parent.postMessage({ source: "fencelab", type, ...detail }, hostOrigin);
}

/** Whether a message's origin may drive the page: ours, or one the server allows. */
export function originAllowed(origin, allowed) {
  if (origin === location.origin) return true;
  return (allowed || []).some((o) => {
    if (!o.includes("*")) return o === origin;
    // https://*.example.com allows any subdomain of example.com.
    const [head, tail] = o.split("*");
    return origin.startsWith(head) && origin.endsWith(tail) && /^[a-z0-9.-]+$/.test(origin.slice(head.length, origin.length - tail.length));
  });
}

/**
 * Listen to the host page: onSetup(m) for a setup message, onRun(m) for a
 * run message; messages from origins not allowed are counted, not obeyed.
 */
export function listen(allowed, { onSetup, onRun, onIgnored }) {
  window.addEventListener("message", (ev) => {
    const m = ev.data;
    if (!m || typeof m !== "object" || m.source === "fencelab") return;
    if (!originAllowed(ev.origin, allowed)) { onIgnored(); return; }
    if (m.type === "setup") onSetup(m);
    else if (m.type === "run") onRun(m);
  });
  if (!framed) return;
  // The body's own height, not the document's: the document is never less
  // tall than the frame, so measured there the frame could grow but never
  // shrink.
  //
  // Each message makes the host article move under its reader, so they are
  // few: at most one an animation frame, and only for a change of 8 px or
  // more. The frame is asked for 8 px of slack, so a line that wraps anew
  // is absorbed, not posted. It grows at once when the content would be cut
  // off; it shrinks only once the content has stood 16 px or more shorter
  // for SETTLE ms, so a lane that loses a line and gains it back in a run
  // does not move the article twice.
  const SLACK = 8, SETTLE = 900;
  let asked = 0, queued = false, shrinkAt = 0;
  released = () => { if (!queued) { queued = true; requestAnimationFrame(measure); } };
  const ask = (h) => { asked = h + SLACK; shrinkAt = 0; post("height", { height: asked }); };
  const measure = () => {
    queued = false;
    const h = Math.ceil(document.body.getBoundingClientRect().height);
    if (asked === 0 || h > asked) { ask(h); return; }
    if (asked - h < 2 * SLACK || holding) { shrinkAt = 0; return; }
    const now = performance.now();
    if (!shrinkAt) {
      shrinkAt = now + SETTLE;
      setTimeout(() => { if (!queued) { queued = true; requestAnimationFrame(measure); } }, SETTLE + 20);
    } else if (now >= shrinkAt) ask(h);
  };
  new ResizeObserver(() => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(measure);
  }).observe(document.body);
}

// While a run plays the frame grows but never shrinks: the article under
// its reader moves one way only. hold(false) lets it settle again.
let holding = false;
let released = () => {};

/** Hold the frame's height from shrinking (a run plays), or let it go. */
export function hold(on) {
  if (on === holding) return;
  holding = on;
  if (!on) released();
}

/** The snippet a blog pastes to embed the page with this setup. */
export function embedCode(query) {
  const src = `${location.origin}/?embed=1&${query}`;
  return `<iframe src="${src}" title="fencelab: a zombie worker and its fencing token, live" width="100%" height="560" style="border:0;max-width:720px" loading="lazy"></iframe>\n<script>addEventListener("message", (e) => { if (e.origin === "${location.origin}" && e.data && e.data.source === "fencelab" && e.data.type === "height") for (const f of document.querySelectorAll('iframe[src^="${location.origin}/"]')) if (f.contentWindow === e.source) f.style.height = e.data.height + "px"; });<\/script>`;
}
