// Package harness checks a worker program a reader wrote, in any language,
// the way the playground checks its own: it runs the program as worker A
// and worker B, real processes, and plays each of the article's cases on
// them from outside, without the program's help.
//
// # How it steers a program it did not write
//
// Three levers, none inside the worker:
//
//   - signals: each worker is `/bin/sh -c COMMAND` in a process group of
//     its own (and, on Linux, with a parent-death signal, under a reaper:
//     reaper.go); SIGSTOP freezes all of it, SIGCONT thaws it, SIGKILL is
//     a crash;
//   - the database: the harness watches the job's row and its history
//     (the schema's trigger records which worker wrote each change, by the
//     connection's application_name, which the harness sets with
//     PGAPPNAME), and waits for a lease to run out on the database clock;
//   - the receiver: the harness serves it itself, on a loopback port, with
//     a URL of its own for each worker, and holds each call: it decides a
//     call (engine.Receiver.Deliver) only when the script says, and sends
//     the decision back only when the script says. A worker blocked on its
//     answer is a worker whose next step waits for the script.
//
// New owner first, for one: A claims and calls; its call is held
// undecided and A is frozen. A's lease runs out on the database clock. B
// starts, claims, calls; B's call is decided, its answer held: B is still
// working. A is thawed, its call decided and answered; A commits and exits.
// Then B is answered, commits and exits.
//
// That order is not written here: play.go plays the runner's own steps
// for the case (experiments.ScriptOf), the same list the playground's simulated
// workers follow, each step mapped onto one of the three levers. A case
// added to the lab is played by both, or neither.
//
// A worker is told its handler failed by the receiver's answer, HTTP 500
// (HandlerFailedStatus): the zombie-fails case and the holder's own fail
// play it, and the worker must fail the job, fenced.
//
// # Its probes
//
// Player.Probe asks a program the questions of its statements that no
// ordering asks, each in a case of its own (probe.go): two claimers at
// once (the harness holds the first job's row lock as another claimer
// midway through its claim, and sees in pg_stat_activity a claim that
// waits on it), a job whose lease ran out, the holder's own fail, another
// job in the table the worker also holds.
//
// # What it reads
//
// Nothing the workers say about themselves: each case's Outcome is
// judge.Evaluate's, read from the job's row, its history, the log of every
// UPDATE each worker sent (a refused one included, as a write of no rows)
// and the receiver's log. How a worker exits is reported beside the
// outcome (CheckInput.Notes), never judged: a worker that raises on its
// refused commit, as the article tells it to, passes.
//
// # What it leaves
//
// Nothing. Each case has two fresh schemas, dropped when it ends; its
// workers are killed and reaped, their process groups with them, and on
// Linux whatever else they started, setsid or not, by their reapers; the
// receiver's listener and every goroutine end with the case, on an error
// and on a cancelled context too.
//
// The contract a worker keeps is WORKERS.md, at the top of the repository;
// reference workers in Python are in examples/python.
package harness
