// lesson.js — the guided lesson for a classroom: the article's story in
// chapters (predict, the pieces, both orderings, one guard at a time, what
// fencing does not do). The presenter steps with PageDown; where a step
// waits for something real — a lease running out on the database clock —
// the narration waits for that very event before it goes on.

const verdict = (e) => !!e.verdict;
const bReady = (e) => !!e.checkpoint && e.actor === "B" && e.checkpoint.name === "claim";

export const CHAPTERS = [
  {
    id: "predict", title: "Predict",
    steps: [
      { say: "A worker claims a job under a lease. It freezes — a GC pause, a hung call, a closed laptop lid — and its lease runs out. Another worker takes the job over. Then the first one wakes up and carries on as if nothing happened. What happens to its work?" },
      { say: "Three answers: its result lands over the new owner's work; it is refused and the new owner's result stands; or the job is done twice and both results count somewhere. Pick one (on the right), then watch." },
    ],
  },
  {
    id: "build-up", title: "The pieces",
    steps: [
      { say: "Two real worker processes, A and B, and one job row in Postgres. The lease will be 3 seconds long, judged on the database's clock.", cmd: { action: "run", ordering: "zombie-first", mode: "step", lease_ms: 3000 },
        wait: bReady, waiting: "Starting the two workers…" },
      { say: "A claims the job, in one UPDATE with FOR UPDATE SKIP LOCKED. The epoch goes from 0 to 1: that number is the fencing token.", cmd: { action: "step" },
        wait: (e) => !!e.sql && e.sql.op === "claim" && e.sql.result === "ok" && e.actor === "A" },
      { say: "A freezes: SIGSTOP. The process really stops (its state is T), and its lease heartbeat stops with it.", cmd: { action: "step" },
        wait: (e) => !!e.process && e.actor === "A" && e.process.change === "stopped" },
      { say: "Now the lease runs out — on the database clock, for real. A has no idea that time is passing.", cmd: { action: "step" },
        wait: (e) => !!e.lease && e.lease.change === "expired", waiting: "Waiting for the lease to run out on the database clock…" },
      { say: "The lease has run out. B claims the job: the epoch goes up to 2. A still believes it holds epoch 1.", cmd: { action: "step" },
        wait: (e) => !!e.sql && e.sql.op === "claim" && e.sql.result === "ok" && e.actor === "B" },
      { say: "That is the set-up of every zombie story. Next: who reaches the receiver first." },
    ],
  },
  { id: "new-owner-first", title: "The new owner reaches the receiver first", run: { ordering: "new-owner-first", mode: "step", lease_ms: 2000 } },
  { id: "zombie-first", title: "The zombie reaches the receiver first", run: { ordering: "zombie-first", mode: "step", lease_ms: 2000 } },
  {
    id: "break-a-guard", title: "Break one guard at a time",
    steps: [
      { say: "Turn off the receiver's check: it now takes an older epoch over a newer one.", cmd: { action: "run", ordering: "new-owner-first", mode: "auto", pace_ms: 300, lease_ms: 1000, broken: ["receiver-check"] }, wait: verdict, waiting: "Running…" },
      { say: "Turn off the epoch increment: both claims hold the same token, so nobody can tell them apart.", cmd: { action: "run", ordering: "new-owner-first", mode: "auto", pace_ms: 300, lease_ms: 1000, broken: ["epoch-increment"] }, wait: verdict, waiting: "Running…" },
      { say: "Let the workers' own clocks judge leases, with B's clock 3 seconds fast: B takes a lease that is still live.", cmd: { action: "run", ordering: "clock-skew", mode: "auto", pace_ms: 300, lease_ms: 1000, skew_ms: 3000, broken: ["db-clock"] }, wait: verdict, waiting: "Running…" },
      { say: "Turn off the epoch check, and give B the zombie's own name (a restarted pod): the owner check can no longer tell them apart.", cmd: { action: "run", ordering: "zombie-first", mode: "auto", pace_ms: 300, lease_ms: 1000, broken: ["epoch-check"], same_identity: true }, wait: verdict, waiting: "Running…" },
    ],
  },
  {
    id: "limits", title: "What fencing does not do",
    steps: [
      { say: "Fencing does not stop the zombie from working. A still ran and still called the receiver: fencing only stops its writes from landing." },
      { say: "It protects only what checks the token. The job row checks it; the receiver checks it. An email sent or a card charged by a system that does not check is not protected." },
      { say: "The token must come from one place that only counts up — the job row here. A clock cannot be that place: clocks drift and disagree." },
      { say: "A lease is not a lock. Leases decide who should work; the fencing token decides whose writes count. Together they make a late write harmless, not impossible." },
    ],
  },
];

