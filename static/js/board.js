// board.js — the teacher's board (GET /classes/:id#token=T), for a
// projector: the class's code and its join link as a QR code, how many
// pass and what the class gets wrong, a row per student with a mark per
// case, "Everyone: run …", which starts one scenario in every student's
// session, and "Lesson … Open for everyone", which opens one chapter of
// the guided lesson on every student's page. It reads GET /api/classes/:id/board every two
// seconds while the tab is shown. Every word of a mark comes from the
// server's table (words.js); which mark a case has, and what a check
// names, come with the board. window.fencelab exposes the page's state
// to tests.

import { W, setWords, markOf } from "./words.js";
import { chapters } from "./lesson.js";
import { byTest, esc } from "./dom.js";

const boot = JSON.parse(document.getElementById("fencelab-class-state").textContent);
setWords(boot.words);

const classId = boot.class_id;
const api = `/api/classes/${encodeURIComponent(classId)}`;
// The teacher's token is in the fragment, which no request carries: it
// goes to the API in a header alone.
const token = new URLSearchParams(location.hash.slice(1)).get("token") || "";
const cases = [...document.querySelectorAll("th[data-case]")].map((th) => th.dataset.case);
// The first probe's column has a rule before it, as its heading has.
const firstProbe = document.querySelector("th.first-probe")?.dataset.case || "";

const POLL_MS = 1000;

const state = { polls: 0, board: null, error: null, status: 0, anonymous: false, stuckFirst: false, ended: false, polling: false, asking: false, exported: null, skew: 0 };

/** A request to the class API as its teacher; resolves with the Response, or null when the network failed. */
async function call(path, init = {}) {
  try {
    return await fetch(api + path, { ...init, headers: { Authorization: `Bearer ${token}`, ...(init.headers || {}) }, cache: "no-store" });
  } catch {
    return null;
  }
}

/** The sentence of an error answer, or one for a network that failed. */
async function refusal(res) {
  if (!res) return "The server could not be reached; the board tries again.";
  const body = await res.json().catch(() => ({}));
  return body.error || `The server answered ${res.status}.`;
}

// ---- polling ------------------------------------------------------------------

let timer = 0;
let inFlight = false;
let again = false; // a poll was asked for while one was in flight

async function poll() {
  clearTimeout(timer);
  timer = 0;
  if (inFlight) { again = true; return; }
  inFlight = state.asking = true;
  const asked = state.anonymous;
  const res = await call(`/board${asked ? "?anonymous=1" : ""}`);
  inFlight = state.asking = false;
  // "Hide names" changed while this answer was on its way: it answers
  // the old question, so ask again rather than draw it (drawn, it put the
  // names back and the box's tick with them, under CI's load).
  if (again || asked !== state.anonymous) {
    again = false;
    return poll();
  }
  // The state says what the page shows: its status is set with what is
  // drawn, not before the refusal's words are read.
  if (res && res.ok) {
    const board = await res.json();
    // The board's times are on the database's clock: how long ago each
    // was is read against the board's own now, not this machine's clock.
    const now = Date.parse(board.now);
    state.skew = Number.isFinite(now) ? Date.now() - now : 0;
    state.board = board;
    state.ended = !!board.class.ended;
    state.error = null;
    state.polls++;
    draw(board);
    showError(null);
  } else {
    state.error = await refusal(res);
    showError(state.error);
  }
  state.status = res ? res.status : 0;
  // A wrong token (403) or a class that is gone (404) does not mend by
  // asking again; an ended class does not change. Anything else might.
  const final = state.status === 403 || state.status === 404 || state.ended;
  if (!final && !document.hidden) timer = setTimeout(poll, POLL_MS);
  state.polling = timer !== 0;
}

// A hidden tab (another window on the projector, a laptop asleep) asks
// nothing; shown again, it asks at once.
document.addEventListener("visibilitychange", () => {
  if (document.hidden) {
    clearTimeout(timer);
    timer = 0;
    state.polling = false;
  } else if (!timer && state.status !== 403 && state.status !== 404 && !state.ended) {
    poll();
  }
});

function showError(text) {
  const el = byTest("board-error");
  el.textContent = text || "";
  el.hidden = !text;
}

// ---- drawing ------------------------------------------------------------------

const rel = new Intl.RelativeTimeFormat("en", { numeric: "auto" });

/** Now on the database's clock, as the last board said it. */
function dbNow() { return Date.now() - state.skew; }

