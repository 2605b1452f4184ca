// model.js — the state of a run, rebuilt from its event log alone, from
// the events' typed fields (the protocol of server/lab/protocol/protocol.go; its
// JSON Schema is served at /api/protocol.schema.json). An event's text is
// shown, never read. Reconnecting, replaying and scrubbing all fold the
// same events through apply().

import { W } from "./words.js";

export const LANE_ROW = "postgres";
export const LANE_RECEIVER = "receiver";
export const LANE_RUNNER = "runner";

/** Whether a run phase is one a run never leaves: Go lists them (protocol.RunPhase.Ended). */
export const ended = (phase) => (W.ended || []).includes(phase);

/** A new, empty model of a run, from its summary (a RunInfo), if known. */
export function newRun(info = {}) {
  const run = {
    id: "", ordering: "", mode: "", phase: "", paused: false, paceMs: 900, leaseMs: 1000, skewMs: 0, broken: [],
    sameIdentity: false, steps: [], stepIndex: 0, ended: false, zombie: "", background: false, outcome: null, report: null, error: null,
    stopReason: "", events: [], workers: new Map(), jobs: new Map(), receiver: new Map(), frozen: new Set(), narration: "",
  };
  setInfo(run, info);
  return run;
}

/** Take what a RunInfo says about the run. */
function setInfo(run, i) {
  if (!i || !i.id) return;
  Object.assign(run, {
    id: i.id, ordering: i.ordering, mode: i.mode, phase: i.phase, paused: i.phase === "paused", paceMs: i.pace_ms ?? run.paceMs,
    leaseMs: i.lease_ms ?? run.leaseMs, skewMs: i.skew_ms || 0, broken: i.broken || [], sameIdentity: !!i.same_identity,
    // Who the run's zombie is, Go says.
    background: !!i.background, ended: ended(i.phase), zombie: i.zombie || "", stepIndex: i.step_index ?? run.stepIndex, stopReason: i.stop_reason || "",
    outcome: i.outcome || run.outcome, report: i.report || run.report, error: i.error || run.error,
  });
  if (i.steps && i.steps.length) run.steps = i.steps;
}

function worker(run, label) {
  let w = run.workers.get(label);
  if (!w) {
    w = { label, owner: "", pid: 0, state: "unknown", letter: "", frozen: false, exited: false, killed: false, jobId: 0, epoch: null, waitingAt: "", skewMs: 0 };
    run.workers.set(label, w);
  }
  return w;
}

function job(run, id) {
  let j = run.jobs.get(id);
  if (!j) {
    j = { id, status: "pending", owner: "", epoch: 0, leaseUntil: null, expired: false, takenLive: false, writer: "" };
    run.jobs.set(id, j);
  }
  return j;
}

/** Which lane an event belongs in. */
export function laneOf(e) {
  if (e.row || e.lease) return LANE_ROW;
  if (e.receiver) return LANE_RECEIVER;
  if (/^[A-Z]{1,8}$/.test(e.actor)) return e.actor;
  if (e.actor === "postgres") return LANE_ROW;
  return LANE_RUNNER;
}

/** Whether an event is a heartbeat: a lease renewal that went through. */
export function isHeartbeat(e) {
  return (e.sql && e.sql.op === "renew" && e.sql.result === "ok") || (e.row && e.row.op === "renew");
}

/** Whether an event is shown on the timeline at all. */
export function isShown(e) {
  return !e.run_state && !(e.checkpoint && e.checkpoint.name === "claim" && !e.checkpoint.job_id);
}

/** The epoch an event is about, if any. */
export function epochOf(e) {
  if (e.sql) return e.sql.epoch ?? null;
  if (e.checkpoint) return e.checkpoint.epoch ?? null;
  if (e.call) return e.call.epoch;
  if (e.receiver) return e.receiver.epoch;
  if (e.lease) return e.lease.epoch;
  if (e.row) return e.row.new.epoch;
  return null;
}

