// main.js — the playground page: the server's rendered state, then its
// events over the WebSocket; the session driven through its JSON API.
// window.fencelab exposes the page's state to tests and a host page.

import { Api, Stream, driveTokenKey, controlToken } from "./api.js";
import { apply, fold, newRun, isHeartbeat, verdictWords } from "./model.js";
import { byTest, esc } from "./dom.js";
import { Timeline, renderLanes, tickLeases, renderOutcome, clearOutcome, renderConnection, lanes } from "./view.js";
import { W, setWords } from "./words.js";
import { bindKeys } from "./keys.js";
import { Player } from "./replay.js";
import { setupFromForm, permalinkQuery, runCommand as commandOf, applySetup } from "./permalink.js";
import { Batches } from "./batches.js";
import { LoadLab } from "./load.js";
import * as predict from "./predict.js";
import { findRecording, recordingSummary, recordingNote } from "./recordings.js";
import * as host from "./embed.js";
import { sharing } from "./share.js";

const boot = JSON.parse(document.getElementById("fencelab-state").textContent);
const scenarios = boot.scenarios;
setWords(scenarios.words);
const sessionId = boot.session.id || ""; // none when the server was too busy to make one
const tokenKey = driveTokenKey(sessionId);

let token = controlToken(boot.token, tokenKey);

// A shared solution (#sol=) opens as the recipient's own copy, even from
// the sender's address bar (/s/<id>…): a session of its own.
if (sessionId && !token && location.pathname.startsWith("/s/") && new URLSearchParams(location.hash.slice(1)).has("sol")) {
  location.replace(`/${location.search}${location.hash}`);
  await new Promise(() => {});
}

const api = new Api(sessionId, token);
const initial = fold(boot.session.run || {}, boot.events);
const page = {
  role: token ? "driver" : "viewer",
  live: initial.run,
  infos: initial.rows,
  view: null, // the run on screen: the live one, or a replay
  scrub: null, // an index into view.run.events when scrubbing, else null
  runs: new Map((boot.session.runs || []).map((r) => [r.id, r])),
  oldRuns: new Set(),
  conn: { state: "connecting", behind: 0, caughtUp: 0, reconnects: 0 },
  errors: [],
  offset: 0, // database clock minus this one, from live events
  dirty: true,
  sideDirty: false,
  csp: [],
  ignoredMessages: 0,
  recording: null, // the recording being played, when the live demo is busy
  alone: null, // the outcome of the latest run with leases alone: the prediction's answer
  fenced: null, // the outcome of the same run with fencing on, beside it
  predicting: false, // a leases-alone run asked for by the prediction is under way
  answerOwed: 0, // until when its answer, come, is kept in view as it is drawn (performance.now())
};
const params = new URLSearchParams(location.search);
page.view = { run: page.live, infos: page.infos, replay: false };

const timeline = new Timeline(byTest("timeline"));
const form = byTest("setup");
const batches = new Batches();
const loadLab = new LoadLab();
// Build it loads when opened, or at once for a link's #sol=.
let build = null;
const solHash = new URLSearchParams(location.hash.slice(1)).has("sol") ? location.hash : "";
let buildLoading = null;
function loadBuild() {
  buildLoading ||= import("./build.js")
    .then((m) => m.loadBuild({ root: byTest("build"), send, onChange: scheduleURL, hash: solHash, page, api, since: boot.session.last_seq }))
    .then((b) => { build = b; updateURL(); })
    .catch((err) => {
      buildLoading = null;
      byTest("build-body").textContent = `Build it could not be loaded: ${err.message}`;
    });
  return buildLoading;
}
byTest("build").addEventListener("toggle", () => { if (byTest("build").open) loadBuild(); });
// A session that has checked a reader's statements shows its check (build.js reads it back).
if (solHash || location.hash === "#build" || (!boot.embed && boot.session.runs?.some((r) => r.custom))) byTest("build").open = true;

// ---- URL: the session's own address, with the setup as a permalink ----------

function query(extra = {}) {
  return permalinkQuery(setupFromForm(form), scenarios.styles, { embed: boot.embed, present: boot.present, ...extra });
}

function updateURL() {
  const q = query();
  const sol = build ? build.hash() : solHash; // the reader's statements, when they are not the start
  byTest("permalink").href = `/?${q}${sol}`;
  const mine = byTest("build-link"); // a link to the reader's statements, to share
  if (mine) { mine.href = `/?${q}${sol}`; mine.hidden = !sol; }
  byTest("build-open").href = `/?${query({ embed: false })}${sol || "#build"}`; // a phone's embed: Build it on the full page
  const keep = ["lesson", "run"].filter((k) => params.get(k)).map((k) => `&${k}=${encodeURIComponent(params.get(k))}`).join("");
  if (sessionId) history.replaceState(null, "", `/s/${sessionId}?${q}${keep}${sol}`);
}

// Typing in an editor moves the address along, but not at every key.
let urlTimer = 0;
function scheduleURL() {
  clearTimeout(urlTimer);
  urlTimer = setTimeout(updateURL, 400);
}

// ---- drawing ----------------------------------------------------------------

function dbNow() { return Date.now() + page.offset; }

function scrubbing() { return page.scrub !== null; }

