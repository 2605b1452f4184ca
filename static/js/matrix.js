// matrix.js — the guard matrix: every guard off in every ordering, each a
// real run of its own in the background, filling one cell as its verdict
// comes.

import { byTest } from "./view.js";
import { W } from "./words.js";

export class Matrix {
  constructor() {
    this.cells = new Map(); // run id -> {ordering, broken, state}
  }

  /** Take the session's runs that are matrix cells (a page opened late). */
  load(runs) {
    for (const r of runs) {
      if (!r.background) continue;
      const broken = r.broken && r.broken.length ? r.broken[0] : "none";
      const state = r.outcome ? (r.outcome.safe ? "safe" : "unsafe") : r.phase === "failed" || r.phase === "stopped" ? "error" : "running";
      this.cells.set(r.id, { ordering: r.ordering, broken, state });
    }
  }

  /** Whether an event is the matrix's; if so it is taken and true returned. */
  onEvent(e) {
    if (e.matrix) {
      for (const c of e.matrix.cells) this.cells.set(c.run, { ordering: c.ordering, broken: c.broken || "none", state: "pending" });
      this.draw();
      return true;
    }
    const cell = e.run && this.cells.get(e.run);
    if (!cell) return false;
    if (e.verdict) cell.state = e.verdict.safe ? "safe" : "unsafe";
    else if (e.error) cell.state = "error";
    else if (cell.state === "pending") cell.state = "running";
    this.draw();
    return true;
  }

  /** Mark every cell as waiting, before a new matrix starts. */
  reset() {
    for (const c of document.querySelectorAll("button.mcell")) { c.dataset.state = "pending"; c.textContent = "…"; }
  }

  draw() {
    for (const [id, c] of this.cells) {
      const el = byTest(`matrix-${c.ordering}-${c.broken || "none"}`);
      if (!el) continue;
      el.dataset.state = c.state;
      el.dataset.run = id;
      el.disabled = !(c.state === "safe" || c.state === "unsafe" || c.state === "error");
      el.textContent = { pending: "…", running: "⟳", safe: "✓ safe", unsafe: "✗ UNSAFE", error: "! error" }[c.state] || "·";
      const guard = c.broken === "none" ? "all guards on" : (W.guards[c.broken] || {}).off || c.broken;
      el.setAttribute("aria-label", `${(W.orderings[c.ordering] || {}).title || c.ordering}, ${guard}: ${c.state}`);
    }
  }

  /** The cells' states, for tests: "ordering/guard" -> state. */
  state() {
    return Object.fromEntries([...this.cells].map(([, c]) => [`${c.ordering}/${c.broken}`, c.state]));
  }
}
