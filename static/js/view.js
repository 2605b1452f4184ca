// view.js — drawing the run: the lanes, the timeline, the outcome table
// and the guard matrix. Pure DOM; no framework.

import { LANE_ROW, LANE_RECEIVER, LANE_RUNNER, laneOf, isHeartbeat, isShown, epochOf } from "./model.js";
import { W, badgeOf, markOf, msWords } from "./words.js";

import { byTest, esc } from "./dom.js";

/** The lanes of a run: its workers in order, then the row and the receiver. */
export function lanes(run) {
  const ws = [...run.workers.keys()].sort();
  return [...ws, LANE_ROW, LANE_RECEIVER];
}

// ---- cards --------------------------------------------------------------

function sqlBlock(e) {
  const st = (e.sql && e.sql.stmt) || (e.receiver && e.receiver.stmt);
  if (!st || !st.sql) return "";
  const rows = st.rows ?? 0;
  const args = (st.args || []).map((a, i) => `$${i + 1} = ${a}`).join("\n");
  return `<details class="sql"><summary>SQL · ${esc(st.name)} · <b>${rows} row${rows === 1 ? "" : "s"}</b></summary><pre><code>${esc(st.sql)}</code>${args ? `<code class="args">${esc(args)}</code>` : ""}</pre></details>`;
}

/** Why a fenced write was refused: its reasons, and the row it met. */
function fenceReason(e) {
  const f = e.sql && e.sql.fenced;
  if (!f) return "";
  const why = (f.reasons || []).map((r) => W.reasons[r] || r).join("; ");
  return `<p class="reason">Why: ${esc(why)} <span class="row-seen">(the row: ${esc(f.row_status)}, <span class="badge epoch">epoch ${f.row_epoch}</span>, ${esc(f.row_owner)})</span></p>`;
}

function timeLabel(e, t0) {
  if (!e.at || !t0) return "";
  const ms = Date.parse(e.at) - t0;
  return `+${(ms / 1000).toFixed(3)} s`;
}

/** The card of one event. */
export function card(e) {
  const b = badgeOf(e);
  const lane = laneOf(e);
  const chip = lane !== LANE_RUNNER && /^[A-Z]{1,8}$/.test(e.actor)
    ? `<span class="chip w-${esc(e.actor)}" aria-hidden="true">${esc(e.actor)}</span>`
    : `<span class="chip who">${esc(e.actor)}</span>`;
  const ep = epochOf(e);
  const epoch = ep != null ? `<span class="badge epoch" title="the epoch this event is about">epoch ${ep}</span>` : "";
  return `<article class="card">
    <header>${chip}${epoch}${b ? `<span class="badge o-${esc(b.tone)}">${esc(b.label)}</span>` : ""}<span class="sup" hidden>↺ superseded</span></header>
    <p>${esc(e.text)}</p>${fenceReason(e)}${sqlBlock(e)}</article>`;
}

/** The code of what an event came to, for styling: a result, a decision, a change. */
function outcomeCode(e) {
  const p = e.sql || e.call;
  if (p) return p.result;
  if (e.receiver) return e.receiver.decision;
  if (e.process) return e.process.change;
  if (e.lease) return e.lease.change;
  if (e.row) return e.row.op;
  if (e.verdict) return e.verdict.mark || "none";
  return "none";
}

/**
 * Timeline draws events as rows. Rows are appended as events arrive; a
 * full redraw happens for a replay, a scrub or a change of filter.
 */
export class Timeline {
  constructor(root) {
    this.root = root;
    this.showHeartbeats = false;
    this.lanes = [];
    this.t0 = 0;
  }

  setLanes(ls) {
    this.lanes = ls;
    this.root.style.setProperty("--lanes", String(ls.length));
  }

  visible(e) {
    return isShown(e) && (this.showHeartbeats || !isHeartbeat(e));
  }

