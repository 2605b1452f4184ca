// model.js — the state of a run, rebuilt from its event log alone. The
// page keeps nothing the log does not say: reconnecting, replaying and
// scrubbing all fold the same events through apply().

export const LANE_ROW = "postgres";
export const LANE_RECEIVER = "receiver";
export const LANE_RUNNER = "runner";

/** A new, empty model of a run, from its summary (if known). */
export function newRun(summary = {}) {
  return {
    id: summary.id || "",
    ordering: summary.ordering || "",
    mode: summary.mode || "",
    title: summary.title || "",
    paused: !!summary.paused,
    paceMs: summary.pace_ms ?? 900,
    leaseMs: summary.lease_ms ?? 1000,
    skewMs: summary.skew_ms ?? 0,
    broken: summary.broken || [],
    sameIdentity: !!summary.same_identity,
    steps: summary.steps || [],
    stepIndex: summary.step_index || 0,
    ended: !!summary.ended,
    background: !!summary.background,
    outcome: summary.outcome || null,
    report: summary.report || null,
    error: summary.error || "",
    events: [],
    workers: new Map(),
    jobs: new Map(),
    receiver: new Map(),
    frozen: new Set(),
    narration: "",
  };
}

function worker(run, label) {
  let w = run.workers.get(label);
  if (!w) {
    w = { label, owner: "", pid: 0, state: "starting", frozen: false, exited: false, jobId: 0, epoch: null, waitingAt: "", skewMs: 0 };
    run.workers.set(label, w);
  }
  return w;
}

function job(run, id) {
  let j = run.jobs.get(id);
  if (!j) {
    j = { id, status: "pending", owner: "", epoch: 0, leaseUntil: null, expired: false, writer: "" };
    run.jobs.set(id, j);
  }
  return j;
}

/** Which lane an event belongs in. */
export function laneOf(e) {
  if (e.kind === "row" || e.kind === "lease") return LANE_ROW;
  if (e.kind === "receiver") return LANE_RECEIVER;
  if (/^[A-Z]{1,8}$/.test(e.actor)) return e.actor;
  if (e.actor === "postgres") return LANE_ROW;
  return LANE_RUNNER;
}

/** Whether an event is a heartbeat: a lease renewal that went through. */
export function isHeartbeat(e) {
  return (e.kind === "sql" && e.name === "LeaseRenew" && e.outcome === "ok") || (e.kind === "row" && e.op === "renew");
}

/** Whether an event is shown on the timeline at all. */
export function isShown(e) {
  return e.kind !== "run" && !(e.kind === "checkpoint" && e.outcome === "waiting" && e.name === "claim" && !e.job_id);
}

function parseData(e) {
  if (!e.data) return null;
  return typeof e.data === "string" ? JSON.parse(e.data) : e.data;
}

/**
 * apply folds one event into the run and returns what the timeline needs
 * to draw it: the bands in force (frozen workers, expired leases) and
 * marks for earlier events (a delivery superseded).
 */
