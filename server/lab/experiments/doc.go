// Package experiments holds what fencelab runs, as data: the scenarios of
// the article (Ordering, their scripts of steps, and what a correct build
// shows in each, ExpectedOutcome: the article's table), the deliveries,
// the batches of runs (a matrix of guards by scenario), the cases of the
// check a reader's solution is put through (CheckCase, each with the
// requirement it names when it fails), the queue styles of the well-known
// queues, and the load lab's rounds and statistics.
//
// It decides nothing about a run that happened: package judge does.
package experiments
