// lesson.js — the guided lesson for a classroom: the article's story in its
// order (predict with leases alone, the pieces, both orderings, break one
// guard at a time, what fencing does not do). The presenter steps with
// PageDown, a student's phone with its Next and Back buttons or a swipe
// (bindLessonTaps); where a step waits for something real — a lease running out on
// the database clock, a verdict, an experiment's answer — the lesson waits
// for that very event before it goes on. Every chapter starts clean.


const verdict = (e) => !!e.verdict;
const bReady = (e) => !!e.checkpoint && e.actor === "B" && e.checkpoint.name === "claim";
const batchDone = (name) => (e) => !!e.batch && e.batch.name === name && e.batch.phase === "finished";
const auto = { mode: "auto", pace_ms: 400, lease_ms: 1000 };

/**
 * The lesson's chapters; aloneBroken is the leases-alone style's guards,
 * and limitRun(id) the command of a "What fencing does not do" button on
 * the page (its data-run), so the lesson runs exactly what the page does.
 * Each step says one sentence.
 */
export function chapters(aloneBroken, limitRun) {
  const run = (ordering, extra = {}) => ({ action: "run", ordering, ...auto, ...extra });
  return [
    {
      id: "predict", title: "Predict",
      steps: [
        { say: () => "Read the question under Predict, and pick one of its three answers before anything runs." },
        { say: () => "Now it runs for real with leases alone: a claim with a lease, and no token checked anywhere.",
          cmd: run("new-owner-first", { broken: aloneBroken }), wait: verdict, waiting: "A freezes, its lease runs out, B takes over, A wakes while B is still working…" },
        { say: () => "That is the zombie: with leases alone its late commit goes through." },
      ],
    },
    {
      id: "build-up", title: "The pieces",
      steps: [
        { say: () => "Two real worker processes, A and B, share one job row in Postgres, under a 3-second lease on the database's clock.", cmd: { action: "run", ordering: "zombie-first", mode: "step", lease_ms: 3000 },
          wait: bReady, waiting: "Starting the two workers…" },
        { say: () => "A claims the job in one UPDATE with FOR UPDATE SKIP LOCKED, and the epoch, the fencing token, goes from 0 to 1.", cmd: { action: "step" },
          wait: (e) => !!e.sql && e.sql.op === "claim" && e.sql.result === "ok" && e.actor === "A" },
        { say: () => "A freezes with SIGSTOP: the process really stops, and its lease heartbeat with it.", cmd: { action: "step" },
          wait: (e) => !!e.process && e.actor === "A" && e.process.change === "stopped" },
        { say: () => "Now the lease runs out on the database clock, for real, while A has no idea that time is passing.", cmd: { action: "step" },
          wait: (e) => !!e.lease && e.lease.change === "expired", waiting: "Waiting for the lease to run out on the database clock…" },
        { say: () => "B claims the job and the epoch goes up to 2, while A still believes it holds epoch 1.", cmd: { action: "step" },
          wait: (e) => !!e.sql && e.sql.op === "claim" && e.sql.result === "ok" && e.actor === "B" },
        { say: () => "That is the set-up of every zombie story: B is still working when A wakes up, and next we see who reaches the receiver first." },
      ],
    },
    { id: "new-owner-first", title: "The new owner reaches the receiver first", run: { ordering: "new-owner-first", mode: "step", lease_ms: 2000 } },
    { id: "zombie-first", title: "The zombie reaches the receiver first", run: { ordering: "zombie-first", mode: "step", lease_ms: 2000 } },
    {
      id: "break-a-guard", title: "Break one guard at a time",
      steps: [
        { say: () => "Remove AND epoch = :epoch from the compare-and-set, and run both orderings.", cmd: { action: "batch", name: "epoch-check" },
          wait: batchDone("epoch-check"), waiting: "Running both orderings…" },
        { say: () => "Now give both workers one name, as a restarted pod keeps its hostname, and run them again.", cmd: { action: "batch", name: "epoch-check-same-identity" },
          wait: batchDone("epoch-check-same-identity"), waiting: "Running both orderings…" },
        { say: () => "Put the epoch check back, and remove it from the receiver instead.", cmd: { action: "batch", name: "receiver-check" },
          wait: batchDone("receiver-check"), waiting: "Running both orderings…" },
      ],
    },
    {
      id: "limits", title: "What fencing does not do",
      steps: [
        { say: () => "The receiver must cooperate: one that ignores the epoch takes the zombie's late call over the new owner's.", cmd: limitRun("limit-receiver-ignores"), wait: verdict, waiting: "Running…" },
        { say: () => "The remedy for a third party is a stable key it deduplicates on, which allows at most one effect per job.", cmd: limitRun("limit-receiver-keyed"), wait: verdict, waiting: "Running…" },
        { say: () => "The zombie never wins, but it may be heard: when it reaches the receiver first, its call is accepted before it is superseded.", cmd: limitRun("limit-heard-effects"), wait: verdict, waiting: "Running…" },
        { say: () => "The fix is an outbox, written with the compare-and-set and sent only after the commit, so the zombie's effect never happens.", cmd: limitRun("limit-heard-outbox"), wait: verdict, waiting: "Running…" },
        { say: () => "And leases are judged on the database's clock: a worker 2 s fast, judging by its own, takes a lease that is still live.", cmd: limitRun("limit-clock-skew"), wait: verdict, waiting: "Running…" },
      ],
    },
  ];
}