export function apply(run, e) {
  run.events.push(e);
  const d = parseData(e);
  const mark = { supersedes: 0 };
  switch (e.kind) {
    case "run":
      if (d && d.id === run.id) {
        Object.assign(run, {
          ordering: d.ordering, mode: d.mode, title: d.title, leaseMs: d.lease_ms, skewMs: d.skew_ms || 0,
          broken: d.broken || [], sameIdentity: !!d.same_identity, background: !!d.background,
          paused: !!d.paused, paceMs: d.pace_ms, ended: !!d.ended, outcome: d.outcome || run.outcome,
          report: d.report || run.report, error: d.error || run.error, stepIndex: d.step_index ?? run.stepIndex,
        });
        if (d.steps && d.steps.length) run.steps = d.steps;
      }
      break;
    case "step":
      run.narration = e.text;
      if (d) run.stepIndex = d.index + 1;
      break;
    case "process": {
      const w = worker(run, e.actor);
      if (e.pid) w.pid = e.pid;
      if (e.owner) w.owner = e.owner;
      if (e.state) w.state = e.state;
      if (e.outcome === "stopped") { w.frozen = true; run.frozen.add(w.label); }
      if (e.outcome === "continued") { w.frozen = false; run.frozen.delete(w.label); }
      if (e.outcome === "exited") { w.exited = true; w.frozen = false; run.frozen.delete(w.label); w.jobId = 0; }
      if (e.outcome === "spawned") { w.state = "running"; const m = /runs (\S+) ahead/.exec(e.text); if (m) w.skewText = m[1]; }
      break;
    }
    case "checkpoint":
      worker(run, e.actor).waitingAt = e.outcome === "waiting" ? e.name : "";
      break;
    case "sql": {
      const w = worker(run, e.actor);
      if (e.name === "JobClaim" && e.rows === 1) {
        w.jobId = e.job_id; w.epoch = e.epoch;
      }
      if ((e.name === "JobComplete" || e.name === "JobFail") && e.rows === 1) {
        w.jobId = 0;
      }
      break;
    }
    case "row": {
      const j = job(run, e.job_id);
      j.status = e.state || j.status;
      j.owner = e.owner || j.owner;
      j.epoch = e.epoch ?? j.epoch;
      j.leaseUntil = e.lease_until || null;
      j.writer = (/worker (\S+)'s connection/.exec(e.text) || [])[1] || "";
      if (e.op === "claim" || e.op === "complete" || e.op === "fail" || e.op === "retry") j.expired = false;
      if (e.op === "complete") j.doneBy = j.writer;
      break;
    }
    case "lease": {
      const j = job(run, e.job_id);
      j.expired = true;
      break;
    }
    case "receiver": {
      const r = run.receiver.get(e.job_id) || { epoch: null, from: "", decisions: [] };
      r.decisions.push({ seq: e.seq, epoch: e.epoch, decision: e.outcome, from: d && d.from });
      if (e.outcome && e.outcome.startsWith("accepted")) {
        r.epoch = e.epoch; r.from = (d && d.from) || "";
        if (d && d.superseded != null && e.outcome !== "accepted-same") {
          // The earlier accepted delivery of that epoch is superseded now.
          for (let i = r.decisions.length - 2; i >= 0; i--) {
            const x = r.decisions[i];
            if (x.epoch === d.superseded && x.decision.startsWith("accepted")) { mark.supersedes = x.seq; break; }
          }
        }
      }
      run.receiver.set(e.job_id, r);
      break;
    }
    case "verdict": {
      if (d && d.ordering !== undefined) run.outcome = d;
      else if (d && d.jobs) run.report = d;
      run.verdict = e.text;
      run.safe = e.outcome === "safe";
      break;
    }
  }
  const expired = [];
  for (const j of run.jobs.values()) if (j.expired && j.status === "running") expired.push(j.id);
  return { frozen: [...run.frozen], expired, mark };
}

/** Fold a whole list of events into a fresh run. */
export function fold(summary, events, upTo = events.length) {
  const run = newRun(summary);
  const rows = [];
  for (let i = 0; i < upTo && i < events.length; i++) rows.push(apply(run, events[i]));
  return { run, rows };
}

/** What the zombie's story came to, for the prediction. */
export function whatHappened(o) {
  if (!o) return "";
  const zombieStayed = o.final.result_from === "A" || o.receiver.payload_from === "A";
  const ownerStayed = o.final.result_from === "B" || o.receiver.payload_from === "B";
  if (zombieStayed && ownerStayed) return "both";
  if (zombieStayed) return "overwrites";
  return "fenced";
}

export const CALL_WORDS = {
  rejected: "rejected",
  accepted: "accepted",
  accepted_then_superseded: "accepted, then superseded",
  not_attempted: "not attempted",
};

/** The article's words for a final state. */
export function finalWords(epoch, rowFrom, receiverFrom) {
  const who = (x) => ({ A: "the zombie's", B: "the new owner's" }[x] || "nobody's");
  if (rowFrom === receiverFrom) return `epoch ${epoch}, ${who(rowFrom)} result in the row and at the receiver`;
  return `epoch ${epoch}, ${who(rowFrom)} result in the row, ${who(receiverFrom)} at the receiver`;
}