function shownRun() {
  if (!scrubbing()) return page.view.run;
  return fold(runInfo(page.view.run), page.view.run.events, page.scrub).run;
}

function runInfo(run) {
  return { id: run.id, ordering: run.ordering, mode: run.mode, lease_ms: run.leaseMs, pace_ms: run.paceMs, steps: run.steps, skew_ms: run.skewMs };
}

function drawAll() {
  page.dirty = false;
  page.sideDirty = false;
  const run = shownRun();
  timeline.setLanes(lanes(page.view.run));
  timeline.showHeartbeats = byTest("show-heartbeats").checked;
  timeline.redraw(page.view.run.events, page.view.infos, scrubbing() ? page.scrub : Infinity);
  drawSide(run);
  if (!scrubbing() && stick) {
    const tl = byTest("timeline");
    scrollTimeline(tl); // the newest events in view
  }
}

function setupWords(run) {
  const title = (W.orderings[run.ordering] || {}).title || run.ordering || "";
  const broken = run.broken || [];
  // A check's run ran the reader's statements: its guards are whatever
  // those keep, so it names none.
  const custom = run.custom || (page.runs.get(run.id) || {}).custom;
  const guards = custom ? "" : `; ${broken.length ? broken.map((g) => (W.guards[g] || {}).off || g).join(", ") : W.guards.none.off}`;
  const delivery = run.delivery && run.delivery !== "direct" ? `; ${W.deliveries[run.delivery] || run.delivery}` : "";
  const same = run.same_identity || run.sameIdentity ? `; ${W.same_identity}` : "";
  return `${title}${guards}${same}${delivery}`;
}

function drawSide(run) {
  renderLanes(byTest("lanes"), run, { canDrive: page.role === "driver" && !page.view.replay, scrubbing: scrubbing() });
  byTest("lanes").classList.toggle("replay", page.view.replay);
  const narration = byTest("narration");
  if (page.view.replay && run.id === "recording") narration.textContent = run.narration || `A recorded run (${setupWords(run)}).`;
  else if (page.view.replay) narration.textContent = `Replaying run ${run.id} (${setupWords(run)}). Press Back to live to return.`;
  else if (run.narration) narration.textContent = run.narration;
  else if (run.id && !run.ended) narration.textContent = run.mode === "free" ? "Free play: add jobs and workers; pause, resume and kill them." : "Starting…";
  if (!(run.outcome || run.report || run.ended)) clearOutcome();
  renderOutcome(run);
  drawControls(run);
  drawScrub();
  predict.drawPredict(page.alone, page.predicting);
  predict.drawCompare(page.alone, page.fenced, run.outcome);
  drawExports(run);
  if (lesson) lessonModule.renderLesson(byTest("lesson"), lesson, esc);
  fitStage();
  if (page.answerOwed) answerInView();
}

/**
 * On a projector the whole stage stays on the screen: the timeline takes
 * the room left under the lanes, so the newest event is in view with no
 * scrolling, whatever the lesson panel above it says. Elsewhere the
 * stylesheet sizes the timeline.
 */
function fitStage() {
  if (!boot.present || boot.embed || !matchMedia("(min-width: 1100px)").matches) return;
  const tl = byTest("timeline");
  const stage = byTest("stage");
  const below = parseFloat(getComputedStyle(stage).paddingBottom) + 2;
  const room = Math.floor(innerHeight - (tl.getBoundingClientRect().top + scrollY) - below);
  const h = `${Math.max(96, room)}px`;
  if (tl.style.maxHeight === h) return;
  tl.style.maxHeight = h;
  if (stick) tl.scrollTop = tl.scrollHeight;
}

function drawExports(run) {
  document.body.classList.toggle("idle", !run.id);
  document.body.classList.toggle("ran", !!run.id || !!page.alone);
  document.body.classList.toggle("answered", !!page.alone);
  document.body.classList.toggle("ended", !!run.id && !!(run.ended || run.outcome));
  // Once the class has started, the join box's QR code shrinks to a corner.
  if (run.id || page.alone || (lesson && (lesson.ci > 0 || lesson.index >= 0))) document.body.classList.add("started");
  const ex = byTest("exports");
  const ok = sessionId && run.id && run.id !== "recording" && (run.ended || run.outcome);
  ex.hidden = !ok;
  if (!ok) return;
  const id = encodeURIComponent(sessionId), r = encodeURIComponent(run.id);
  byTest("export-ndjson").href = `/api/sessions/${id}/events.ndjson?run=${r}`;
  byTest("export-sql").href = `/api/sessions/${id}/runs/${r}/transcript.sql`;
  byTest("export-html").href = `/s/${id}/runs/${r}/replay.html`;
}