/** How long ago t was, as people say it: "just now", "2 minutes ago". */
function ago(t) {
  const s = Math.round((Date.parse(t) - dbNow()) / 1000);
  if (s > -45) return "just now";
  if (s > -3600) return rel.format(Math.round(s / 60), "minute").replace("minutes", "min").replace("minute", "min");
  if (s > -86400) return rel.format(Math.round(s / 3600), "hour");
  return rel.format(Math.round(s / 86400), "day");
}

/** How long since t, short: "<1 min", "12 min", "1 h 5 min". */
function since(t) {
  const m = Math.floor((dbNow() - Date.parse(t)) / 60000);
  if (m < 1) return "<1 min";
  if (m < 60) return `${m} min`;
  return `${Math.floor(m / 60)} h${m % 60 ? ` ${m % 60} min` : ""}`;
}

/** The clock time of t, on this machine's clock, short: "14:42". */
function clock(t) {
  return new Date(Date.parse(t)).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
}

let drawnCode = "";

function drawJoin(board) {
  const code = board.class.code;
  const shown = board.class.code_shown; // ABC-234, as people read and type it: Go's rule (class.FormatCode)
  if (code === drawnCode) return;
  drawnCode = code;
  byTest("board-code").textContent = shown;
  const link = `${boot.join_base}/join?code=${encodeURIComponent(code)}`;
  const qr = byTest("board-qr");
  qr.src = `/join/qr.svg?code=${encodeURIComponent(code)}`;
  qr.alt = `A QR code of the join link, ${link}`;
  qr.hidden = false;
  byTest("board-link").innerHTML = boot.reachable
    ? `Scan, or open <strong>${esc(boot.join_base.replace(/^https?:\/\//, ""))}/join</strong> and type the code.`
    : `Phones cannot reach this server: it listens on this machine only. Start it with --addr :8080 to let a class join.`;
  document.title = `${shown} — class board — fencelab`;
}

/** How many of the requirements the class's last checks name the board lists. */
const maxReqs = 3;

function drawSummary(board) {
  const s = board.summary;
  byTest("board-pass").innerHTML = `<strong>${s.passing}</strong> of <strong>${s.students}</strong> pass`;
  byTest("board-checked").textContent = s.students === 0 ? "" : `${s.checked} of ${s.students} have checked`;
  // The three named most often: what the class should hear about first,
  // and what the projector's column holds; the export has every one.
  const shown = s.requirements.slice(0, maxReqs);
  const more = s.requirements.length - shown.length;
  byTest("board-reqs").innerHTML = shown.map((r) =>
    `<li data-requirement="${esc(r.requirement)}" data-students="${r.students}">${esc(r.words)}</li>`).join("") +
    (more > 0 ? `<li class="more" data-testid="board-reqs-more">and ${more} more requirement${more === 1 ? "" : "s"}, in the export</li>` : "");
}

function caseCell(st, c, k) {
  const cls = k === firstProbe ? "col-case first-probe" : "col-case";
  if (!c) return `<td class="${cls}" data-case="${esc(k)}"><span class="mark quiet" aria-hidden="true">·</span><span class="sr-only">not checked</span></td>`;
  const m = markOf(c.mark);
  const title = document.querySelector(`th[data-case="${CSS.escape(k)}"] abbr`)?.title || k;
  const sign = `<span class="mark ${esc(m.tone)}" aria-hidden="true">${esc(m.sign)}</span>`;
  const words = `${esc(title)}: ${esc(m.word)}`;
  if (!c.run || !st.session) return `<td class="${cls}" data-case="${esc(k)}" data-mark="${esc(c.mark)}">${sign}<span class="sr-only">${words}</span></td>`;
  // The run on the stage of the student's page, in a tab of its own: the
  // watch link, with no token, so the teacher only watches.
  const href = `/s/${encodeURIComponent(st.session)}?run=${encodeURIComponent(c.run)}&present=1`;
  return `<td class="${cls}" data-case="${esc(k)}" data-mark="${esc(c.mark)}"><a class="case-link" href="${esc(href)}" target="_blank" rel="noopener" data-testid="board-case-link" aria-label="${esc(st.name)}, ${words}: open the run">${sign}</a></td>`;
}

let drawnRows = "";

/** The rows in the order the board shows them: the order they joined,
 * or, "stuck longest first", those who have not passed their last check
 * by how long (a failing row since its requirement, a row with no check
 * since its student joined), then those who pass. */
function ordered(board) {
  const rows = board.students.slice();
  if (!state.stuckFirst) return rows;
  const from = (st) => st.pass ? Number.MAX_SAFE_INTEGER : Date.parse(st.since || st.joined);
  return rows.sort((a, b) => from(a) - from(b)); // stable: ties keep the order they joined
}

