// batches.js — runs played in the background, a few at a time: the
// article's experiments (its Step 5: remove one check, run both orderings)
// and the guard matrix. Each run fills a cell as its verdict comes; when a
// batch has finished, the server says what it showed, in words, and names
// each of its runs, which its answer offers to open. Marks and words are
// the server's (W.marks): a cell's state is a mark code.

import { byTest } from "./dom.js";
import { W, markOf } from "./words.js";

const idOf = (same) => (same ? "same" : "distinct");

export class Batches {
  constructor() {
    this.cells = new Map(); // run id -> {batch, ordering, broken, same, state (a mark), ended}
    this.answers = new Map(); // batch name -> {phase, answer, unsafe, runs}
  }

  /**
   * Take the session's runs that are batch cells (a page opened late). A
   * run of a reader's statements is a check's (build.js draws it), never
   * a matrix cell.
   */
  load(runs) {
    for (const r of runs) {
      if (!r.background) continue;
      const broken = r.broken && r.broken.length ? r.broken[0] : "none";
      const ended = !!r.outcome || !!r.ended;
      const state = r.outcome ? r.outcome.mark : ended ? "error" : "running";
      this.cells.set(r.id, { batch: r.custom ? "check" : "", ordering: r.ordering, broken, same: !!r.same_identity, state, ended });
    }
  }

  /** Whether an event is a batch's; if so it is taken and true returned. */
  onEvent(e) {
    if (e.batch) {
      const b = e.batch;
      if (b.phase === "started") {
        for (const c of b.cells) this.cells.set(c.run, { batch: b.name, ordering: c.ordering, broken: c.broken || "none", same: !!c.same_identity, state: "pending", ended: false });
        this.answers.set(b.name, { phase: "started", answer: "", unsafe: [], runs: [] });
      } else if (b.phase === "stopped") {
        // The server's sentence for a stopped batch is the event's own.
        this.answers.set(b.name, { phase: "stopped", answer: e.text, unsafe: [], runs: [] });
        for (const c of this.cells.values()) if (c.batch === b.name && !c.ended) c.state = "stopped";
      } else {
        this.answers.set(b.name, { phase: "finished", answer: b.answer, unsafe: b.unsafe || [], runs: b.runs || [] });
      }
      this.draw();
      return true;
    }
    const cell = e.run && this.cells.get(e.run);
    if (!cell) return false;
    if (e.verdict) Object.assign(cell, { state: e.verdict.mark, ended: true });
    else if (e.error) Object.assign(cell, { state: "error", ended: true });
    else if (cell.state === "pending") cell.state = "running";
    this.draw();
    return true;
  }

  /** Say a batch is starting, before the server's first word. */
  starting(name) {
    this.answers.set(name, { phase: "asked", answer: "", unsafe: [], runs: [] });
    if (name === "matrix") for (const c of document.querySelectorAll("button.mcell")) { c.dataset.state = "pending"; c.textContent = markOf("pending").cell; }
    this.draw();
  }

  draw() {
    for (const [id, c] of this.cells) {
      const el = byTest(`matrix-${c.ordering}-${c.broken || "none"}-${idOf(c.same)}`);
      if (!el || (c.batch && c.batch !== "matrix")) continue;
      const m = markOf(c.state);
      el.dataset.state = c.state;
      el.dataset.run = id;
      el.disabled = !c.ended;
      el.textContent = m.cell;
      const guard = (W.guards[c.broken] || {}).off || c.broken;
      el.setAttribute("aria-label", `${(W.orderings[c.ordering] || {}).title || c.ordering}, ${guard}, ${c.same ? "one name" : "two names"}: ${m.word}`);
    }
    for (const [name, a] of this.answers) {
      const el = byTest(name === "matrix" ? "matrix-answer" : `exp-${name}-answer`);
      if (!el) continue;
      const runs = [...this.cells.values()].filter((c) => c.batch === name);
      const done = runs.filter((c) => c.ended).length;
      el.dataset.phase = a.phase;
      el.textContent = a.phase === "finished" || a.phase === "stopped" ? a.answer : a.phase === "asked" ? "Starting the runs…" : `Running: ${done} of ${runs.length} done…`;
      const open = byTest(`exp-${name}-runs`);
      if (open) drawOpenRuns(open, name, a.runs);
    }
  }

  /** The matrix cells' states, for tests: "ordering/guard/identity" -> state. */
  state() {
    const cells = {};
    for (const c of this.cells.values()) if (c.batch === "matrix" || !c.batch) cells[`${c.ordering}/${c.broken}/${idOf(c.same)}`] = c.state;
    return { cells, answers: Object.fromEntries(this.answers) };
  }
}

/**
 * The runs behind an experiment's answer, a button each that puts its run
 * on the stage (main.js opens any button[data-open-run]), in Go's words.
 */
function drawOpenRuns(el, name, runs) {
  const key = runs.map((r) => r.run).join(",");
  if (el.dataset.runs === key) return;
  el.dataset.runs = key;
  el.textContent = "";
  el.hidden = runs.length === 0;
  for (const r of runs) {
    const b = document.createElement("button");
    b.type = "button";
    b.dataset.openRun = r.run;
    b.dataset.testid = `exp-${name}-open-${r.ordering}`;
    b.dataset.mark = r.mark;
    b.textContent = r.words;
    el.appendChild(b);
  }
}