function drawControls(run) {
  const live = !!liveRun();
  const driver = page.role === "driver";
  byTest("role").textContent = driver ? "You drive" : "You are watching";
  byTest("role").dataset.role = page.role;
  // With no session at all (the server was too busy), the setup and Run
  // still work: Run plays a recorded run of that setup.
  for (const el of form.querySelectorAll("input, select, button")) el.disabled = !driver && !!sessionId;
  byTest("step").disabled = !driver || (live && page.live.mode === "free");
  byTest("reset").disabled = !driver;
  byTest("back").disabled = page.view.run.events.length === 0;
  byTest("run").disabled = !driver && !!sessionId;
  byTest("run").textContent = !live ? "Run" : page.live.mode === "auto" ? (page.live.paused ? "Play" : "Pause") : page.live.mode === "step" ? "Next step" : "Run";
  // Beside Run: the run under way, or else what Run will run next (the
  // setup's form), never the last run's.
  const now = byTest("setup-now");
  // A watcher runs nothing: it is told the driver's run, or the last one.
  const next = driver || !sessionId;
  now.textContent = live ? `Now: ${setupWords(page.live)}` : next ? `Run next: ${setupWords(formRun())}`
    : page.live.id ? `Last run: ${setupWords(page.live)}` : "Waiting for the driver's first run";
  now.dataset.next = live ? "" : JSON.stringify(commandOf(setupFromForm(form)));
  for (const b of document.querySelectorAll("[data-batch], [data-run], [data-testid=predict-run], [data-testid=compare-run]")) b.disabled = !driver && !!sessionId;
  byTest("free-controls").hidden = !(live && page.live.mode === "free");
  byTest("skew-wrap").hidden = form.elements.ordering.value !== "clock-skew";
  byTest("mode-wrap").hidden = form.elements.ordering.value === "free-play";
  byTest("matrix-run").disabled = !driver;
  byTest("load-run").disabled = !driver && !!sessionId;
  for (const el of byTest("free-controls").querySelectorAll("button")) el.disabled = !driver;
  byTest("lease-out").textContent = `${(Number(form.elements.lease.value) / 1000).toFixed(1)} s`;
  const pace = Number(form.elements.pace.value);
  byTest("pace-out").textContent = pace === 0 ? "as fast as it goes" : `${(pace / 1000).toFixed(1)} s a step`;
  byTest("skew-out").textContent = `${(Number(form.elements.skew.value) / 1000).toFixed(1)} s`;
  void run;
}

function drawScrub() {
  const s = byTest("scrub");
  const n = page.view.run.events.length;
  s.max = String(n);
  s.value = String(scrubbing() ? page.scrub : n);
  s.disabled = n === 0;
  byTest("scrub-pos").textContent = scrubbing() ? `event ${page.scrub} of ${n}` : page.view.replay ? "end" : "live";
}

/** Set the form to a run's setup (its summary, as the API gives it). */
function showSetupOf(run) {
  applySetup(form, { ordering: run.ordering, mode: run.mode, broken: run.broken || [], same_identity: !!run.same_identity, delivery: run.delivery,
    lease_ms: run.lease_ms, pace_ms: run.mode === "auto" ? run.pace_ms : undefined, skew_ms: run.skew_ms || undefined });
}

function formRun() {
  const s = setupFromForm(form);
  return { ordering: s.ordering, broken: s.broken, delivery: s.delivery, same_identity: s.same };
}

// ---- the live feed for screen readers ------------------------------------------

function narrate(e) {
  if (isHeartbeat(e) || e.run_state || e.checkpoint || e.row) return;
  announce(e.text);
}

/** Say one sentence in the polite live feed. */
function announce(text) {
  const feed = byTest("live-feed");
  const p = document.createElement("p");
  p.textContent = text;
  feed.appendChild(p);
  while (feed.childElementCount > 6) feed.firstElementChild.remove();
}

// ---- events ---------------------------------------------------------------------

function startLiveRun(id) {
  if (page.live.id) page.oldRuns.add(page.live.id);
  page.live = newRun({ id });
  host.hold(true); // the frame never shrinks while a run plays: until its verdict
  page.infos = [];
  if (!page.view.replay) {
    page.view = { run: page.live, infos: page.infos, replay: false };
    page.scrub = null;
    clearOutcome();
  }
  page.dirty = true;
}

function onEvent(e, catchingUp) {
  if (e.at && !catchingUp) {
    const off = Date.parse(e.at) - Date.now();
    page.offset = page.offset === 0 ? off : Math.max(page.offset - 5, Math.min(page.offset, off)); // the least latency seen
  }
  if (e.run_state) {
    const info = e.run_state.info;
    // A watcher's form follows the driver's runs, so that its label and
    // its permalink say the setup it watches.
    if (page.role !== "driver" && !info.background && !info.custom && !page.runs.has(info.id) && !catchingUp) { showSetupOf(info); updateURL(); }
    page.runs.set(info.id, info);
  }
  if (e.note && e.note.code === "chapter") { teacherOpened(e); return; }
  if (e.note && e.note.code === "class-ended") { classEnded(e, catchingUp); return; }
  if (e.note && e.note.code === "class-run") { classRun(e, catchingUp); return; }
  // The lesson sees every event first: a chapter may wait on a batch's end,
  // or on a load lab's, which the page then takes and returns early for.
  if (lesson) lesson.onEvent(e);
  if (build) build.onEvent(e); // a check's batch and its runs, which Batches then takes as background runs
  // A check started elsewhere (the driver's, seen by a watcher) opens Build
  // it here, which reads the check back from the log and follows it.
  else if (e.batch && e.batch.name === "check" && !boot.embed && !catchingUp) byTest("build").open = true;
  if (e.load) {
    if (e.load.phase === "started") loadLab.stopReplay();
    loadLab.onEvent(e);
    if (e.load.phase === "finished") host.post("load", { verdict: e.load.verdict, results: e.load.results });
    return;
  }
  if (batches.onEvent(e)) {
    if (e.run && batches.cells.get(e.run)) host.post("matrix", { run: e.run, state: batches.cells.get(e.run).state });
    return;
  }
  if (e.verdict && e.verdict.outcome) takeOutcome(e.verdict.outcome);
  if (!e.run || page.oldRuns.has(e.run)) return;
  if (e.run !== page.live.id) startLiveRun(e.run);
  const info = apply(page.live, e);
  page.infos.push(info);
  if (!page.view.replay) {
    if (!document.hidden && !page.dirty && !scrubbing()) {
      const known = lanes(page.live);
      if (known.length !== timeline.lanes.length) page.dirty = true;
      else {
        timeline.append(e, info, page.live.events.length - 1);
        page.sideDirty = true;
        if (!catchingUp) maybeScroll();
      }
    } else page.dirty = true;
  }
  if (!catchingUp) narrate(e);
  if (e.verdict) {
    host.hold(false);
    host.post("verdict", { run: e.run, safe: e.verdict.safe, verdict: verdictWords(page.live), outcome: e.verdict.outcome || e.verdict.report });
    maybeScroll(true);
  }
}