/** The cell of how long a failing student has been on one requirement. */
function stuckCell(st) {
  if (st.pass !== false || !st.since) return `<td class="col-stuck"></td>`;
  return `<td class="col-stuck" data-since="${esc(st.since)}" title="On “${esc(st.words)}” since ${esc(clock(st.since))}">${esc(since(st.since))}</td>`;
}

function drawRows(board) {
  const body = byTest("board-rows");
  // Redrawn only when a row changed, and with the focus put back where it
  // was: a teacher tabbing through the marks is not thrown out every two
  // seconds. The times alone move on in place.
  const key = JSON.stringify([board.anonymous, state.stuckFirst, board.students]);
  if (key === drawnRows) {
    for (const t of body.querySelectorAll("time[datetime]")) t.textContent = ago(t.dateTime);
    for (const td of body.querySelectorAll("td[data-since]")) td.textContent = since(td.dataset.since);
    return;
  }
  drawnRows = key;
  const focused = document.activeElement && body.contains(document.activeElement)
    ? { student: document.activeElement.closest("tr")?.dataset.student, kase: document.activeElement.closest("td")?.dataset.case } : null;
  const asCorrect = markOf("as-correct");
  const notAsCorrect = markOf("not-as-correct");
  body.innerHTML = ordered(board).map((st) => {
    const byCase = new Map(st.cases.map((c) => [c.case, c]));
    const checked = !!st.checked;
    // A check that failed says so with its own ✗ before its words, so a
    // row can never read as a pass, whatever its marks.
    const what = !checked ? `<span class="quiet">No check yet</span>`
      : st.pass ? `<span class="mark ${esc(asCorrect.tone)}" aria-hidden="true">${esc(asCorrect.sign)}</span> ${esc(asCorrect.word)}`
      : `<span class="words" title="${esc(st.words)}"><span class="mark ${esc(notAsCorrect.tone)}" aria-hidden="true">${esc(notAsCorrect.sign)}</span> ${esc(st.words)}</span>`;
    const checks = `${st.checks} check${st.checks === 1 ? "" : "s"}`;
    const when = checked ? `<time datetime="${esc(st.checked)}" title="${esc(checks)}">${esc(ago(st.checked))}</time>` : "";
    const passed = st.first_passed ? `<td class="col-passed" title="First passed at ${esc(clock(st.first_passed))}, ${esc(checks)} in all"><time class="clock" data-first-passed="${esc(st.first_passed)}">${esc(clock(st.first_passed))}</time></td>` : `<td class="col-passed"></td>`;
    return `<tr data-testid="board-row" data-student="${esc(st.id)}" data-state="${checked ? (st.pass ? "pass" : "fail") : "none"}"${st.requirement ? ` data-requirement="${esc(st.requirement)}"` : ""}>` +
      `<th scope="row" class="col-name" data-testid="board-name">${esc(st.name)}</th>` +
      cases.map((k) => caseCell(st, byCase.get(k), k)).join("") +
      `<td class="col-req">${what}</td>${stuckCell(st)}${passed}<td class="col-when">${when}</td></tr>`;
  }).join("");
  if (focused) body.querySelector(`tr[data-student="${CSS.escape(focused.student || "")}"] td[data-case="${CSS.escape(focused.kase || "")}"] a`)?.focus();
  byTest("board-empty").hidden = board.students.length > 0;
  // Rows share the height there is: thirty students fit a 1080p screen,
  // and a few get large type.
  const rows = Math.max(board.students.length, 8);
  document.documentElement.style.setProperty("--rows", String(rows));
  document.documentElement.style.setProperty("--req-lines", rows > 16 ? "1" : "2");
}

function draw(board) {
  drawJoin(board);
  drawSummary(board);
  drawRows(board);
  const ended = board.class.ended;
  byTest("board-status").textContent = ended ? `This class ended ${ago(ended)}: it takes no student and no check. Its board and exports stay for a day.` : "";
  byTest("board-end").disabled = !!ended;
  document.body.classList.toggle("ended", !!ended);
  drawEveryone();
  drawChapter();
}

// ---- the tools ------------------------------------------------------------------

byTest("board-anonymous").addEventListener("change", (ev) => {
  state.anonymous = ev.target.checked;
  // While names are hidden the exports hide them too; the names are one
  // explicit click away.
  byTest("board-csv-names").hidden = !state.anonymous;
  poll();
});