/**
 * Lesson steps through the chapters. send(cmd) drives the session and
 * resolves when the server has answered; clear() ends the run on screen
 * and empties the page, at the start of each chapter; onEvent sees every
 * event; a step with a wait holds the lesson until an event satisfies it.
 */
export class Lesson {
  constructor({ chapter, aloneBroken, limitRun, send, clear, runSteps, onBatch, onChange }) {
    this.chapters = chapters(aloneBroken, limitRun);
    const i = this.chapters.findIndex((c) => c.id === chapter);
    this.ci = i < 0 ? 0 : i;
    this.index = -1;
    this.send = send;
    this.clear = clear;
    this.runSteps = runSteps; // () => the current run's steps, for a chapter that plays one
    this.onChange = onChange;
    this.onBatch = onBatch; // (batch) => a finished batch's run put on the stage
    this.waiting = "";
    this.wait = null;
    this.note = "";
    this.busy = false;
    this.waitedFor = [];
  }

  get chapter() { return this.chapters[this.ci]; }

  steps() {
    const c = this.chapter;
    if (!c.run) return c.steps;
    const st = (this.runSteps() || []).map((s) => ({ say: () => s.say, cmd: { action: "step" } }));
    return [{ say: () => `${c.title}, with two workers again: press Next to play each step.`, cmd: { action: "run", ...c.run },
      wait: bReady, waiting: "Starting the two workers…" }, ...st,
      { say: () => "The run is over, and its verdict is under What happened: where did the zombie's call and commit go?" }];
  }

  text() {
    if (this.index < 0) return `${this.chapter.title}: press Next to begin.`;
    const s = this.steps()[this.index];
    return s ? s.say() : "";
  }

  /** Whether this is the lesson's first step: nothing comes before it. */
  atStart() {
    return this.ci === 0 && this.index < 0;
  }

  /** Whether this is the lesson's last step: nothing comes after it. */
  atEnd() {
    return this.ci === this.chapters.length - 1 && this.index === this.steps().length - 1;
  }

  /** Go on, unless the lesson is waiting for something real. */
  async next() {
    if (this.waiting || this.busy) return false;
    const steps = this.steps();
    if (this.index + 1 >= steps.length) {
      if (this.ci + 1 >= this.chapters.length) return false;
      this.ci++;
      this.index = -1;
      this.note = "";
      this.onChange();
      return true;
    }
    if (this.index < 0) {
      this.busy = true;
      await this.clear(); // every chapter starts from a clean page
      this.busy = false;
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
      // A run's verdict is under What happened, in view beside the stage;
      // a batch's answer is told nowhere near it, so the lesson says it.
      if (e.batch) {
        this.note = e.batch.answer;
        if (this.onBatch) this.onBatch(e.batch);
      }
      this.onChange();
    }
  }

  state() {
    return { chapter: this.chapter.id, chapterIndex: this.ci, chapters: this.chapters.length, index: this.index, steps: this.steps().length,
      waiting: this.waiting, busy: this.busy, ready: !this.waiting && !this.busy, atStart: this.atStart(), atEnd: this.atEnd(),
      text: this.text(), note: this.note, waitedFor: this.waitedFor.slice() };
  }
}

