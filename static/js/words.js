// words.js — the words of every code, as the server hands them over with
// the page's first state (lab.Words in Go). The page looks words up here
// and never writes its own for an outcome, a verdict or a badge.

export let W = { orderings: {}, guards: {}, calls: {}, badges: {}, states: {}, stories: {}, columns: {}, reasons: {}, modes: {}, phases: {}, stops: {} };

/** Use the word table the server sent. */
export function setWords(w) { if (w) W = w; }

/**
 * The key of an event's badge in W.badges, from its typed fields alone —
 * the same key lab.BadgeKey gives in Go.
 */
export function badgeKey(e) {
  if (e.sql) return e.sql.result === "error" ? "sql.error" : `sql.${e.sql.op}.${e.sql.result}`;
  if (e.call) return `call.${e.call.result}`;
  if (e.receiver) return `receiver.${e.receiver.decision}`;
  if (e.process) return e.process.change === "exited" && e.process.signal === "SIGKILL" ? "process.killed" : `process.${e.process.change}`;
  if (e.lease) return `lease.${e.lease.change}`;
  if (e.row) return `row.${e.row.new.status}`;
  if (e.verdict) return e.verdict.safe ? "verdict.safe" : "verdict.unsafe";
  if (e.error) return "error";
  return "";
}

/** The badge of an event, or null: {tone, label}. */
export function badgeOf(e) {
  return W.badges[badgeKey(e)] || null;
}

/** A duration in milliseconds as people read it: 500 ms, 2 s, 1.5 min. */
export function msWords(ms) {
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${+(ms / 1000).toFixed(2)} s`;
  return `${+(ms / 60000).toFixed(2)} min`;
}