// The Stuck column's heading sorts: those stuck longest first, pressed
// again, the order they joined.
byTest("board-stuck-first").addEventListener("click", (ev) => {
  state.stuckFirst = !state.stuckFirst;
  ev.currentTarget.setAttribute("aria-pressed", String(state.stuckFirst));
  ev.currentTarget.closest("th").setAttribute("aria-sort", state.stuckFirst ? "descending" : "none");
  if (state.board) drawRows(state.board);
});

/** Fetches an export with the teacher's header and hands it over as a
 * download: with the names hidden while the board hides them, unless
 * names is true. */
async function download(kind, names = false) {
  const res = await call(`/handins.${kind}${state.anonymous && !names ? "?anonymous=1" : ""}`);
  if (!res || !res.ok) {
    showError(await refusal(res));
    return;
  }
  const blob = await res.blob();
  const name = /filename="([^"]+)"/.exec(res.headers.get("Content-Disposition") || "")?.[1] || `handins.${kind}`;
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 60000);
  state.exported = { kind, name, size: blob.size };
}
byTest("board-csv").addEventListener("click", () => download("csv"));
byTest("board-json").addEventListener("click", () => download("json"));
byTest("board-csv-names").addEventListener("click", () => download("csv", true));

// ---- everyone: run ----------------------------------------------------------------

// "Everyone: run …": one run command started in every student's session
// (POST /api/classes/:id/run), which each student's page shows as their
// own run. The scenarios and their words are the server's catalog (GET
// /api/scenarios), the same the main page's setup offers; one with steps
// runs step by step, each student stepping it on their own page. While
// the request is on its way the button says it is busy (aria-disabled,
// so a keyboard's focus stays on it) and a second press does nothing.
const everyone = { orderings: 0, running: false, sent: 0, label: "", answer: null, error: null };
const scripted = new Set();
const pick = byTest("board-everyone-ordering");
const runAll = byTest("board-everyone-run");
let drawnEveryone = "";

async function loadOrderings() {
  let sc = null;
  try {
    const res = await fetch("/api/scenarios");
    if (res.ok) sc = await res.json();
  } catch { /* said below */ }
  if (!sc || !Array.isArray(sc.orderings)) {
    everyone.error = "The scenarios could not be read: reload the board to run one for everyone.";
    drawEveryone();
    return;
  }
  for (const o of sc.orderings) if (o.steps && o.steps.length) scripted.add(o.name);
  pick.innerHTML = sc.orderings.map((o) => `<option value="${esc(o.name)}">${esc(o.words.menu)}</option>`).join("");
  everyone.orderings = sc.orderings.length;
  drawEveryone();
}

/** The name a student has on the board now ("Student 3" while names are hidden). */
function shownName(st) {
  const row = state.board && state.board.students.find((r) => r.id === st.id);
  if (row) return row.name;
  return state.anonymous ? "A student" : st.name;
}

function drawEveryone() {
  pick.disabled = everyone.orderings === 0 || state.ended;
  runAll.disabled = everyone.orderings === 0 || state.ended;
  runAll.setAttribute("aria-disabled", String(everyone.running || runAll.disabled));
  let html = "";
  if (everyone.running) {
    html = `<p>Starting ${esc(everyone.label)} for everyone…</p>`;
  } else if (everyone.error) {
    html = `<p class="bad">${esc(everyone.error)}</p>`;
  } else if (everyone.answer) {
    const all = everyone.answer.students || [];
    const failed = all.filter((st) => !st.run);
    html = all.length === 0
      ? `<p>No student has joined yet: nobody to start it for.</p>`
      : `<p>Started for <strong>${everyone.answer.started}</strong> of <strong>${all.length}</strong> student${all.length === 1 ? "" : "s"}: ${esc(everyone.label)}.</p>`;
    if (failed.length) {
      html += `<ul class="board-everyone-failed" aria-label="Not started for" data-testid="board-everyone-failed">` +
        failed.map((st) => `<li data-student="${esc(st.id)}"><strong>${esc(shownName(st))}</strong>: ${esc(st.error || "no run, and no reason given")}</li>`).join("") + `</ul>`;
    }
  }
  // Drawn only when it changed: the status is a live region, and the
  // board's polls must not have it said again every second.
  if (html !== drawnEveryone) {
    drawnEveryone = html;
    byTest("board-everyone-status").innerHTML = html;
  }
}

