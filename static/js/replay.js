// replay.js — a recorded run, replayed from its event log alone: in the
// exported HTML file (offline, no server) and for recordings the page plays
// when the live demo is busy. The same fold and the same drawing as live.

import { fold, apply, newRun, verdictWords } from "./model.js";
import { byTest } from "./dom.js";
import { Timeline, renderLanes, renderOutcome, clearOutcome, lanes } from "./view.js";
import { setWords } from "./words.js";

/**
 * Player replays a list of events into a fresh run, at their own pace
 * (gaps capped so a long lease does not stall the story), or all at once.
 */
export class Player {
  constructor({ summary, events, timeline, onDraw, speed = 1 }) {
    this.summary = summary;
    this.events = events;
    this.timeline = timeline;
    this.onDraw = onDraw;
    this.speed = speed;
    this.pos = 0;
    this.timer = 0;
    this.run = newRun(summary);
    this.infos = [];
  }

  /** Jump to position i (events[0..i) folded) and redraw. */
  seek(i) {
    this.stop();
    const n = Math.max(0, Math.min(i, this.events.length));
    const f = fold(this.summary, this.events, n);
    this.run = f.run;
    this.infos = f.rows;
    this.pos = n;
    this.timeline.setLanes(lanes(fold(this.summary, this.events).run));
    this.timeline.redraw(this.events.slice(0, n), this.infos, Infinity);
    this.onDraw(this);
  }

  /** Play from the current position, one event at a time. */
  play() {
    this.stop();
    const step = () => {
      if (this.pos >= this.events.length) { this.timer = 0; this.onDraw(this); return; }
      const e = this.events[this.pos];
      const info = apply(this.run, e);
      this.infos.push(info);
      this.timeline.append(e, info, this.pos);
      this.pos++;
      this.onDraw(this);
      const next = this.events[this.pos];
      const gap = next && next.at && e.at ? Date.parse(next.at) - Date.parse(e.at) : 0;
      this.timer = setTimeout(step, Math.min(1500, Math.max(30, gap)) / this.speed);
    };
    step();
  }

  stop() {
    if (this.timer) clearTimeout(this.timer);
    this.timer = 0;
  }

  playing() { return this.timer !== 0; }
}

/** Start the standalone replay page (the exported HTML file). */
export function startReplayPage() {
  const data = JSON.parse(document.getElementById("fencelab-replay").textContent);
  setWords(data.scenarios.words);
  const tl = new Timeline(byTest("timeline"));
  const scrub = byTest("scrub");
  const draw = (p) => {
    renderLanes(byTest("lanes"), p.run, { canDrive: false, scrubbing: true });
    if (p.run.narration) byTest("narration").textContent = p.run.narration;
    if (p.run.outcome) renderOutcome(p.run); else clearOutcome();
    scrub.max = String(p.events.length);
    scrub.value = String(p.pos);
    byTest("scrub-pos").textContent = `event ${p.pos} of ${p.events.length}`;
    byTest("play").textContent = p.playing() ? "Pause" : "Play";
  };
  const player = new Player({ summary: data.summary, events: data.events, timeline: tl, onDraw: draw });
  player.seek(data.events.length);
  byTest("play").addEventListener("click", () => {
    if (player.playing()) { player.stop(); draw(player); return; }
    if (player.pos >= player.events.length) player.seek(0);
    player.play();
  });
  scrub.addEventListener("input", () => player.seek(Number(scrub.value)));
  document.addEventListener("keydown", (ev) => {
    if (ev.key === "ArrowLeft") player.seek(player.pos - 1);
    if (ev.key === "ArrowRight") player.seek(player.pos + 1);
    if (ev.key === " ") { ev.preventDefault(); byTest("play").click(); }
  });
  window.fencelab = {
    ready: true,
    state: () => ({ replay: true, run: data.summary.id, events: data.events.length, pos: player.pos,
      outcome: player.run.outcome, verdict: verdictWords(player.run) || null, errors: [] }),
  };
}
