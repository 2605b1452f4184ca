// build.js — the article's Steps 2 and 3: the reader's four statements,
// and "Check it", which sends them to the server as one check command. The
// check plays its cases as background runs, like a Step 5 batch (a batch
// event named "check" starts them and, finished, carries the report); the
// page says which case is running, then draws the report: the article's
// table for their code, cell by cell, what it shows broken, and a button
// per case that opens its run on the stage (main.js opens any
// button[data-open-run]). Every word of the result is the lab's, from the
// report; a refusal's sentence is the sandbox's, shown beside its editor.
// The page loads this module, its stylesheet and the section's body (GET
// /build) only when the reader opens Build it.

import { byTest, esc } from "./dom.js";
import { markOf } from "./words.js";

const CHECK = "check"; // the batch's name in its events

/** Where a 1-based code-point position falls in a string, in UTF-16 units. */
export function utf16Offset(text, position) {
  let i = 0, cp = 1;
  for (const ch of text) {
    if (cp >= position) break;
    i += ch.length;
    cp++;
  }
  return i;
}

/**
 * Load Build it into its folded section: its stylesheet and its body, then
 * the Build that drives it (see Build's constructor for the options).
 */
export async function loadBuild({ root, ...opts }) {
  const css = new URL("../css/build.css", import.meta.url).href;
  const sheet = new Promise((resolve) => {
    const link = document.createElement("link");
    link.rel = "stylesheet";
    link.href = css;
    link.onload = link.onerror = resolve; // unstyled is still usable
    document.head.appendChild(link);
  });
  const res = await fetch(root.dataset.src);
  if (!res.ok) throw new Error(`HTTP ${res.status}`);
  const html = await res.text();
  await sheet;
  const body = byTest("build-body", root);
  body.innerHTML = html;
  const b = new Build({ root: byTest("build-root", body), ...opts });
  b.catchUp(); // never rejects: it says what went wrong in the section
  return b;
}

// ---- the reader's solution in the link --------------------------------------
// A solution travels in the fragment, #sol=…, never the query: it is not
// the server's business until Check it sends it, a fragment stays out of
// access logs, and a long one meets no server's header limit. Its value is
// base64url of UTF-8 JSON, {kind: text}, holding only the statements that
// differ from the start.

