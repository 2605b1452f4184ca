// recordings.js — when the live demo is busy: the recorded run closest to
// the setup asked for (a real run's event log, kept by the server), to be
// replayed in its place.

import { W } from "./words.js";

/** Fetch the recording closest to a run command's setup. */
export async function findRecording(cmd) {
  const q = new URLSearchParams({ ordering: cmd.ordering, broken: (cmd.broken || []).join(","), same: cmd.same_identity ? "1" : "" });
  const res = await fetch(`/api/recordings/find?${q}`);
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(body.error || `HTTP ${res.status}`);
  return body;
}

/** The summary a recording is replayed under. */
export function recordingSummary(rec) {
  return { id: "recording", ordering: rec.ordering, mode: "step", phase: "finished", lease_ms: rec.lease_ms, broken: rec.broken, same_identity: rec.same_identity };
}

/** What the page says about the recording it plays instead. */
export function recordingNote(rec) {
  const when = rec.seed ? "a run recorded when this server was built" : `a run recorded ${new Date(rec.recorded).toLocaleString()}`;
  const which = rec.exact ? "this very setup" : "the closest setup kept";
  const guards = rec.broken.length ? rec.broken.map((g) => (W.guards[g] || {}).off || g).join(", ") : W.guards.none.off;
  const title = (W.orderings[rec.ordering] || {}).title || rec.ordering;
  return `The live demo is busy right now, so here is a recorded run instead: ${when}, of ${which} (${title}; ${guards}). Its events are the real ones, replayed.`;
}
