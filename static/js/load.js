// load.js — the load lab: many real worker processes frozen at random past
// their lease, once per queue style in each of several rounds. It draws,
// from the server's load events alone, two charts of its own (SVG, no
// library): jobs done per second, and the zombie writes that landed in the
// row and at the receiver, each style over its own time; a table in which
// each live count has beside it the invariant checker's count that must
// equal it; and the verdict in the server's words.

import { byTest, esc } from "./dom.js";
import { W } from "./words.js";

const SVG = "http://www.w3.org/2000/svg";
const num = new Intl.NumberFormat("en");
// The drawing's height and margins, and its words' size: bigger when the
// page is projected (present mode), where no text is under 20 px.
const present = () => document.body.classList.contains("present");
const geometry = () => (present() ? { H0: 300, PAD: { l: 70, r: 16, t: 14, b: 40 }, fs: 20 } : { H0: 190, PAD: { l: 40, r: 12, t: 10, b: 26 }, fs: 11 });

const styleName = (s) => (W.styles && W.styles[s]) || s;

/** An axis's top at or above v: four whole, round steps. */
function niceTop(v) {
  const step = Math.max(v, 1) / 4;
  const p = 10 ** Math.floor(Math.log10(step));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= step && Number.isInteger(m * p)) return 4 * m * p;
  return 40 * p;
}

function el(name, attrs, text) {
  const n = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, String(v));
  if (text !== undefined) n.textContent = text;
  return n;
}

export class LoadLab {
  constructor() { this.clear(); }