/** Base64url of a string's UTF-8 bytes, unpadded. */
function toBase64url(s) {
  const bytes = new TextEncoder().encode(s);
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** The string whose UTF-8 bytes are base64url s; throws if it is not. */
function fromBase64url(s) {
  if (!/^[A-Za-z0-9_-]*$/.test(s)) throw new Error("not base64url");
  const bin = atob(s.replace(/-/g, "+").replace(/_/g, "/"));
  return new TextDecoder("utf-8", { fatal: true }).decode(Uint8Array.from(bin, (c) => c.charCodeAt(0)));
}

const utf8Length = (s) => new TextEncoder().encode(s).length;

/**
 * The fragment's sol= value for a solution ({kind: text}), given the start
 * it differs from: "" when it is the start, or null when a statement is
 * longer than maxBytes (the server would refuse it; the link carries none).
 */
export function solutionParam(sol, start, maxBytes) {
  const diff = {};
  for (const k of Object.keys(start)) {
    const t = sol[k] ?? "";
    if (t.trim() === start[k].trim()) continue;
    if (utf8Length(t) > maxBytes) return null;
    diff[k] = t;
  }
  return Object.keys(diff).length ? toBase64url(JSON.stringify(diff)) : "";
}

/**
 * Read a fragment's sol= value: {sol} with a text for each kind of start
 * (the start's where it has none), or {error} saying in words why it was
 * ignored. It never throws.
 */
export function parseSolutionParam(value, start, maxBytes) {
  const bad = (why) => ({ error: `The solution in this link could not be read (${why}) and was ignored.` });
  if (value.length > 4 * Object.keys(start).length * maxBytes) return bad("it is too long");
  let obj;
  try {
    obj = JSON.parse(fromBase64url(value));
  } catch {
    return bad("it is not a solution's encoding");
  }
  if (!obj || typeof obj !== "object" || Array.isArray(obj)) return bad("it is not a set of statements");
  const sol = { ...start };
  for (const [k, t] of Object.entries(obj)) {
    if (!Object.hasOwn(start, k)) return bad(`it names no statement "${String(k).slice(0, 20)}"`);
    if (typeof t !== "string") return bad(`its ${k} is not text`);
    const hidden = t.match(/(?![\t\n\r])[\p{Cc}\p{Cf}\u2028\u2029]/u); // shown as nothing: the link would not show what it runs
    if (hidden) return bad(`its ${k} holds U+${hidden[0].codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}, an invisible control character`);
    if (utf8Length(t) > maxBytes) return bad(`its ${k} is longer than ${maxBytes} bytes`);
    sol[k] = t;
  }
  return { sol };
}

/**
 * Yours against ours, line by line: the longest common run of lines
 * (compared without case or runs of spaces), each line marked "same",
 * "yours" (yours alone) or "ours" (ours alone), in order.
 */
export function diffLines(yours, ours) {
  const norm = (l) => l.trim().replace(/\s+/g, " ").toLowerCase();
  const a = yours.split("\n"), b = ours.split("\n");
  const na = a.map(norm), nb = b.map(norm);
  const L = Array.from({ length: a.length + 1 }, () => new Uint16Array(b.length + 1));
  for (let i = a.length - 1; i >= 0; i--) for (let j = b.length - 1; j >= 0; j--) L[i][j] = na[i] === nb[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < a.length || j < b.length) {
    if (i < a.length && j < b.length && na[i] === nb[j]) { out.push({ k: "same", t: b[j] }); i++; j++; }
    else if (j >= b.length || (i < a.length && L[i + 1][j] >= L[i][j + 1])) out.push({ k: "yours", t: a[i++] });
    else out.push({ k: "ours", t: b[j++] });
  }
  return out;
}

export class Build {
  /**
   * root is the section; send(cmd, {say}) sends a command as main.js does,
   * calling say(message, err) with its outcome ("" when it went through);
   * onChange() is told when the statements change (the link follows them).
   * page is main.js's page, read and never written: its role (a viewer's
   * Check it is disabled) and the session's runs (page.runs); api.get
   * reads the session's log, and since is a seq the log has reached (the
   * page's first render's), for catchUp.
   */
  constructor({ root, send, onChange, hash, page, api, since }) {
    this.root = root;
    this.page = page || { role: "driver", runs: new Map() };
    this.api = api;
    this.since = since || 0;
    this.seq = 0; // the newest event of the session's log taken, by seq
    this.queue = null; // live events held while catchUp reads the log
    this.quiet = false; // catchUp is playing the log: draw once, at its end
    this.section = root.closest("details");
    this.send = send;
    this.onChange = onChange || (() => {});
    this.maxBytes = Number(root.dataset.maxBytes) || 8192;
    this.off = root.hasAttribute("data-off");
    this.editors = new Map(); // kind -> textarea
    for (const ed of root.querySelectorAll(".editor[data-kind]")) this.editors.set(ed.dataset.kind, byTest(`build-${ed.dataset.kind}-text`, ed));
    this.cases = [...root.querySelectorAll("tr[data-case]")].map((tr) => tr.dataset.case);
    this.phase = "idle"; // idle, asked, running, finished, stopped, refused
    this.runs = new Map(); // run id -> {case, state (a mark), ended}
    this.report = null;
    this.refusal = null; // {kind, code, position, sqlstate, message}
    this.note = "";
    this.inLine = ""; // "Your check is 3rd in line.", while it waits its turn
    this.comparing = false;
    this.fromLink = false;
    this.loadLink(hash || "");

    for (const [, ta] of this.editors) {
      ta.addEventListener("input", () => { this.clearRefusal(ta); this.onChange(); if (this.comparing) this.drawDiff(ta.name); });
    }
    byTest("build-reset", root).addEventListener("click", () => this.reset());
    byTest("build-compare", root).addEventListener("click", () => this.compare(!this.comparing));
    byTest("build-check", root).addEventListener("click", () => this.check());
    this.caughtUp = false;
    this.draw();
  }

  /** The solution the editors hold: {claim, complete, fail, receiver}. */
  solution() {
    const sol = {};
    for (const [k, ta] of this.editors) sol[k] = ta.value;
    return sol;
  }

  /** The leases-alone start: each editor's rendered text. */
  start() {
    const sol = {};
    for (const [k, ta] of this.editors) sol[k] = ta.defaultValue;
    return sol;
  }

  /** The fragment that carries the solution, "#sol=…", or "" for the start. */
  hash() {
    const p = solutionParam(this.solution(), this.start(), this.maxBytes);
    if (p === null) {
      this.say(`Your statements are too long to go in the link (${this.maxBytes} bytes each at most); the link carries none.`);
      return "";
    }
    if (this.note.startsWith("Your statements are too long")) this.say("");
    return p ? `#sol=${p}` : "";
  }

  /** Fill the editors from a link's #sol=, or say why it could not be. */
  loadLink(hash) {
    const v = new URLSearchParams(hash.replace(/^#/, "")).get("sol");
    if (v === null) return;
    const r = parseSolutionParam(v, this.start(), this.maxBytes);
    if (r.error) { this.say(r.error); this.section.open = true; return; }
    for (const [k, ta] of this.editors) ta.value = r.sol[k];
    this.fromLink = true;
    this.section.open = true;
  }

  say(note) {
    this.note = note;
    const el = byTest("build-note", this.root);
    el.textContent = note;
    el.hidden = !note;
  }

  reset() {
    for (const [, ta] of this.editors) { ta.value = ta.defaultValue; this.clearRefusal(ta); }
    this.onChange();
  }

  /** Show, beside each editor, what differs between it and ours, or take them away. */
  compare(on) {
    this.comparing = on;
    const b = byTest("build-compare", this.root);
    b.setAttribute("aria-pressed", String(on));
    this.root.classList.toggle("comparing", on);
    for (const k of this.editors.keys()) byTest(`build-${k}-ours`, this.root).hidden = !on;
    if (on) for (const k of this.editors.keys()) this.drawDiff(k);
  }

  /** One editor's statement against ours: + lines are ours alone, − lines yours alone. */
  drawDiff(k) {
    const fig = byTest(`build-${k}-ours`, this.root);
    const ours = fig.querySelector("pre.plain code").textContent;
    const d = diffLines(this.editors.get(k).value, ours);
    const same = d.every((l) => l.k === "same");
    fig.querySelector("figcaption").textContent = same ? "Ours: the same as yours" : "Ours against yours: + ours alone, − yours alone";
    fig.querySelector("pre.diff code").innerHTML = d.map((l) =>
      l.k === "same" ? `<span>  ${esc(l.t)}</span>` : l.k === "ours" ? `<ins>+ ${esc(l.t)}</ins>` : `<del>− ${esc(l.t)}</del>`).join("\n");
  }

  clearRefusal(ta) {
    ta.removeAttribute("aria-invalid");
    const err = byTest(`${ta.dataset.testid.replace(/-text$/, "")}-error`, this.root);
    if (err) { err.hidden = true; err.textContent = ""; }
    if (this.refusal && this.editors.get(this.refusal.kind) === ta) this.refusal = null;
  }

  async check() {
    if (!this.canCheck()) return;
    for (const [, ta] of this.editors) this.clearRefusal(ta);
    this.refusal = null;
    this.report = null;
    this.runs.clear();
    this.phase = "asked";
    this.inLine = "";
    this.draw();
    const r = await this.send({ action: "check", solution: this.solution() }, {
      say: (msg, err) => { if (msg) this.failed(msg, err); },
    });
    if (r === null && this.phase === "asked") this.phase = this.refusal ? "refused" : "idle";
    this.draw();
  }

  /** A check the server would not start: a refused statement, or another reason. */
  failed(msg, err) {
    const d = err && err.detail;
    const ta = d && this.editors.get(d.kind);
    if (!ta) {
      this.phase = "idle";
      this.progress(msg);
      return;
    }
    this.phase = "refused";
    this.refusal = { kind: d.kind, code: d.code, position: d.position || 0, sqlstate: d.sqlstate || "", message: msg };
    const box = byTest(`build-${d.kind}-error`, this.root);
    let where = "";
    let from = 0, to = 0;
    if (d.position > 0) {
      from = utf16Offset(ta.value, d.position);
      // The word the position falls on, so the mark can be seen.
      const m = /^[^\s(),;]+/.exec(ta.value.slice(from));
      to = Math.min(ta.value.length, from + (m ? m[0].length : 1));
      // Where it is, as the server reckons it (sandbox.LineColumn).
      if (d.line > 0) where = ` (line ${d.line}, column ${d.column})`;
    }
    box.textContent = msg + where;
    box.hidden = false;
    ta.setAttribute("aria-invalid", "true");
    this.section.open = true;
    ta.focus();
    if (d.position > 0) ta.setSelectionRange(from, to);
    this.progress("");
  }

  progress(text) { byTest("build-progress", this.root).textContent = text; }

  /**
   * Catch up with the session's last check, which may have started or
   * ended before this section loaded (a page reloaded, a watch link, a
   * reader who opened Build it late): the page's socket gave those events
   * to a page with no Build yet, and its first render had only their runs.
   * It reads the session's log back from its newest event to the last
   * check's batch event: a finished one is the whole report; a started or
   * stopped one is played again from the batch's start, its runs' events
   * with it. Live events that come meanwhile wait, and are taken after,
   * each once. A session with no run of a reader's statements has had no
   * check, and its log is not read.
   */
  async catchUp() {
    const custom = [...this.page.runs.values()].some((r) => r.custom);
    if (!custom || !this.api) { this.caughtUp = true; return; }
    this.queue = [];
    const kept = []; // pages of the log, oldest first
    let from = -1; // where in kept's flat list the events to play begin
    let newest = null; // the last check's batch event, when it is not a report
    try {
      const head = await this.api.get(`/events?since=${this.since}&limit=1`);
      let hi = head.last_seq;
      const PAGE = 1000;
      scan: while (hi > 0) {
        const lo = Math.max(0, hi - PAGE);
        const p = await this.api.get(`/events?since=${lo}&limit=${hi - lo}`);
        const evs = p.events.filter((e) => e.seq <= hi);
        kept.unshift(evs);
        for (let i = evs.length - 1; i >= 0; i--) {
          const b = evs[i].batch;
          if (!b || b.name !== CHECK) continue;
          if (!newest && b.phase === "finished") { kept.splice(0, kept.length, [evs[i]]); from = 0; break scan; }
          if (b.phase === "started") { from = i; break scan; }
          newest = evs[i]; // stopped: go on back to its start, for its runs
        }
        hi = lo;
      }
      if (from >= 0) {
        const all = kept.flat().slice(from);
        this.quiet = true;
        for (const e of all) this.onEvent(e);
        this.quiet = false;
      }
      this.seq = Math.max(this.seq, head.last_seq);
    } catch (err) {
      // The log no longer keeps it, or could not be read: the section works
      // on; a check run from now on is shown as ever.
      this.progress(`The session's last check could not be read back (${err.message}).`);
    }
    const q = this.queue;
    this.queue = null;
    for (const e of q) this.onEvent(e);
    this.caughtUp = true;
    this.draw();
  }

  /** Take a check's events: its batch's, and its runs' own. Others are left alone. */
  onEvent(e) {
    if (this.queue && !this.quiet) { this.queue.push(e); return; }
    if (e.seq) {
      if (e.seq <= this.seq) return; // taken already, from the log
      this.seq = e.seq;
    }
    // The server's line: where this session's check waits, as it moves.
    if (e.note && e.note.code === "in-line") {
      if (this.phase === "asked") { this.inLine = e.text; if (!this.quiet) this.draw(); }
      return;
    }
    const b = e.batch;
    if (b && b.name === CHECK) {
      this.inLine = "";
      if (b.phase === "started") {
        this.runs.clear();
        this.report = null;
        this.board = b.board || ""; // the class board it counts on: a class student's check
        // Each cell names its case: never matched by position.
        for (const c of b.cells || []) if (c.case) this.runs.set(c.run, { case: c.case, state: "pending", ended: false });
        this.phase = "running";
      } else if (b.phase === "stopped") {
        this.phase = "stopped";
        this.stopped = e.text;
        for (const r of this.runs.values()) if (!r.ended) r.state = "stopped";
      } else if (b.phase === "finished") {
        this.phase = "finished";
        this.report = b.check || null; // the reader's Compare stays as they set it
      }
      if (!this.quiet) this.draw();
      return;
    }
    const r = e.run && this.runs.get(e.run);
    if (!r) return;
    if (e.verdict) Object.assign(r, { state: e.verdict.mark, ended: true });
    else if (e.error) Object.assign(r, { state: "error", ended: true });
    else if (r.state === "pending") r.state = "running";
    else return;
    if (!this.quiet) this.draw();
  }

  /** Whether this page may check: it drives the session, on a server that runs readers' SQL. */
  canCheck() { return !this.off && this.page.role === "driver"; }

  draw() {
    const check = byTest("build-check", this.root);
    // A viewer sees the driver's check, and why it cannot start one.
    const watching = !this.off && this.page.role !== "driver";
    byTest("build-why", this.root).hidden = !watching;
    if (watching) check.setAttribute("aria-describedby", "build-why"); else check.removeAttribute("aria-describedby");
    check.disabled = !this.canCheck() || this.phase === "asked" || this.phase === "running";
    check.setAttribute("aria-busy", String(this.phase === "asked" || this.phase === "running"));
    const result = byTest("build-result", this.root);
    const byCase = new Map([...this.runs.entries()].map(([id, r]) => [r.case, { ...r, run: id }]));
    if (this.phase === "asked") this.progress(this.inLine || "Starting the check…");
    else if (this.phase === "running") {
      const all = [...this.runs.values()];
      const done = all.filter((r) => r.ended).length;
      const now = all.filter((r) => r.state === "running").map((r) => this.title(r.case));
      this.progress(`Running ${now.length ? now.join(", ") : "the next case"}: ${done} of ${all.length} cases done…`);
    } else if (this.phase === "stopped") this.progress(this.stopped || "");
    else if (this.phase === "finished") this.progress("");
    result.hidden = this.phase === "idle" || this.phase === "asked" || this.phase === "refused";
    const rep = this.report;
    const words = byTest("build-words", this.root);
    const rm = markOf(rep ? rep.mark : ""); // the report's own marks, never worked out here
    words.dataset.state = rep ? (rep.pass ? "safe" : "unsafe") : "none";
    // A class student's check that counts on no board: their class had
    // ended when it started (the server says which board, never the page).
    const uncounted = rep && this.page.seat && !this.board
      ? ` <span class="not-counted" data-testid="build-not-counted">Not counted on the class's board: your class had ended.</span>` : "";
    words.innerHTML = rep ? `<span class="mark ${esc(rm.tone)}" aria-hidden="true">${esc(rm.sign)}</span> ${esc(rep.words)}${uncounted}` : "";
    words.hidden = !rep;
    const results = new Map(((rep && rep.cases) || []).map((c) => [c.case, c]));
    for (const k of this.cases) this.drawCase(k, results.get(k), byCase.get(k));
    const broken = (rep && rep.broken) || [];
    byTest("build-broken-h", this.root).hidden = broken.length === 0;
    byTest("build-broken", this.root).innerHTML = broken.map((b) =>
      `<li data-requirement="${esc(b.requirement)}" data-case="${esc(b.case)}">${esc(b.words)}</li>`).join("");
    // What fencelab asks beyond the article: a note, never a failure.
    const beyond = (rep && rep.beyond) || [];
    byTest("build-beyond", this.root).hidden = beyond.length === 0;
    byTest("build-beyond-list", this.root).innerHTML = beyond.map((b) =>
      `<li data-requirement="${esc(b.requirement)}" data-case="${esc(b.case)}">${esc(b.words)}</li>`).join("");
  }

  title(k) {
    const el = this.root.querySelector(`tr[data-case="${k}"] .case-title`);
    return el ? el.textContent : k;
  }

  /** One case's row: its state while it runs, then its cells from the report. */
  drawCase(k, res, run) {
    const tr = this.root.querySelector(`tr[data-case="${k}"]`);
    const state = byTest(`build-case-${k}-state`, tr);
    const open = byTest(`build-case-${k}-open`, tr);
    const mark = res ? res.mark : run ? run.state : "";
    const m = markOf(mark);
    tr.dataset.state = mark;
    state.innerHTML = mark ? `<span class="mark ${esc(m.tone)}" aria-hidden="true">${esc(m.sign)}</span><span class="sr-only">${esc(m.word)}</span>` : "";
    const id = (res && res.run) || (run && run.ended ? run.run : "");
    open.hidden = !id;
    if (id) open.dataset.openRun = id; else delete open.dataset.openRun;
    const cells = new Map(((res && res.table) || []).map((c) => [c.column, c]));
    for (const td of tr.querySelectorAll("td[data-column]")) {
      const c = cells.get(td.dataset.column);
      if (!c) {
        delete td.dataset.ok;
        td.textContent = res && res.error && td.dataset.column === "call" ? res.error.message : "";
        continue;
      }
      const cm = markOf(c.mark);
      td.dataset.ok = String(!!c.as_correct);
      td.innerHTML = `<span class="got"><span class="mark ${esc(cm.tone)}" aria-hidden="true">${esc(cm.sign)}</span> ${esc(c.words)}<span class="sr-only"> (${esc(cm.word)})</span></span>` +
        (c.as_correct ? "" : `<span class="expected shown">${esc(c.expected)}</span>`);
    }
  }

  /** What tests read. */
  state() {
    return {
      phase: this.phase, caughtUp: this.caughtUp, report: this.report, board: this.board || "", refusal: this.refusal, note: this.note, comparing: this.comparing, fromLink: this.fromLink,
      runs: Object.fromEntries([...this.runs.entries()].map(([id, r]) => [id, { case: r.case, state: r.state, ended: r.ended }])),
      solution: this.solution(),
    };
  }
}