/**
 * apply folds one event into the run and returns what the timeline needs
 * to draw it: the bands in force (frozen workers, expired leases) and
 * marks for earlier events (a delivery superseded).
 */
export function apply(run, e) {
  run.events.push(e);
  const mark = { supersedes: 0 };
  if (e.run_state) setInfo(run, e.run_state.info.id === run.id || !run.id ? e.run_state.info : null);
  else if (e.step) {
    run.narration = e.text;
    run.stepIndex = e.step.index + 1;
  } else if (e.process) {
    const p = e.process;
    const w = worker(run, e.actor);
    if (p.pid) w.pid = p.pid;
    if (p.owner) w.owner = p.owner;
    w.state = p.state;
    w.letter = p.letter || "";
    if (p.change === "spawned") w.skewMs = p.skew_ms || 0;
    if (p.change === "stopped") { w.frozen = true; run.frozen.add(w.label); }
    if (p.change === "continued") { w.frozen = false; run.frozen.delete(w.label); }
    if (p.change === "exited") {
      Object.assign(w, { exited: true, frozen: false, jobId: 0, killed: p.signal === "SIGKILL" });
      run.frozen.delete(w.label);
    }
  } else if (e.checkpoint) {
    worker(run, e.actor).waitingAt = e.checkpoint.name;
  } else if (e.sql) {
    const s = e.sql;
    const w = worker(run, e.actor);
    w.waitingAt = "";
    if (s.op === "claim" && s.result === "ok") { w.jobId = s.job_id; w.epoch = s.epoch; }
    if ((s.op === "complete" || s.op === "fail") && s.result === "ok") w.jobId = 0;
  } else if (e.row) {
    const r = e.row;
    const j = job(run, r.job_id);
    Object.assign(j, { status: r.new.status, owner: r.new.owner, epoch: r.new.epoch, leaseUntil: r.new.lease_until, writer: r.writer });
    if (r.op !== "renew" && r.op !== "insert") { j.expired = false; j.takenLive = false; }
    if (r.op === "complete") j.doneBy = r.writer;
  } else if (e.lease) {
    const j = job(run, e.lease.job_id);
    if (e.lease.change === "expired") j.expired = true;
    else j.takenLive = true;
  } else if (e.receiver) {
    const d = e.receiver;
    const r = run.receiver.get(d.job_id) || { epoch: null, from: "", decisions: [] };
    r.decisions.push({ seq: e.seq, epoch: d.epoch, decision: d.decision, from: d.from, accepted: !!d.accepted });
    if (d.accepted) {
      r.epoch = d.epoch;
      r.from = d.from;
      if (d.replaces && d.superseded != null) {
        // The earlier accepted delivery of that epoch is superseded now.
        for (let i = r.decisions.length - 2; i >= 0; i--) {
          const x = r.decisions[i];
          if (x.epoch === d.superseded && x.accepted) { mark.supersedes = x.seq; break; }
        }
      }
    }
    run.receiver.set(d.job_id, r);
  } else if (e.verdict) {
    if (e.verdict.outcome) run.outcome = e.verdict.outcome;
    if (e.verdict.report) run.report = e.verdict.report;
    run.safe = e.verdict.safe;
  }
  const expired = [];
  for (const j of run.jobs.values()) if (j.expired && j.status === "running") expired.push(j.id);
  return { frozen: [...run.frozen], expired, mark };
}

/** Fold a whole list of events into a fresh run. */
export function fold(info, events, upTo = events.length) {
  const run = newRun(info);
  const rows = [];
  for (let i = 0; i < upTo && i < events.length; i++) rows.push(apply(run, events[i]));
  return { run, rows };
}

/** The verdict in words, as the server said it: of the outcome or the report. */
export function verdictWords(run) {
  return (run.outcome && run.outcome.verdict) || (run.report && run.report.verdict) || "";
}
