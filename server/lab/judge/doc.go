// Package judge says what a run proves, from what Postgres and the
// receiver recorded, never from what the workers believe.
//
// # Schemas
//
// A run keeps two Postgres schemas (Schemas): the queue's, which
// engine.SetupQueue makes, with the history trigger on top
// (sql/history.sql: every change to a job recorded, and NOTIFYed), and the
// receiver's, which engine.SetupReceiver makes. Setup, Reset and Drop make
// and remove them; History and HistoryAfter read what the trigger
// recorded. The judge's own SQL is in queries.go; the queue's is the
// engine's.
//
// # Outcomes
//
// Violations reads a job's history and the receiver's decision log and returns
// every invariant they break; Evaluate turns one scripted run into an
// Outcome, the article's table row with a verdict; ReportJobs does the
// same for every job of a free-play run; JudgeCheck turns the cases of a
// reader's check into its report; FinishBatch and AuditLoad do it for a
// batch and for the load lab.
package judge