/** The prediction's answer, drawn, into view: the reader's pick beside what the run showed. */
function answerInView() {
  if (performance.now() > page.answerOwed) { page.answerOwed = 0; return; }
  const box = byTest("compare");
  if (boot.embed || box.hidden) return;
  const r = box.getBoundingClientRect();
  if (r.top >= 0 && r.bottom <= innerHeight) return;
  // At once: later layout undid a smooth scroll.
  box.scrollIntoView({ block: r.height > innerHeight ? "start" : "nearest" });
}

for (const ev of ["wheel", "touchstart", "keydown"]) addEventListener(ev, () => { page.answerOwed = 0; }, { passive: true });

/** Keep an outcome that answers the prediction, or sits beside it. */
function takeOutcome(o) {
  if (predict.leasesAlone(o, scenarios.styles)) {
    page.alone = o;
    page.fenced = null;
    // Kept in view (drawSide) while the words above it come in, until the reader scrolls.
    if (page.predicting) page.answerOwed = performance.now() + 2000;
    page.predicting = false;
  } else if (page.alone && o.ordering === page.alone.ordering && o.correct) {
    page.fenced = o;
  }
}

// The timeline follows new events while its reader is at its end; a reader
// who scrolls up to read stays where they are.
let stick = true;
function maybeScroll(force) {
  if (!stick && !force) return;
  scrollTimeline(byTest("timeline"));
  stick = true;
}

/**
 * The timeline at its newest event; the run's verdict card, once there is
 * one, shows its start (an embed's box grows to it: --verdict-h), also
 * when a worker's exit lands after it: a busy machine reports the exit
 * last, and scrolled to the bottom a small box cut the verdict's headline.
 */
function scrollTimeline(tl) {
  tl.scrollTop = tl.scrollHeight;
  const verdicts = tl.querySelectorAll(":scope > .k-verdict");
  const verdict = verdicts.length ? verdicts[verdicts.length - 1] : null;
  if (boot.embed) tl.style.setProperty("--verdict-h", verdict ? `${verdict.offsetHeight + 4}px` : "0px");
  if (verdict) {
    const over = tl.getBoundingClientRect().top - verdict.getBoundingClientRect().top;
    if (over > 0) tl.scrollTop -= over;
  }
}

// Frames only while a draw is owed (which wakes the loop); else a lease
// ticks at 10 Hz, its words' resolution, and an idle page at 4 Hz.
let wait = 0;
function frame() {
  wait = 0;
  let live = 0;
  if (!document.hidden) {
    if (page.dirty) drawAll();
    else if (page.sideDirty) {
      page.sideDirty = false;
      drawSide(page.view.run);
    }
    live = tickLeases(byTest("lanes"), dbNow);
    fitStage(); // a lane that grew with its lease's words moves the timeline
  }
  if (page.dirty || page.sideDirty) requestAnimationFrame(frame);
  else wait = setTimeout(frame, matchMedia("(prefers-reduced-motion: reduce)").matches ? 500 : live ? 100 : 250);
}
for (const k of ["dirty", "sideDirty"]) {
  let v = page[k];
  Object.defineProperty(page, k, { get: () => v, set: (x) => { v = x; if (x && wait) { clearTimeout(wait); wait = 0; requestAnimationFrame(frame); } } });
}

document.addEventListener("visibilitychange", () => { if (!document.hidden) page.dirty = true; });

// ---- commands --------------------------------------------------------------------

const errBox = byTest("error");
function showError(msg) {
  errBox.textContent = msg;
  errBox.hidden = !msg;
}

/**
 * Send a command as the driver. Its errors are shown by `say` (the stage's
 * error line unless told otherwise); when the server is too busy, or there
 * is no session, `busy` plays a recording instead, where there is one to
 * play (a scripted run's, by default).
 */