async function runForEveryone() {
  if (everyone.running || runAll.disabled) return;
  const ordering = pick.value;
  const cmd = { action: "run", ordering };
  if (scripted.has(ordering)) cmd.mode = "step";
  everyone.running = true;
  everyone.sent++;
  everyone.error = null;
  everyone.label = pick.selectedOptions[0]?.textContent || ordering;
  drawEveryone();
  const res = await call("/run", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(cmd) });
  let answer = null;
  if (res && res.ok) answer = await res.json().catch(() => null);
  everyone.answer = answer;
  everyone.error = answer ? null : res && res.ok ? "The server's answer could not be read." : await refusal(res);
  everyone.running = false;
  drawEveryone();
}
runAll.addEventListener("click", runForEveryone);

// ---- everyone: open a chapter -----------------------------------------------------

// "Lesson … Open for everyone": one chapter of the guided lesson opened
// on every student's page (POST /api/classes/:id/chapter), as ?lesson=<id>
// opens it; each student then steps through it on their own page. The chapters and their titles are the lesson's own (lesson.js),
// which the server holds to its list of chapters (experiments.Chapters).
// Like Run for everyone, the button says it is busy while the request is
// on its way, and a second press does nothing.
const lessonChapters = chapters([], () => null).map((c) => ({ id: c.id, title: c.title }));
const chapter = { chapters: lessonChapters.length, sending: false, sent: 0, label: "", answer: null, error: null };
const chapterPick = byTest("board-chapter");
const chapterSend = byTest("board-chapter-send");
chapterPick.innerHTML = lessonChapters.map((c) => `<option value="${esc(c.id)}">${esc(c.title)}</option>`).join("");
let drawnChapter = "";

function drawChapter() {
  chapterPick.disabled = chapter.chapters === 0 || state.ended || !token;
  chapterSend.disabled = chapterPick.disabled;
  chapterSend.setAttribute("aria-disabled", String(chapter.sending || chapterSend.disabled));
  let html = "";
  if (chapter.sending) {
    html = `<p>Opening “${esc(chapter.label)}” for everyone…</p>`;
  } else if (chapter.error) {
    html = `<p class="bad">${esc(chapter.error)}</p>`;
  } else if (chapter.answer) {
    const all = chapter.answer.students || [];
    const failed = all.filter((st) => st.error);
    html = all.length === 0
      ? `<p>No student has joined yet: nobody to open it for.</p>`
      : `<p>Opened “${esc(chapter.label)}” for <strong>${chapter.answer.sent}</strong> of <strong>${all.length}</strong> student${all.length === 1 ? "" : "s"}.</p>`;
    if (failed.length) {
      html += `<ul class="board-everyone-failed" aria-label="Not opened for" data-testid="board-chapter-failed">` +
        failed.map((st) => `<li data-student="${esc(st.id)}"><strong>${esc(shownName(st))}</strong>: ${esc(st.error)}</li>`).join("") + `</ul>`;
    }
  }
  // Drawn only when it changed: the status is a live region.
  if (html !== drawnChapter) {
    drawnChapter = html;
    byTest("board-chapter-status").innerHTML = html;
  }
}

async function openForEveryone() {
  if (chapter.sending || chapterSend.disabled) return;
  const id = chapterPick.value;
  chapter.sending = true;
  chapter.sent++;
  chapter.error = null;
  chapter.label = chapterPick.selectedOptions[0]?.textContent || id;
  drawChapter();
  const res = await call("/chapter", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ chapter: id }) });
  let answer = null;
  if (res && res.ok) answer = await res.json().catch(() => null);
  chapter.answer = answer;
  chapter.error = answer ? null : res && res.ok ? "The server's answer could not be read." : await refusal(res);
  chapter.sending = false;
  drawChapter();
}
chapterSend.addEventListener("click", openForEveryone);
drawChapter();

const dialog = byTest("board-end-dialog");
byTest("board-end").addEventListener("click", () => dialog.showModal());
dialog.addEventListener("close", async () => {
  if (dialog.returnValue !== "end") {
    byTest("board-end").focus();
    return;
  }
  dialog.returnValue = "";
  const res = await call("", { method: "DELETE" });
  if (!res || !res.ok) {
    showError(await refusal(res));
    return;
  }
  state.ended = true;
  await poll(); // the board as ended, once
});

if (!token) {
  state.status = 403;
  state.error = "This board's address has no teacher's key (#token=… at its end): open the address you were given when you started the class.";
  showError(state.error);
} else {
  poll();
  loadOrderings();
}

window.fencelab = { ready: true, state: () => ({ ...state, board: state.board, words: !!W.marks, everyone: { ...everyone }, chapter: { ...chapter } }) };
