// Package lab is fencelab's laboratory around the fenced queue in engine:
// the scenarios a run plays and their scripts, the event protocol every
// part of the playground speaks, the checks of the invariants against what
// Postgres and the receiver recorded, the outcome and the verdict of a run,
// the queue styles, and the words for all of it.
//
// engine is the queue a Go program would import; lab is what the
// playground adds to show it working and breaking. lab imports engine,
// never the other way round, and knows nothing of HTTP, processes or
// pages.
//
// # Schemas
//
// A run keeps two Postgres schemas (Schemas): the queue's, which
// engine.SetupQueue makes, with the lab's history trigger on top
// (sql/history.sql: every change to a job recorded, and NOTIFYed), and the
// receiver's, which engine.SetupReceiver makes. Setup, Reset and Drop make
// and remove them; History and HistoryAfter read what the trigger
// recorded. The lab's own SQL is in queries.go; the queue's is the
// engine's.
//
// # Events
//
// A run is told as a log of Events (protocol.go). Each event has a kind and
// the typed fields of that kind; its Text is narration built from those
// fields by Narrate, for people only. The same events feed the page, the
// CLI's --json, the NDJSON export and the offline replay; the committed
// JSON Schema protocol.schema.json says what they hold.
//
// # Words
//
// Codes become words once, here (words.go, narrate.go, verdict.go). The
// page is handed the word table (Words) with its first state and renders
// the words it is given. TestWords_EveryCodeHasWords walks every value of
// every code, read from the constants in the source, and fails for one
// without words.
//
// # Rules as fields
//
// What a front end would otherwise decide for itself — the badge an event
// wears (Event.Badge), who the zombie is (ZombieOf: RunInfo.Zombie,
// Outcome.Zombie, Effect.Zombie), whether a delivery took effect
// (ReceiverEvent.Accepted, Replaces), the mark of a verdict or a table's
// cell (Mark), the violations the headline does not say (Outcome.Also) —
// is a field derived from the facts, in derive.go, filled whenever the
// value is encoded: a recording made before the field existed carries it
// too.
//
// # Outcomes
//
// Check reads a job's history (the job_history trigger) and the receiver's
// decision log and returns every invariant they break; Evaluate turns one
// scripted run into an Outcome, the article's table row with a verdict;
// ReportJobs does the same for every job of a free-play run.
package lab
