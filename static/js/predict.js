// predict.js — the article's question, asked first, and answered by a real
// run with leases alone: what happened to A's commit is read from the
// database's own history, then set beside the same run with fencing on.

import { byTest, esc } from "./dom.js";
import { W, markOf } from "./words.js";

const KEY = "fencelab.predict";

/** The reader's pick, kept in this browser, or "". */
export function pick() {
  try { return localStorage.getItem(KEY) || ""; } catch { return ""; }
}

export function setPick(v) {
  try { localStorage.setItem(KEY, v); } catch { /* storage may be off */ }
}

/** Whether an outcome is of a run with leases alone: every check off, as Go says. */
export function leasesAlone(o) {
  return !!o && !!o.leases_alone;
}

/** The command of the prediction's run, and of its fenced twin. */
export function aloneCommand(styles) {
  const alone = ((styles.find((s) => s.name === "leases-alone") || {}).broken || "").split(",").filter(Boolean);
  return { action: "run", ordering: "new-owner-first", mode: "auto", pace_ms: 500, lease_ms: 800, broken: alone };
}

export function fencedCommand() {
  return { action: "run", ordering: "new-owner-first", mode: "auto", pace_ms: 500, lease_ms: 800, broken: [] };
}

/**
 * Draw the prediction: the pick, and once a leases-alone run has ended,
 * the answer it bears out, in the server's words.
 */
export function drawPredict(alone, running) {
  const out = byTest("predict-result");
  const p = pick();
  for (const r of document.querySelectorAll('input[name="predict"]')) r.checked = r.value === p;
  if (running) {
    out.textContent = W.predict.running;
    delete out.dataset.right;
    return;
  }
  if (!alone) {
    out.textContent = p ? W.predict.kept : "";
    delete out.dataset.right;
    return;
  }
  const happened = W.answers[alone.answer] || "";
  if (!p) {
    out.textContent = `${W.predict.alone}: ${happened}.`;
    delete out.dataset.right;
    return;
  }
  const right = p === alone.answer;
  out.dataset.right = right ? "true" : "false";
  out.textContent = saidWords(alone);
}

/** The reader's pick against the leases-alone run's answer, in words; "" with no pick. */
function saidWords(alone) {
  const p = pick();
  if (!p || !alone) return "";
  const right = p === alone.answer;
  return `${W.predict.said}: ${W.answers[p]}. ${W.predict.alone}: ${W.answers[alone.answer] || ""}. ${markOf(right ? "right" : "wrong").label}.`;
}

/** Fill one side of the comparison with an outcome. */
function side(el, o) {
  el.querySelector(".v").textContent = o ? markOf(o.mark).label : "";
  el.querySelector("ul").innerHTML = o ? o.reveal.map((s) => `<li>${esc(s)}</li>`).join("") : "";
  el.dataset.state = o ? o.mark : "none";
}

/**
 * Draw leases alone beside fencing, once there is a leases-alone run; while
 * the outcome shown is one of the two, what happened is told there alone.
 */
export function drawCompare(alone, fenced, current) {
  const box = byTest("compare");
  box.hidden = !alone;
  byTest("reveal").hidden = !!alone && !!current && (current === alone || current === fenced);
  if (!alone) return;
  side(byTest("compare-alone"), alone);
  side(byTest("compare-fenced"), fenced);
  // The reader's answer beside the run that bears it out: both in view
  // when the verdict comes, wherever Predict itself is on the page.
  const said = byTest("compare-said");
  said.textContent = saidWords(alone);
  said.hidden = !said.textContent;
  if (said.textContent) said.dataset.right = String(pick() === alone.answer);
  byTest("compare-run").hidden = !!fenced;
}
