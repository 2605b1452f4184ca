// batches.js — runs played in the background, a few at a time: the
// article's experiments (its Step 5: remove one check, run both orderings)
// and the guard matrix. Each run fills a cell as its verdict comes; when a
// batch has finished, the server says what it showed, in words.

import { byTest } from "./view.js";
import { W } from "./words.js";

const idOf = (same) => (same ? "same" : "distinct");

export class Batches {
  constructor() {
    this.cells = new Map(); // run id -> {batch, ordering, broken, same, state}
    this.answers = new Map(); // batch name -> {phase, answer, unsafe}
  }

  /** Take the session's runs that are batch cells (a page opened late). */
  load(runs) {
    for (const r of runs) {
      if (!r.background) continue;
      const broken = r.broken && r.broken.length ? r.broken[0] : "none";
      const state = r.outcome ? (r.outcome.safe ? "safe" : "unsafe") : r.phase === "failed" || r.phase === "stopped" ? "error" : "running";
      this.cells.set(r.id, { batch: "", ordering: r.ordering, broken, same: !!r.same_identity, state });
    }
  }

  /** Whether an event is a batch's; if so it is taken and true returned. */
  onEvent(e) {
    if (e.batch) {
      const b = e.batch;
      if (b.phase === "started") {
        for (const c of b.cells) this.cells.set(c.run, { batch: b.name, ordering: c.ordering, broken: c.broken || "none", same: !!c.same_identity, state: "pending" });
        this.answers.set(b.name, { phase: "started", answer: "", unsafe: [] });
      } else if (b.phase === "stopped") {
        this.answers.set(b.name, { phase: "stopped", answer: `Stopped (${b.answer}): the runs it had not played did not run.`, unsafe: [] });
        for (const c of this.cells.values()) if (c.batch === b.name && (c.state === "pending" || c.state === "running")) c.state = "stopped";
      } else {
        this.answers.set(b.name, { phase: "finished", answer: b.answer, unsafe: b.unsafe || [] });
      }
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

  /** Say a batch is starting, before the server's first word. */
  starting(name) {
    this.answers.set(name, { phase: "asked", answer: "", unsafe: [] });
    if (name === "matrix") for (const c of document.querySelectorAll("button.mcell")) { c.dataset.state = "pending"; c.textContent = "…"; }
    this.draw();
  }

  draw() {
    for (const [id, c] of this.cells) {
      const el = byTest(`matrix-${c.ordering}-${c.broken || "none"}-${idOf(c.same)}`);
      if (!el || (c.batch && c.batch !== "matrix")) continue;
      el.dataset.state = c.state;
      el.dataset.run = id;
      el.disabled = !(c.state === "safe" || c.state === "unsafe" || c.state === "error");
      el.textContent = { pending: "…", running: "⟳", safe: "✓ safe", unsafe: "✗ UNSAFE", error: "! error", stopped: "– stopped" }[c.state] || "·";
      const guard = c.broken === "none" ? "all guards on" : (W.guards[c.broken] || {}).off || c.broken;
      el.setAttribute("aria-label", `${(W.orderings[c.ordering] || {}).title || c.ordering}, ${guard}, ${c.same ? "one name" : "two names"}: ${c.state}`);
    }
    for (const [name, a] of this.answers) {
      const el = byTest(name === "matrix" ? "matrix-answer" : `exp-${name}-answer`);
      if (!el) continue;
      const runs = [...this.cells.values()].filter((c) => c.batch === name);
      const done = runs.filter((c) => c.state === "safe" || c.state === "unsafe" || c.state === "error").length;
      el.dataset.phase = a.phase;
      el.textContent = a.phase === "finished" || a.phase === "stopped" ? a.answer : a.phase === "asked" ? "Starting the runs…" : `Running: ${done} of ${runs.length} done…`;
    }
  }

  /** The matrix cells' states, for tests: "ordering/guard/identity" -> state. */
  state() {
    const cells = {};
    for (const c of this.cells.values()) if (c.batch === "matrix" || !c.batch) cells[`${c.ordering}/${c.broken}/${idOf(c.same)}`] = c.state;
    return { cells, answers: Object.fromEntries(this.answers) };
  }
}