  row(e, info, index) {
    const li = document.createElement("li");
    const lane = laneOf(e);
    li.className = `ev k-${e.kind} x-${outcomeCode(e).replace(/[^a-z-]/g, "")}${lane === LANE_RUNNER ? " wide" : ""}`;
    li.dataset.seq = e.seq;
    li.dataset.index = index;
    li.dataset.testid = "event";
    li.dataset.lane = lane;
    if (!this.t0 && e.at) this.t0 = Date.parse(e.at);
    const cells = this.lanes.map((l) => {
      const cls = ["cell"];
      if (info.frozen.includes(l)) cls.push("frozen");
      if (l === LANE_ROW && info.expired.length) cls.push("expired");
      const here = l === lane || (lane === LANE_RUNNER && l === this.lanes[0]);
      return `<div class="${cls.join(" ")}"${here ? "" : ' aria-hidden="true"'}>${here ? card(e) : ""}</div>`;
    });
    const bands = [];
    if (info.frozen.length) bands.push(`<span class="band frozen">${info.frozen.map((l) => `${esc(l)} frozen`).join(", ")}</span>`);
    if (info.expired.length) bands.push(`<span class="band expired">lease expired</span>`);
    li.innerHTML = `<span class="when">${esc(timeLabel(e, this.t0))}</span>${bands.length ? `<span class="bands">${bands.join("")}</span>` : ""}<div class="cells">${cells.join("")}</div>`;
    return li;
  }

  markSuperseded(seq) {
    const li = this.root.querySelector(`li[data-seq="${seq}"]`);
    if (!li) return;
    li.classList.add("superseded");
    const s = li.querySelector(".sup");
    if (s) s.hidden = false;
  }

  append(e, info, index) {
    const li = this.visible(e) ? this.root.appendChild(this.row(e, info, index)) : null;
    if (info.mark && info.mark.supersedes) this.markSuperseded(info.mark.supersedes);
    return li;
  }

  redraw(events, infos, upTo) {
    this.root.textContent = "";
    this.t0 = 0;
    const frag = document.createDocumentFragment();
    for (let i = 0; i < events.length; i++) {
      if (!this.visible(events[i])) continue;
      const li = this.row(events[i], infos[i], i);
      if (i >= upTo) li.classList.add("future");
      frag.appendChild(li);
    }
    this.root.appendChild(frag);
    // Marks point at earlier rows, so they go on once every row is in.
    for (const i of infos) if (i && i.mark && i.mark.supersedes) this.markSuperseded(i.mark.supersedes);
  }
}

// ---- lanes ---------------------------------------------------------------

/** The lane headers: a card per worker, the job row, the receiver. */
export function renderLanes(root, run, opts) {
  const ls = lanes(run);
  root.style.setProperty("--lanes", String(ls.length));
  const html = ls.map((l) => {
    if (l === LANE_ROW) return rowCard(run);
    if (l === LANE_RECEIVER) return receiverCard(run);
    return workerCard(run.workers.get(l), opts);
  });
  root.innerHTML = html.join("");
}

function workerCard(w, opts) {
  const st = w.exited ? (w.killed ? "killed" : "exited") : w.frozen ? "frozen" : "alive";
  const dis = (cond) => (!opts.canDrive || opts.scrubbing || cond ? " disabled" : "");
  const holds = w.jobId ? `holds job ${w.jobId} at <span class="badge epoch">epoch ${w.epoch}</span>` : "holds no job";
  return `<section class="lane worker s-${st}" data-testid="worker-${esc(w.label)}" aria-label="Worker ${esc(w.label)}">
    <h3><span class="chip w-${esc(w.label)}">${esc(w.label)}</span> ${esc(w.owner || "worker")}</h3>
    <p class="proc">pid <b data-testid="worker-${esc(w.label)}-pid">${w.pid || "—"}</b> · <span data-testid="worker-${esc(w.label)}-state" data-state="${esc(w.state)}">${esc(W.states[w.state] || w.state)}</span>${w.frozen ? ' <span class="ice">❄ frozen</span>' : ""}</p>
    <p class="holds${w.jobId ? "" : " none"}">${holds}</p>
    ${w.skewMs ? `<p class="skew" data-testid="worker-${esc(w.label)}-skew">its clock runs ${esc(msWords(w.skewMs))} ahead</p>` : ""}
    <div class="wbtn">
      <button type="button" data-testid="worker-${esc(w.label)}-pause" data-act="pause_worker" data-worker="${esc(w.label)}"${dis(w.frozen || w.exited)}>Pause</button>
      <button type="button" data-testid="worker-${esc(w.label)}-resume" data-act="resume_worker" data-worker="${esc(w.label)}"${dis(!w.frozen || w.exited)}>Resume</button>
      <button type="button" data-testid="worker-${esc(w.label)}-kill" data-act="kill_worker" data-worker="${esc(w.label)}"${dis(w.exited)}>Kill</button>
    </div></section>`;
}