async function send(cmd, { say = showError, busy = scriptedBusy(cmd) } = {}) {
  if (!sessionId && busy) { busy("no session could be made"); return null; }
  if (page.role !== "driver") { say("You are watching this session: only its driver can do that. Start your own with the Permalink."); return null; }
  try {
    const r = await api.command(cmd);
    say("");
    return r;
  } catch (err) {
    host.post("error", { status: err.status, code: err.code, error: err.message });
    if (err.code === "busy" && busy) {
      say("");
      busy(err.message);
      return null;
    }
    say(err.message, err);
    return null;
  }
}

/** The recording a scripted run is replaced by when the server is busy. */
function scriptedBusy(cmd) {
  return cmd.action === "run" && cmd.ordering !== "free-play" ? (why) => playRecording(cmd, why) : null;
}

// ---- the load lab -------------------------------------------------------------------

loadLab.bindForm(byTest("load-form"), send);

// ---- when the live demo is busy: a recorded run -----------------------------------

async function playRecording(cmd, why) {
  let rec;
  try {
    rec = await findRecording(cmd);
  } catch (err) {
    showError(`The live demo is busy (${why}) and no recorded run is at hand: ${err.message}`);
    return;
  }
  const summary = recordingSummary(rec);
  page.recording = rec.key;
  const note = byTest("recorded");
  note.textContent = recordingNote(rec);
  note.hidden = false;
  page.view = { run: newRun(summary), infos: [], replay: true };
  page.scrub = null;
  clearOutcome();
  timeline.setLanes(lanes(fold(summary, rec.events).run));
  byTest("timeline").textContent = "";
  const player = new Player({ summary, events: rec.events, timeline, speed: 1.5, onDraw: (p) => {
    page.view.run = p.run;
    page.view.infos = p.infos;
    drawSide(p.run);
    if (p.pos === p.events.length && p.run.outcome) {
      host.post("verdict", { run: "recording", safe: p.run.outcome.safe, verdict: p.run.outcome.verdict, outcome: p.run.outcome, recorded: true });
    }
  } });
  player.play();
}

function runCommand(overrides = {}) {
  backToLive();
  return sendRun(commandOf(setupFromForm(form), overrides.mode));
}

/** Start a run: say so at once, where the reader is, then ask the server. */
function sendRun(cmd) {
  backToLive();
  byTest("narration").textContent = "Starting the two workers…";
  return send(cmd);
}

/** The run still to play: one whose verdict has come has played to its
 *  end, even before the state that says it ended arrives, so Run then
 *  starts another rather than pausing one the server has ended. */
function liveRun() { return page.live.id && !page.live.ended && !page.live.outcome ? page.live : null; }

/** Space: run, or pause and play an auto run. */
function runOrToggle() {
  const r = liveRun();
  if (!r) return runCommand();
  if (r.mode === "auto") return send({ action: r.paused ? "play" : "pause" });
  if (r.mode === "step") return send({ action: "step" });
  return null;
}

/** →: the next step, or forward through a finished run. */
function stepForward() {
  if (lesson) return lesson.next();
  if (scrubbing()) return scrubTo(nextVisible(page.scrub, +1));
  const r = liveRun();
  if (!r) return page.view.replay ? null : runCommand({ mode: "step" });
  if (r.mode === "free") return null;
  return send({ action: "step" });
}

/** ←: back through the events. */
function stepBack() {
  if (lesson) return lesson.prev();
  const n = page.view.run.events.length;
  if (n === 0) return;
  scrubTo(nextVisible(scrubbing() ? page.scrub : n, -1));
}

function nextVisible(from, dir) {
  const evs = page.view.run.events;
  let i = from;
  for (;;) {
    i += dir;
    if (i <= 0) return 0;
    if (i >= evs.length) return evs.length;
    if (timeline.visible(evs[i - 1])) return i;
  }
}

function scrubTo(i) {
  const n = page.view.run.events.length;
  page.scrub = i >= n ? null : Math.max(0, i);
  page.dirty = true;
  if (page.scrub !== null) {
    requestAnimationFrame(() => {
      const li = byTest("timeline").querySelector(`li[data-index="${page.scrub - 1}"]`);
      if (li) li.scrollIntoView({ block: "nearest" });
    });
  }
}

function reset() {
  backToLive();
  return send({ action: "reset" });
}

function backToLive() {
  if (!page.view.replay && !scrubbing()) return;
  page.view = { run: page.live, infos: page.infos, replay: false };
  page.scrub = null;
  clearOutcome();
  page.dirty = true;
  byTest("back-live")?.remove();
  params.delete("run");
  updateURL();
}

async function openRun(id) {
  try {
    const evs = await api.runEvents(id);
    const { run, rows } = fold(page.runs.get(id) || { id }, evs);
    run.id = id;
    page.view = { run, infos: rows, replay: true };
    page.scrub = null;
    clearOutcome();
    page.dirty = true;
    params.set("run", id);
    updateURL();
    if (!byTest("back-live")) {
      const b = document.createElement("button");
      b.type = "button";
      b.dataset.testid = "back-live";
      b.textContent = "Back to live";
      b.addEventListener("click", backToLive);
      byTest("narration").after(b);
    }
  } catch (err) {
    // An old run's first events may have been let go to keep the newest.
    showError(err.code === "gone" ? `Run ${id}'s events are no longer kept here: the server keeps only the newest events of each session. Run it again to see it.` : err.message);
  }
}