/**
 * Lesson steps through the chapters. send(cmd) drives the session and
 * resolves when the server has answered; onEvent sees every event; a step
 * with a wait holds the lesson until an event satisfies it.
 */
export class Lesson {
  constructor({ chapter, send, runSteps, onChange }) {
    const i = CHAPTERS.findIndex((c) => c.id === chapter);
    this.ci = i < 0 ? 0 : i;
    this.index = -1;
    this.send = send;
    this.runSteps = runSteps; // () => the current run's steps, for a chapter that plays one
    this.onChange = onChange;
    this.waiting = "";
    this.wait = null;
    this.note = "";
    this.busy = false;
    this.waitedFor = [];
  }

  get chapter() { return CHAPTERS[this.ci]; }

  steps() {
    const c = this.chapter;
    if (!c.run) return c.steps;
    const st = (this.runSteps() || []).map((s) => ({ say: s.say, cmd: { action: "step" } }));
    return [{ say: `${c.title}. Two workers again; press PageDown to play each step.`, cmd: { action: "run", ...c.run },
      wait: bReady, waiting: "Starting the two workers…" }, ...st,
      { say: "The run is over: the verdict is on the right. Where did the zombie's call and commit go?" }];
  }

  text() {
    if (this.index < 0) return `${this.chapter.title}. Press PageDown (or →) to begin.`;
    const s = this.steps()[this.index];
    return (s ? s.say : "") + (this.note ? ` ${this.note}` : "");
  }

  /** Go on, unless the lesson is waiting for something real. */
  async next() {
    if (this.waiting || this.busy) return false;
    const steps = this.steps();
    if (this.index + 1 >= steps.length) {
      if (this.ci + 1 >= CHAPTERS.length) return false;
      this.ci++;
      this.index = -1;
      this.note = "";
      this.onChange();
      return true;
    }
    this.index++;
    this.note = "";
    const s = steps[this.index];
    if (s.wait) {
      this.wait = s.wait;
      this.waiting = s.waiting || "Waiting for it to happen…";
    }
    this.onChange();
    if (s.cmd) {
      this.busy = true;
      const r = await this.send(s.cmd);
      this.busy = false;
      if (r === null) { this.wait = null; this.waiting = ""; this.note = "(That did not work: see the message.)"; }
    }
    this.onChange();
    return true;
  }

  prev() {
    if (this.waiting || this.busy) return;
    if (this.index >= 0) this.index--;
    else if (this.ci > 0) { this.ci--; this.index = this.steps().length - 1; }
    this.note = "";
    this.onChange();
  }

  onEvent(e) {
    if (this.wait && this.wait(e)) {
      this.wait = null;
      this.waiting = "";
      this.waitedFor.push(e.seq);
      if (e.verdict) this.note = `Verdict: ${(e.verdict.outcome || e.verdict.report || {}).verdict || ""}`;
      this.onChange();
    }
  }

  state() {
    return { chapter: this.chapter.id, index: this.index, waiting: this.waiting, busy: this.busy, ready: !this.waiting && !this.busy,
      text: this.text(), waitedFor: this.waitedFor.slice() };
  }
}

/** Render the lesson panel. */
export function renderLesson(root, lesson, esc) {
  const links = CHAPTERS.map((c, i) => `<a href="/?lesson=${c.id}&present=1"${i === lesson.ci ? ' aria-current="step"' : ""}>${i + 1}. ${esc(c.title)}</a>`).join(" ");
  const total = lesson.steps().length;
  root.innerHTML = `<h2>${lesson.ci + 1}. ${esc(lesson.chapter.title)} <small>${Math.max(0, lesson.index + 1)} / ${total}</small></h2>
    <p class="say" data-testid="lesson-text">${esc(lesson.text())}</p>
    ${lesson.waiting ? `<p class="waiting" data-testid="lesson-waiting">◔ ${esc(lesson.waiting)}</p>`
      : lesson.busy ? `<p class="hint">…</p>` : `<p class="hint">PageDown or → to go on · PageUp or ← to go back</p>`}
    <nav aria-label="Chapters">${links}</nav>`;
}