/** What renderLesson last drew in each panel. */
const drawn = new WeakMap();

/** Render the lesson panel. */
export function renderLesson(root, lesson, esc) {
  // The chapters by number, each titled: the current one's title is the heading.
  const links = lesson.chapters.map((c, i) => `<a href="/?lesson=${c.id}&present=1" title="${esc(c.title)}" aria-label="Chapter ${i + 1}: ${esc(c.title)}"${i === lesson.ci ? ' aria-current="step"' : ""}>${i + 1}</a>`).join(" ");
  const total = lesson.steps().length;
  const hint = lesson.waiting ? `<p class="waiting" data-testid="lesson-waiting">◔ ${esc(lesson.waiting)}</p>`
    : lesson.busy ? `<p class="hint">…</p>`
    : lesson.atEnd() ? `<p class="hint" data-testid="lesson-end">The end of the lesson · Back, PageUp or ← to go back</p>`
    : `<p class="hint">Next, PageDown, → or a swipe to the left to go on · Back, PageUp or ←</p>`;
  // Buttons to tap, as large as a finger (44 px): a phone has no PageDown.
  // They stay in place, disabled, while the lesson waits for something real.
  const still = lesson.waiting || lesson.busy;
  const buttons = `<div class="lesson-steps">
    <button type="button" data-testid="lesson-prev" data-lesson="prev"${still || lesson.atStart() ? " disabled" : ""}>← Back</button>
    <button type="button" class="primary" data-testid="lesson-next" data-lesson="next"${still || lesson.atEnd() ? " disabled" : ""}>Next →</button></div>`;
  const html = `<div class="lesson-head"><h2>${lesson.ci + 1}. ${esc(lesson.chapter.title)} <small>${Math.max(0, lesson.index + 1)} / ${total}</small></h2>
    <nav aria-label="Chapters">${links}</nav></div>
    <p class="say" data-testid="lesson-text">${esc(lesson.text())}</p>
    ${lesson.note ? `<p class="note" data-testid="lesson-note">${esc(lesson.note)}</p>` : ""}
    ${buttons}
    ${hint}`;
  // The page redraws on every event; the panel is drawn anew only when it
  // changed. A tap is a press and a release on the same button: a panel
  // redrawn between the two (an event arriving, as they do on a busy
  // phone) lost the tap, the click going to the panel, not the button.
  if (drawn.get(root) === html) return;
  drawn.set(root, html);
  // A re-render keeps the focus on the button it was on (the keyboard's
  // Enter, pressed again, goes on).
  const focused = root.contains(document.activeElement) ? document.activeElement.dataset.lesson : "";
  root.innerHTML = html;
  if (focused) root.querySelector(`[data-lesson="${focused}"]`)?.focus({ preventScroll: true });
}

/** The shortest horizontal swipe that steps, in CSS pixels. */
const SWIPE = 60;

/**
 * Taps and swipes on the lesson panel (root, drawn anew by renderLesson):
 * its Next and Back buttons, and a swipe to the left (next) or the right
 * (back) that is more across than down. act has stepForward and stepBack,
 * as the keys do.
 */
export function bindLessonTaps(root, act) {
  root.addEventListener("click", (ev) => {
    const b = ev.target instanceof Element ? ev.target.closest("button[data-lesson]") : null;
    if (!b || b.disabled) return;
    if (b.dataset.lesson === "next") act.stepForward();
    else act.stepBack();
  });
  let start = null;
  root.addEventListener("touchstart", (ev) => {
    start = ev.touches.length === 1 ? { x: ev.touches[0].clientX, y: ev.touches[0].clientY } : null;
  }, { passive: true });
  root.addEventListener("touchend", (ev) => {
    if (!start || ev.changedTouches.length !== 1) return;
    const dx = ev.changedTouches[0].clientX - start.x;
    const dy = ev.changedTouches[0].clientY - start.y;
    start = null;
    if (Math.abs(dx) < SWIPE || Math.abs(dx) < 2 * Math.abs(dy)) return;
    if (dx < 0) act.stepForward();
    else act.stepBack();
  }, { passive: true });
}
