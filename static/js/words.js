// words.js — the words of every code, as the server hands them over with
// the page's first state (protocol.Words in Go). The page looks words up here
// and never writes its own for an outcome, a verdict or a badge; which
// badge or mark a thing gets is a field Go sends with it (an event's
// badge, an outcome's mark), never a rule of the page's.

export let W = { orderings: {}, guards: {}, calls: {}, badges: {}, states: {}, columns: {}, reasons: {}, modes: {}, phases: {}, stops: {}, marks: {} };

/** Use the word table the server sent. */
export function setWords(w) { if (w) W = w; }

/** The badge of an event, or null: {tone, label}. Go names it (the event's badge key). */
export function badgeOf(e) {
  return (e && e.badge && W.badges[e.badge]) || null;
}

const NO_MARK = { tone: "", sign: "", word: "", label: "", cell: "" };

/** A mark's sign and words, {tone, sign, word, label, cell}: of a verdict, a run of a batch, a cell of the table. */
export function markOf(code) {
  return (W.marks && W.marks[code]) || NO_MARK;
}

/** A duration in milliseconds as people read it: 500 ms, 2 s, 1.5 min. */
export function msWords(ms) {
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${+(ms / 1000).toFixed(2)} s`;
  return `${+(ms / 60000).toFixed(2)} min`;
}
