// class.js — a student's join (GET /join) and the teacher's "Start a
// class" (GET /classes/new): each a form over the class API, the
// server's refusal shown as its own sentence, nothing decided here.
// window.fencelab exposes the page's state to tests.

import { driveTokenKey } from "./api.js";
import { byTest } from "./dom.js";

const boot = JSON.parse(document.getElementById("fencelab-class-state").textContent);

// What the student keeps between visits: the code they joined and their
// student token, which makes a later join the same student (and the same
// page) rather than a new one with the same name.
const storeKey = "fencelab-class";

const state = { phase: "ready", status: 0, error: null, field: "", rejoin: "none", student: null, session: "" };

/** POST a JSON body to the API; resolves with {status, body}, an error answer included. */
async function post(path, body) {
  let res;
  try {
    res = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch {
    return { status: 0, body: { error: "The server could not be reached: check the network and try again.", code: "" } };
  }
  const text = await res.text();
  let json = {};
  try { json = text ? JSON.parse(text) : {}; } catch { /* the status says enough */ }
  if (!res.ok && !json.error) json = { error: `The server answered ${res.status}.`, code: "" };
  return { status: res.status, body: json };
}

function readStored() {
  try {
    const v = JSON.parse(localStorage.getItem(storeKey) || "null");
    if (v && typeof v.code === "string" && typeof v.token === "string" && v.token) return v;
  } catch { /* storage off, or something else under our key: nothing kept */ }
  return null;
}

function keep(code, token) {
  try { localStorage.setItem(storeKey, JSON.stringify({ code, token })); } catch { /* storage off: no rejoin, still a join */ }
}

// ---- the join ------------------------------------------------------------------

function joinPage() {
  const form = byTest("class-join-form");
  const code = byTest("class-join-code");
  const name = byTest("class-join-name");
  const submit = byTest("class-join-submit");
  const status = byTest("class-join-status");
  const places = { code: byTest("class-join-code-error"), name: byTest("class-join-name-error"), form: byTest("class-join-error") };
  const inputs = { code, name };

  function clearErrors() {
    for (const p of Object.values(places)) p.textContent = "";
    for (const i of Object.values(inputs)) i.removeAttribute("aria-invalid");
    state.error = null;
    state.field = "";
  }

  /** Shows a refusal beside the field it is about (boot.fields, from Go) and moves there. */
  function showError(body, focus) {
    let field = (boot.fields || {})[body.code] || "form";
    if (field === "pattern") field = code.validity.patternMismatch || !code.value.trim() ? "code" : "name";
    places[field].textContent = body.error;
    if (inputs[field]) {
      inputs[field].setAttribute("aria-invalid", "true");
      if (focus) inputs[field].focus();
    }
    state.error = body.error;
    state.field = field;
  }

  /** Goes to the student's own page with Build it open. */
  function arrive(ans) {
    state.phase = "joined";
    state.student = ans.student;
    state.session = ans.session.id;
    status.textContent = `Joined as ${ans.student.name}. Opening your page…`;
    // The session's drive link carries its token in the fragment
    // (#token=T), and the page opens Build it only for a fragment that is
    // exactly #build: both cannot ride in one fragment. The page also takes
    // its token from this tab's sessionStorage, under its own key, so the
    // token goes there and the fragment says #build.
    const drive = new URL(ans.session.drive_url, location.href);
    const token = new URLSearchParams(drive.hash.slice(1)).get("token") || ans.session.token;
    try { sessionStorage.setItem(driveTokenKey(ans.session.id), token); } catch { /* storage off */ }
    location.assign(`${drive.pathname}${drive.search}#build`);
  }

  async function join(body, automatic) {
    state.phase = "joining";
    submit.disabled = true;
    status.textContent = automatic ? "Joining your class again…" : "Joining…";
    const { status: st, body: ans } = await post("/api/classes/join", body);
    state.status = st;
    submit.disabled = false;
    status.textContent = "";
    if (st === 200 || st === 201) {
      keep(body.code, ans.token);
      arrive(ans);
      return;
    }
    state.phase = "ready";
    // A token that is no longer this class's student, sent on arrival
    // with no name, is refused for the name: the form is there to join
    // anew, and that refusal would only confuse. Anything else (the
    // class ended, or no class has the code) is worth saying.
    if (automatic && ans.code === "invalid") {
      state.rejoin = "refused";
      return;
    }
    showError(ans, !automatic);
  }

  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    if (state.phase === "joining") return;
    clearErrors();
    const kept = readStored();
    join({ code: code.value, name: name.value, token: kept ? kept.token : "" }, false);
  });
  for (const i of Object.values(inputs)) i.addEventListener("input", () => { if (i.getAttribute("aria-invalid")) clearErrors(); });

  // A reload, or a later visit: the kept student joins again at once.
  // A link to another class (?code= that is not the kept one) is the
  // server's to judge: the token is this student's only in its own class.
  const kept = readStored();
  if (kept) {
    state.rejoin = "tried";
    if (!code.value) code.value = kept.code;
    join({ code: code.value, name: "", token: kept.token }, true);
  } else {
    (code.value ? name : code).focus();
  }
}

// ---- the teacher's start ----------------------------------------------------------

function newClassPage() {
  const start = byTest("class-start");
  const err = byTest("class-start-error");
  start.addEventListener("click", async () => {
    start.disabled = true;
    err.textContent = "";
    state.phase = "starting";
    const { status, body } = await post("/api/classes");
    state.status = status;
    if (status !== 201) {
      state.phase = "ready";
      state.error = body.error;
      err.textContent = body.error;
      start.disabled = false;
      return;
    }
    state.phase = "started";
    // The teacher's token rides in the fragment: it never goes to a server
    // in a URL, and the teacher keeps this address to come back.
    location.assign(`/classes/${encodeURIComponent(body.class.id)}#token=${encodeURIComponent(body.token)}`);
  });
  start.focus();
}

const which = document.querySelector("main[data-page]").dataset.page;
if (which === "join") joinPage();
else if (which === "new-class") newClassPage();

window.fencelab = { ready: true, state: () => ({ page: which, ...state }) };