// ---- controls ---------------------------------------------------------------

form.addEventListener("submit", (ev) => { ev.preventDefault(); runCommand(); });
byTest("run").addEventListener("click", runOrToggle);
byTest("step").addEventListener("click", stepForward);
byTest("back").addEventListener("click", stepBack);
byTest("reset").addEventListener("click", reset);
byTest("add-job").addEventListener("click", () => send({ action: "add_job" }));
byTest("add-worker").addEventListener("click", () => send({ action: "add_worker" }));
byTest("judge-now").addEventListener("click", () => send({ action: "verdict" }));
byTest("finish").addEventListener("click", () => send({ action: "finish" }));
byTest("matrix-run").addEventListener("click", () => {
  batches.starting("matrix");
  send({ action: "matrix" }); // the server's batch lease (experiments.DefaultBatchLease)
});
for (const b of document.querySelectorAll("[data-batch]")) {
  b.addEventListener("click", () => {
    batches.starting(b.dataset.batch);
    send({ action: "batch", name: b.dataset.batch });
  });
}
for (const b of document.querySelectorAll("[data-run]")) {
  b.addEventListener("click", () => {
    sendRun(JSON.parse(b.dataset.run));
    showStage(true);
  });
}

/**
 * Bring the stage into view for a run that starts from elsewhere on the
 * page (Predict, a limit's button), unless its lanes are in view already.
 * In an iframe the host page scrolls, not the frame: nothing to do there.
 */
function showStage(always = false) {
  if (boot.embed) return;
  const lanesBox = byTest("lanes").getBoundingClientRect();
  const stageBox = byTest("stage").getBoundingClientRect();
  if (!always && stageBox.top >= 0 && lanesBox.top < innerHeight * 0.6) return;
  scrollToStage();
}

/**
 * Scroll the stage's top into view. On a wide page the stage is sticky in
 * its column, so the column is what scrolls into view: a sticky element's
 * own box would land it above the screen's top.
 */
function scrollToStage() {
  const stage = byTest("stage");
  (stage.closest(".stage-col") || stage).scrollIntoView({ block: "start", behavior: matchMedia("(prefers-reduced-motion: reduce)").matches ? "auto" : "smooth" });
}
byTest("predict-run").addEventListener("click", async () => {
  page.predicting = true;
  page.dirty = true;
  predict.drawPredict(page.alone, true);
  showStage();
  const r = await sendRun(predict.aloneCommand(scenarios.styles));
  if (r === null) page.predicting = false;
});
byTest("compare-run").addEventListener("click", () => { showStage(); sendRun(predict.fencedCommand()); });
byTest("show-heartbeats").addEventListener("change", () => { page.dirty = true; });
byTest("scrub").addEventListener("input", (ev) => scrubTo(Number(ev.target.value)));
byTest("lanes").addEventListener("click", (ev) => {
  const b = ev.target.closest("button[data-act]");
  if (b) send({ action: b.dataset.act, worker: b.dataset.worker });
});
form.addEventListener("change", (ev) => {
  const t = ev.target;
  if (t.name === "style") {
    // A queue style is a set of guards: show it on the guard switches.
    const st = scenarios.styles.find((x) => x.name === t.value);
    const broken = (st && st.broken ? st.broken.split(",") : []).filter(Boolean);
    for (const c of form.querySelectorAll('input[name="guard"]')) c.checked = !broken.includes(c.value);
  }
  if (t.name === "guard") {
    const fence = form.querySelector('input[name="style"][value="fencelab"]');
    const all = [...form.querySelectorAll('input[name="guard"]')].every((c) => c.checked);
    if (all && fence) fence.checked = true;
  }
  if (t.name === "pace" && liveRun() && liveRun().mode === "auto") send({ action: "pace", pace_ms: Number(t.value) });
  updateURL();
  drawControls(shownRun());
});
form.addEventListener("input", () => drawControls(shownRun()));
for (const r of document.querySelectorAll('input[name="predict"]')) {
  r.addEventListener("change", () => {
    predict.setPick(r.value);
    predict.drawPredict(page.alone, page.predicting);
  });
}
byTest("timeline").addEventListener("scroll", () => {
  const tl = byTest("timeline");
  stick = tl.scrollTop + tl.clientHeight >= tl.scrollHeight - 40;
});
byTest("matrix").addEventListener("click", (ev) => {
  const b = ev.target.closest("button.mcell[data-run]");
  if (b && !b.disabled) openRun(b.dataset.run);
});
// A run named in an answer (Step 5's, the guard matrix's): a button with
// data-open-run puts that run on the stage, and brings the stage into view.
document.addEventListener("click", (ev) => {
  const b = ev.target.closest("button[data-open-run]");
  if (!b || b.disabled) return;
  openRun(b.dataset.openRun).then(() => { if (!boot.embed) scrollToStage(); });
});