function rowCard(run) {
  const jobs = [...run.jobs.values()];
  const body = jobs.length === 0 ? "<p>No job yet.</p>" : jobs.slice(-6).map((j) => `
    <div class="job s-${esc(j.status)}${j.expired ? " expired" : ""}" data-testid="job-${j.id}">
      <p><b>job ${j.id}</b> · <span class="status">${esc(j.status)}</span> · <span class="badge epoch">epoch ${j.epoch}</span>${j.owner ? ` · ${esc(j.owner)}` : ""}</p>
      ${j.status === "running" && j.leaseUntil ? `<div class="lease" data-until="${esc(j.leaseUntil)}" data-lease-ms="${run.leaseMs}">
        <span class="lease-label">lease, database clock</span><span class="bar"><span class="fill"></span></span><span class="left" data-testid="lease-left-${j.id}"></span></div>
        ${skewBars(run, j)}` : ""}
      ${j.expired && j.status === "running" ? '<p class="expired-note">◔ lease expired: claimable</p>' : ""}
    </div>`).join("");
  return `<section class="lane row" data-testid="lane-row" aria-label="Postgres row"><h3>Postgres row</h3>${body}</section>`;
}

function skewBars(run, j) {
  let out = "";
  for (const w of run.workers.values()) {
    const ms = w.skewMs;
    if (!ms) continue;
    out += `<div class="lease own" data-until="${esc(j.leaseUntil)}" data-lease-ms="${run.leaseMs}" data-skew-ms="${ms}">
      <span class="lease-label">by ${esc(w.label)}'s own clock</span><span class="bar"><span class="fill"></span></span><span class="left"></span></div>`;
  }
  return out;
}

function receiverCard(run) {
  const rs = [...run.receiver.entries()];
  const body = rs.length === 0 ? "<p>Nothing delivered yet.</p>" : rs.slice(-6).map(([id, r]) => `
    <p data-testid="receiver-${id}"><b>job ${id}</b> · holds <span class="badge epoch">epoch ${r.epoch ?? "—"}</span> from ${esc(r.from ? "worker " + r.from : "nobody")} · ${r.decisions.length} call${r.decisions.length === 1 ? "" : "s"}</p>
    <p class="effects-line" data-testid="receiver-${id}-effects">effects: ${r.decisions.filter((d) => d.accepted).map((d) => `<span class="fx${run.zombie && d.from === run.zombie ? " zombie" : ""}">✉ ${esc(d.from)}·${d.epoch}</span>`).join(" ") || "none"}</p>`).join("");
  return `<section class="lane receiver" data-testid="lane-receiver" aria-label="Receiver"><h3>Receiver</h3>${body}</section>`;
}

/** Run the lease bars down on the database clock. */
export function tickLeases(root, dbNow) {
  const set = (o, k, v) => { if (o[k] !== v) o[k] = v; };
  let live = 0;
  for (const el of root.querySelectorAll(".lease[data-until]")) {
    const left = Date.parse(el.dataset.until) - dbNow() - (Number(el.dataset.skewMs) || 0);
    set(el.querySelector(".fill").style, "transform", `scaleX(${Math.max(0, Math.min(1, left / (Number(el.dataset.leaseMs) || 1000))).toFixed(3)})`);
    if (el.classList.contains("gone") !== left <= 0) el.classList.toggle("gone", left <= 0);
    set(el.querySelector(".left"), "textContent", left > 0 ? `${(left / 1000).toFixed(1)} s left` : "expired");
    if (left > 0) live++;
  }
  return live;
}

// ---- outcome -------------------------------------------------------------

