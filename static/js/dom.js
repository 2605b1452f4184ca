// dom.js — the two things every page's script needs from the document:
// an element by its data-testid, and text made safe to put in HTML.

/** The element whose data-testid is id, under root (the document). */
export const byTest = (id, root = document) => root.querySelector(`[data-testid="${id}"]`);

const ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

/** s as HTML text: &, <, >, " and ' escaped; null and undefined are "". */
export const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ESC[c]);