// Help and share dialogs.
const help = byTest("help");
function toggleHelp() { if (help.open) help.close(); else help.showModal(); }
byTest("help-open").addEventListener("click", toggleHelp);
bindKeys({ runOrToggle, stepForward, stepBack, reset, toggleHelp, closeDialogs: () => { for (const d of document.querySelectorAll("dialog[open]")) d.close(); } });

// ---- the matrix and runs the session already has ------------------------------

batches.load(boot.session.runs || []);
for (const r of boot.session.runs || []) {
  if (!r.background && boot.session.run && r.id !== boot.session.run.id) page.oldRuns.add(r.id);
  if (r.outcome && !r.background) takeOutcome(r.outcome);
}
batches.draw();

// Sharing the session: its dialog, and the watch link's QR codes.
const { drawJoin } = sharing({ boot, sessionId, token: () => token, query });
if (boot.present && sessionId) {
  byTest("join").hidden = false;
  drawJoin();
}

// ---- the host page (an iframe's parent) ------------------------------------------

host.listen(boot.embed_origins, {
  onSetup: (m) => { applySetup(form, m); updateURL(); drawControls(shownRun()); },
  onRun: (m) => { applySetup(form, m); updateURL(); drawControls(shownRun()); runCommand(); },
  onIgnored: () => { page.ignoredMessages++; },
});

// ---- start ---------------------------------------------------------------------

// A page opened on a session with a run shows that run's setup, unless its
// link says otherwise.
const cur = boot.session.run;
if (cur && !params.has("ordering")) showSetupOf(cur);

// In a narrow column the guards fold away, unless the link broke some.
if (matchMedia("(max-width: 760px)").matches && boot.setup.broken.length === 0 && !boot.setup.same_identity) byTest("more").open = false;
updateURL();
// A token carried in from a link or an earlier visit is checked first: a
// stale one would only get the socket refused.
if (token && !boot.token) {
  const res = await fetch(`/api/sessions/${encodeURIComponent(sessionId)}`, { headers: { Authorization: `Bearer ${token}` } }).catch(() => null);
  if (res && res.status === 403) {
    token = "";
    api.token = "";
    page.role = "viewer";
    try { sessionStorage.removeItem(tokenKey); } catch { /* fine */ }
  }
}
document.addEventListener("securitypolicyviolation", (e) => page.csp.push(`${e.violatedDirective} ${e.blockedURI}`));

var lesson = null;
var lessonModule = null; // lesson.js, once a lesson is opened

/** Start a chapter from a clean page: the run on screen ended, its events gone. */
async function clearForChapter() {
  if (liveRun()) await send({ action: "reset" });
  if (page.live.id) page.oldRuns.add(page.live.id);
  page.live = newRun({});
  page.infos = [];
  page.view = { run: page.live, infos: page.infos, replay: false };
  page.scrub = null;
  clearOutcome();
  page.dirty = true;
  byTest("back-live")?.remove(); // a batch's run was on the stage: the chapter's own is live
}
/**
 * Open the guided lesson at a chapter (its id), from its start. Its module
 * is fetched then, not with the page: most readers never open it.
 */
async function openLesson(chapter) {
  lessonModule ??= await import("./lesson.js");
  const { Lesson, renderLesson, bindLessonTaps } = lessonModule;
  const aloneBroken = predict.aloneCommand(scenarios.styles).broken;
  lesson = new Lesson({ chapter, aloneBroken, send, clear: clearForChapter, runSteps: () => page.live.steps,
    limitRun: (testid) => JSON.parse(byTest(testid).dataset.run),
    // A finished batch puts its telling run on the stage: the first unsafe
    // one, else the last it played.
    onBatch: (b) => {
      if (b.phase !== "finished") return;
      const runs = (b.cells || []).map((c) => c.run).filter(Boolean);
      const id = (b.unsafe || [])[0] || runs[runs.length - 1];
      if (id) openRun(id);
    },
    onChange: () => { renderLesson(byTest("lesson"), lesson, esc); document.body.dataset.chapter = lesson.chapter.id; drawExports(shownRun()); fitStage(); } });
  document.body.dataset.chapter = lesson.chapter.id;
  if (!byTest("lesson").dataset.taps) {
    bindLessonTaps(byTest("lesson"), { stepForward, stepBack });
    byTest("lesson").dataset.taps = "1";
  }
  byTest("lesson").hidden = false;
  renderLesson(byTest("lesson"), lesson, esc);
  byTest("narration").textContent = "";
}
// With ?lesson=, the page is ready once the lesson is (window.fencelab.ready).
if (params.get("lesson")) openLesson(params.get("lesson")).then(() => { window.fencelab.ready = true; });
if (boot.embed) byTest("more").open = false;

// A teacher opened a chapter for the class: the student's own page opens
// the lesson there (as ?lesson= does, and keeps it in the address) and says
// so. The socket brings only what came after the page's first state, so a
// reload never goes back to an old chapter; a watcher or an embed opens nothing.
function teacherOpened(e) {
  if (page.role !== "driver" || boot.embed) return;
  params.set("lesson", e.note.chapter);
  updateURL();
  announce(e.text);
  openLesson(e.note.chapter).then(() => {
    const typing = document.activeElement?.closest("input, textarea, select, [contenteditable]");
    if (!typing) byTest("lesson").scrollIntoView({ block: "nearest", behavior: matchMedia("(prefers-reduced-motion: reduce)").matches ? "auto" : "smooth" });
  });
}

