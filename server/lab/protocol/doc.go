// Package protocol is what every part of the playground says to every
// other: the events of a run, the results they carry, the words for each
// of their codes, and the JSON Schema that pins them down. It is the only
// package the page's JavaScript and the templates see (through the JSON
// it defines), and it decides nothing: the scenarios are in package
// experiments, and what a run proves is found by package judge.
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
// (ReceiverEvent.Accepted, Replaces), the mark of a verdict, a table's
// cell or a check's case (Mark), the violations the headline does not say
// (Outcome.Also) — is a field derived from the facts, in derive.go, filled
// whenever the value is encoded: a recording made before the field existed
// carries it too.
package protocol