/** The lists under the verdict: what happened, every violation, the effects. */
function renderLists(run) {
  const o = run.outcome;
  const list = (id, items) => {
    const el = byTest(id);
    if (el) el.innerHTML = items.map((x) => `<li>${esc(x)}</li>`).join("");
  };
  list("reveal", o ? o.reveal || [] : []);
  // The verdict's headline says the first violation; Go lists the rest.
  const rest = (o ? o.also : run.report ? run.report.also : null) || [];
  list("violations", rest);
  const vh = byTest("violations-h");
  if (vh) vh.hidden = rest.length === 0;
  const fx = byTest("effects");
  if (!fx) return;
  const effects = o ? o.effects || [] : [];
  fx.hidden = effects.length === 0;
  fx.innerHTML = effects.length === 0 ? "" : `<h3>What the receiver did: ${effects.length} effect${effects.length === 1 ? "" : "s"}</h3><ol>${effects.map((e) =>
    `<li class="${e.zombie ? "zombie" : ""}" data-from="${esc(e.from)}"><span class="chip w-${esc(e.from)}" aria-hidden="true">${esc(e.from)}</span> ✉ epoch ${e.epoch} <small>(${esc((W.badges[e.badge] || {}).label || e.decision)})</small></li>`).join("")}</ol>`;
}

/** Fill the article's table with this run's outcome, cell by cell, in the server's words. */
export function renderOutcome(run) {
  renderLists(run);
  for (const tr of document.querySelectorAll('[data-testid="outcome"] tbody tr')) {
    tr.classList.toggle("current", tr.dataset.ordering === run.ordering);
  }
  const o = run.outcome;
  const v = byTest("verdict");
  if (!o) {
    if (run.report) {
      v.textContent = run.report.headline || run.report.verdict;
      v.dataset.state = run.report.mark;
    } else if (run.id) {
      v.textContent = run.ended ? (run.error ? run.error.message : W.stops[run.stopReason] || W.phases[run.phase] || "") : W.phases[run.phase] || "";
      v.dataset.state = "pending";
    }
    return;
  }
  for (const cell of o.table || []) {
    const td = byTest(`outcome-${o.ordering}-${cell.column}`);
    if (!td) continue;
    const m = markOf(cell.mark);
    const exp = td.querySelector(".expected");
    td.dataset.ok = String(!!cell.as_correct);
    td.innerHTML = `<span class="got"><span class="mark ${esc(m.tone)}" aria-hidden="true">${esc(m.sign)}</span> ${esc(cell.words)}<span class="sr-only"> (${esc(m.word)})</span></span>`;
    if (exp) td.appendChild(exp);
    if (!cell.as_correct && exp) exp.classList.add("shown");
  }
  const m = markOf(o.mark);
  v.dataset.state = o.mark;
  v.innerHTML = `<span class="mark ${esc(m.tone)}" aria-hidden="true">${esc(m.sign)}</span> ${esc(o.headline || o.verdict)}`;
}

/** Reset the verdict, and the table's cells to the correct build's values. */
export function clearOutcome() {
  const v = byTest("verdict");
  v.textContent = "No run yet.";
  v.dataset.state = "none";
  for (const id of ["reveal", "violations"]) { const el = byTest(id); if (el) el.textContent = ""; }
  const fx = byTest("effects");
  if (fx) { fx.hidden = true; fx.textContent = ""; }
  for (const td of document.querySelectorAll('[data-testid="outcome"] td')) {
    const exp = td.querySelector(".expected");
    td.textContent = "";
    delete td.dataset.ok;
    if (exp) { exp.classList.remove("shown"); td.appendChild(exp); }
  }
}

// ---- connection ------------------------------------------------------------

export function renderConnection(st) {
  const el = byTest("connection");
  el.dataset.state = st.state;
  const words = {
    connecting: "Connecting…",
    reconnecting: "Connection lost: reconnecting…",
    behind: `Catching up: ${st.behind} behind`,
    live: st.reconnects ? `● Live · reconnected, caught up ${st.caughtUp} event${st.caughtUp === 1 ? "" : "s"}` : "● Live",
    offline: "Offline: this session has ended",
  };
  el.textContent = words[st.state] || st.state;
}