// A class student's page says at its top which class it is in and under
// which name (the session's seat), and, once the teacher ends the class,
// that its checks count no more. A watcher's page says whose it is.
page.seat = boot.session.class || null;
function drawSeat() {
  const el = byTest("class-seat");
  el.hidden = !page.seat || !!boot.embed;
  if (el.hidden) return;
  const { code, student, ended } = page.seat;
  el.dataset.ended = ended ? "true" : "false";
  el.textContent = page.role !== "driver" ? `Class ${code} · ${student}'s page`
    : ended ? `Class ${code} has ended · ${student}: your checks now count on no board.`
    : `Class ${code} · you are ${student}`;
}
function classEnded(e, catchingUp) {
  if (!page.seat) return;
  page.seat = { ...page.seat, ended: true };
  drawSeat();
  if (!catchingUp) announce(e.text);
}
drawSeat();

// The teacher started a run for everyone: on a student's page it comes
// into view, wherever they were (Build it, on a phone, is screens above
// it), and a button takes them back to Build it when they were there.
function classRun(e, catchingUp) {
  if (catchingUp || page.role !== "driver" || boot.embed) return;
  announce(e.text);
  const build = byTest("build");
  const r = build.getBoundingClientRect();
  const inBuild = build.open && r.bottom > 0 && r.top < innerHeight;
  // What they were looking at, to go back to: the element at the middle of the screen.
  const at = inBuild ? document.elementFromPoint(innerWidth / 2, innerHeight / 2) : null;
  page.backTo = at && build.contains(at) ? at : build;
  const stage = byTest("stage");
  stage.scrollIntoView({ block: "start", behavior: matchMedia("(prefers-reduced-motion: reduce)").matches ? "auto" : "smooth" });
  stage.dataset.cue = "class-run";
  setTimeout(() => { delete stage.dataset.cue; }, 4000);
  byTest("back-to-build").hidden = !inBuild;
}
byTest("back-to-build").addEventListener("click", () => {
  byTest("back-to-build").hidden = true;
  byTest("build").open = true;
  const to = page.backTo && page.backTo.isConnected ? page.backTo : byTest("build");
  to.scrollIntoView({ block: to === byTest("build") ? "start" : "center" });
  page.backTo = null;
  // The keyboard's focus goes back too, off the button now hidden.
  (to.closest("button, a, input, textarea, select, summary") || byTest("build").querySelector("summary"))?.focus({ preventScroll: true });
});

const stream = new Stream({
  sessionId, token, since: boot.session.last_seq,
  onEvent,
  onStatus: (st) => { page.conn = st; renderConnection(st); },
  onGone: () => showError("This session has ended. Reload the page for a new one."),
});
if (sessionId) stream.open(); else renderConnection({ state: "offline" });
// A class board's link to one run of a student's check (?run=RUN) puts that run on the stage, once.
if (sessionId && params.get("run")) openRun(params.get("run"));
drawAll();
loadLab.draw();
addEventListener("resize", () => { loadLab.draw(); fitStage(); });
requestAnimationFrame(frame);

window.addEventListener("error", (ev) => page.errors.push(String(ev.message)));
window.addEventListener("unhandledrejection", (ev) => page.errors.push(String(ev.reason)));

window.fencelab = {
  ready: !params.get("lesson"),
  version: boot.version,
  api,
  stream,
  state() {
    const r = page.live;
    return {
      drawn: !page.dirty && !page.sideDirty,
      sessionId, role: page.role, lastSeq: stream.last, connection: page.conn.state, caughtUp: page.conn.caughtUp, reconnects: page.conn.reconnects,
      run: r.id ? { id: r.id, ordering: r.ordering, mode: r.mode, phase: r.phase, ended: r.ended, paused: r.paused, stepIndex: r.stepIndex, steps: r.steps.length } : null,
      outcome: r.outcome, report: r.report, verdict: verdictWords(r) || null,
      workers: [...r.workers.values()].map((w) => ({ label: w.label, pid: w.pid, state: w.state, letter: w.letter, frozen: w.frozen, exited: w.exited, killed: w.killed, skewMs: w.skewMs })),
      jobs: [...r.jobs.values()].map((j) => ({ id: j.id, status: j.status, owner: j.owner, epoch: j.epoch, writer: j.writer, expired: j.expired })),
      seqs: r.events.map((e) => e.seq),
      view: { replay: page.view.replay, run: page.view.run.id, scrub: page.scrub, events: page.view.run.events.length },
      matrix: batches.state().cells,
      load: loadLab.state(),
      batches: batches.state().answers,
      build: build ? build.state() : null,
      seat: page.seat,
      alone: page.alone, fenced: page.fenced, pick: predict.pick(),
      errors: page.errors.slice(),
      csp: page.csp.slice(),
      lesson: lesson ? lesson.state() : null,
      recording: page.recording,
      recorded: page.recording ? { events: page.view.run.events.length, outcome: page.view.run.outcome } : null,
      ignoredMessages: page.ignoredMessages,
      embed: !!boot.embed, present: !!boot.present,
    };
  },
};
host.post("ready", { session: sessionId, role: page.role });