  /**
   * Start a load lab from form with send (the page's command sender): its
   * errors in the lab's status line; when the server cannot run one, the
   * latest recorded lab replayed instead.
   */
  bindForm(form, send) {
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      this.stopReplay();
      this.asked();
      send({ action: "load", workers: Number(form.elements.workers.value), jobs: Number(form.elements.jobs.value) }, {
        busy: (why) => this.playRecording(why),
        say: (msg) => {
          if (!msg) return;
          this.clear();
          this.draw();
          byTest("load-status").textContent = msg;
        },
      });
    });
  }

  /** When the server cannot run a load lab: the latest recorded one, replayed. */
  async playRecording(why) {
    let rec;
    try {
      const res = await fetch("/api/recordings/load");
      rec = await res.json();
      if (!res.ok) throw new Error(rec.error || `HTTP ${res.status}`);
    } catch (err) {
      this.clear();
      this.draw();
      byTest("load-status").textContent = `${why}; and no recorded load lab could be fetched (${err.message}).`;
      return;
    }
    const when = rec.seed ? "a lab recorded when this server was built" : `a lab recorded ${new Date(rec.recorded).toLocaleString()}`;
    this.replay(rec, `The server cannot run a load lab right now (${why.replace(/[.;]\s.*$/, "")}), so here is ${when}: its counts are the real ones, replayed faster.`);
  }

  clear() {
    this.id = "";
    this.config = null;
    this.styles = new Map(); // name -> {ticks: [{t, rate, row, rcv}], tally, result, ended}
    this.now = null; // {style, round, position} of the latest word
    this.phase = "none"; // none | asked | started | finished | stopped
    this.verdict = "";
    this.message = "";
    this.recorded = null; // the recording being played, if any
  }

  /** Say a lab was asked for, before the server's first word. */
  asked() {
    this.clear();
    this.phase = "asked";
    this.draw();
  }

  /** Whether an event is the load lab's; if so it is taken and true returned. */
  onEvent(e) {
    const l = e.load;
    if (!l) return false;
    if (l.phase === "started") {
      const recorded = this.recorded;
      this.clear();
      this.recorded = recorded;
      this.id = e.run;
      this.config = l.config;
      this.phase = "started";
      for (const s of l.config.styles) this.styles.set(s, { ticks: [], tally: null, result: null, ended: false, running: false });
    } else if (e.run !== this.id) {
      return true; // an earlier lab's last word
    }
    const st = l.style ? this.styles.get(l.style) : null;
    if (st && l.round) this.now = { style: l.style, round: l.round, position: l.position };
    if (l.phase === "tick" && st && l.tally) {
      const t = l.tally;
      st.tally = t;
      st.running = true; // its checker's counts wait for the round's end
      st.ticks.push({ t: t.elapsed_ms / 1000, rate: t.per_second, row: t.late_row, rcv: t.late_receiver });
    } else if ((l.phase === "round_done" || l.phase === "style_done") && st && l.result) {
      st.result = l.result;
      st.tally = l.result.tally;
      st.ended = l.phase === "style_done";
      st.running = false;
    } else if (l.phase === "finished") {
      this.phase = "finished";
      this.verdict = l.verdict || e.text;
    } else if (l.phase === "stopped") {
      this.phase = "stopped";
      this.message = e.text;
    }
    this.draw();
    return true;
  }

  draw() {
    this.drawStatus();
    this.drawCharts();
    this.drawTable();
    const v = byTest("load-verdict");
    v.textContent = this.phase === "finished" ? this.verdict : "";
    v.dataset.state = this.phase === "finished" ? "done" : "none";
    const rec = byTest("load-recorded");
    rec.hidden = !this.recorded;
    if (this.recorded) rec.textContent = this.recorded.note;
  }

  drawStatus() {
    const s = byTest("load-status");
    s.dataset.phase = this.phase;
    if (this.phase === "asked") { s.textContent = "Starting the load lab…"; return; }
    if (this.phase === "stopped") { s.textContent = this.message; return; }
    if (this.phase !== "started") { s.textContent = ""; return; }
    const rounds = this.config.rounds || 1;
    if (!this.now) { s.textContent = `Round 1 of ${rounds}: filling the queue and starting ${this.config.workers} workers…`; return; }
    const { style, round, position } = this.now;
    const t = this.styles.get(style).tally;
    s.textContent = `Round ${round} of ${rounds}, style ${position} of ${this.styles.size}, ${styleName(style)}: ` +
      (t ? `${num.format(t.done)} of ${num.format(this.config.jobs)} jobs done over its rounds so far, ${num.format(t.stalls)} stalls.` : "starting…");
  }

  drawCharts() {
    let maxT = 5, maxRate = 0, maxZ = 0;
    for (const v of this.styles.values()) {
      for (const p of v.ticks) {
        maxT = Math.max(maxT, p.t);
        maxRate = Math.max(maxRate, p.rate);
        maxZ = Math.max(maxZ, p.row, p.rcv);
      }
    }
    maxT = Math.ceil(maxT);
    this.chart(byTest("load-chart-rate"), maxT, niceTop(maxRate * 1.05), [["rate", ""]], "jobs/s");
    this.chart(byTest("load-chart-zombie"), maxT, niceTop(maxZ), [["row", "row"], ["rcv", "rcv"]], "writes");
    const legend = byTest("load-legend");
    legend.innerHTML = [...this.styles.keys()].map((s) => `<li class="st-${esc(s)}"><span class="sw" aria-hidden="true"></span>${esc(styleName(s))}</li>`).join("");
  }

  chart(svg, maxT, maxY, series, unit) {
    svg.replaceChildren();
    // One unit of the drawing is one pixel on screen: its words stay
    // readable on a phone and sharp on a projector.
    const { H0, PAD, fs } = geometry();
    const W0 = Math.max(260, Math.round(svg.getBoundingClientRect().width) || 600);
    svg.setAttribute("viewBox", `0 0 ${W0} ${H0}`);
    const w = W0 - PAD.l - PAD.r, h = H0 - PAD.t - PAD.b;
    const x = (t) => PAD.l + (t / maxT) * w;
    const y = (v) => PAD.t + h - (v / maxY) * h;
    for (let i = 0; i <= 4; i++) {
      const v = (maxY / 4) * i;
      svg.append(el("line", { class: "grid", x1: PAD.l, x2: PAD.l + w, y1: y(v), y2: y(v) }));
      svg.append(el("text", { class: "tick", x: PAD.l - 6, y: y(v) + fs / 3, "text-anchor": "end" }, num.format(Math.round(v))));
    }
    const stepT = [1, 2, 5, 10, 20, 30, 60].find((s) => (maxT / s) * fs * 4.4 <= w) || 60;
    for (let t = 0; t <= maxT; t += stepT) {
      svg.append(el("text", { class: "tick", x: x(t), y: PAD.t + h + fs * 1.45, "text-anchor": "middle" }, `${t} s`));
    }
    svg.append(el("text", { class: "unit", x: PAD.l + 6, y: PAD.t + fs }, unit));
    for (const [name, v] of this.styles) {
      if (v.ticks.length === 0) continue;
      for (const [key, kind] of series) {
        const pts = [[0, 0], ...v.ticks.map((p) => [p.t, p[key]])];
        const d = pts.map(([t, val]) => `${x(t).toFixed(1)},${y(val).toFixed(1)}`).join(" ");
        svg.append(el("polyline", { class: `line st-${name}${kind ? " " + kind : ""}`, points: d, "data-style": name, "data-series": key }));
      }
    }
  }

  drawTable() {
    const body = byTest("load-table").tBodies[0];
    const dash = "–";
    const cell = (k, v, cls = "") => `<td data-k="${k}"${cls ? ` class="${cls}"` : ""}>${v}</td>`;
    // A checker's count, beside the live count it must equal, marked when
    // not; while a style's round runs, its checker has not read it yet.
    const pair = (k, live, checked, running, bad) =>
      cell(k, live === null ? dash : num.format(live), "live") +
      cell(`${k}-check`, running ? "…" : checked === null ? dash : num.format(checked) + (bad ? ` <span class="bad" title="not the live count">≠</span>` : ""), "check");
    body.innerHTML = [...this.styles.entries()].map(([name, v]) => {
      const t = v.tally, r = v.result;
      const sp = r && r.throughput;
      const rate = sp ? `${num.format(Math.round(sp.median))} <span class="range">(${num.format(Math.round(sp.min))}–${num.format(Math.round(sp.max))})</span>`
        : t && t.done > 0 ? num.format(Math.round((t.done / Math.max(t.elapsed_ms, 1)) * 1000)) : dash;
      return `<tr class="st-${esc(name)}" data-testid="load-row-${esc(name)}" data-ended="${v.ended ? "1" : ""}">` +
        `<th scope="row"><span class="sw" aria-hidden="true"></span>${esc(styleName(name))}</th>` +
        cell("done", t ? `${num.format(t.done)} of ${num.format(this.config.jobs)}` : dash, "wide") +
        cell("rate", rate, "rate") +
        cell("stalls", t ? num.format(t.stalls) : dash, "wide") +
        pair("row", t ? t.late_row : null, r ? r.check.stale_writes : null, v.running, r && r.check.stale_writes !== r.tally.late_row) +
        pair("rcv", t ? t.late_receiver : null, r ? r.check.older_accepted : null, v.running, r && r.check.older_accepted !== r.tally.late_receiver) +
        cell("zombie", r ? num.format(r.check.zombie_result) : dash) +
        "</tr>";
    }).join("");
  }

  /** Replay a recorded lab's events, its gaps shortened, in place of a live one. */
  async replay(rec, note) {
    this.clear();
    this.recorded = { note, seed: !!rec.seed, recorded: rec.recorded };
    this.phase = "asked";
    this.draw();
    const token = (this.replaying = {});
    let last = null;
    for (const e of rec.events || []) {
      if (this.replaying !== token) return; // a newer lab or replay took over
      const at = Date.parse(e.at);
      if (last !== null) await new Promise((res) => setTimeout(res, Math.min(Math.max(at - last, 0), 150)));
      last = at;
      this.onEvent(e);
    }
  }

  /** Stop a replay, if one plays. */
  stopReplay() { this.replaying = null; }

  /** The lab as the page shows it, for tests. */
  state() {
    const styles = {};
    for (const [name, v] of this.styles) styles[name] = { ticks: v.ticks.length, tally: v.tally, result: v.result, ended: v.ended };
    return { id: this.id, phase: this.phase, verdict: this.verdict, message: this.message, recorded: !!this.recorded, styles };
  }
}
