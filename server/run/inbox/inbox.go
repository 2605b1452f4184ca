// Package inbox carries out an owner's orders one at a time, in the order
// they came, on a goroutine of the owner's own: the actor pattern for a
// run and for a session. A caller hands an order over and waits for its
// reply; it never walks through the owner's state itself. Six clicks at
// once are six orders in a line, not six goroutines racing through one
// run. The goroutine lives only while orders wait, so an idle owner has
// none, and nothing outlives the owner.
package inbox

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"

	"github.com/fencelab/fencelab/server/fault"
)

// MaxWaiting bounds the orders in a line, beyond the one being carried
// out: more are refused as busy at once.
const MaxWaiting = 16

// Inbox is one owner's line of orders of type O, each answered with an R.
// The zero Inbox is not usable: make one with New.
type Inbox[O, R any] struct {
	who   string // the owner, for messages: "run r3", "the session"
	carry func(context.Context, O) (R, error)

	mu      sync.Mutex
	line    []*order[O, R]
	serving bool
}

// order is one order in the line, with where its reply goes.
type order[O, R any] struct {
	ctx   context.Context
	o     O
	what  string
	reply chan reply[R] // buffered: the owner never waits for a caller
}

type reply[R any] struct {
	res R
	err error
}

// New returns the inbox of who, whose orders carry carries out, one at a
// time.
func New[O, R any](who string, carry func(context.Context, O) (R, error)) *Inbox[O, R] {
	return &Inbox[O, R]{who: who, carry: carry}
}

// Do hands o over (what names it in messages) and waits for its reply.
// ctx bounds the wait and the order: a caller that gives up is answered at
// once with an Unavailable fault, and its order, if not begun, is skipped;
// if begun, it sees ctx cancelled. With MaxWaiting orders waiting already,
// Do refuses at once with a Busy fault.
func (in *Inbox[O, R]) Do(ctx context.Context, what string, o O) (R, error) {
	od := &order[O, R]{ctx: ctx, o: o, what: what, reply: make(chan reply[R], 1)}
	var zero R
	in.mu.Lock()
	if len(in.line) >= MaxWaiting {
		in.mu.Unlock()
		return zero, fault.Errorf(fault.Busy, "%s has %d commands waiting already: try again when they are done", in.who, MaxWaiting)
	}
	in.line = append(in.line, od)
	if !in.serving {
		in.serving = true
		go in.serve()
	}
	in.mu.Unlock()
	select {
	case rp := <-od.reply:
		return rp.res, rp.err
	case <-ctx.Done():
		return zero, fault.Errorf(fault.Unavailable, "the command %s to %s was given up before it was done", what, in.who)
	}
}

// serve carries out the orders in the line until it is empty. An order
// whose caller has given up is skipped.
func (in *Inbox[O, R]) serve() {
	for {
		in.mu.Lock()
		if len(in.line) == 0 {
			in.serving = false
			in.mu.Unlock()
			return
		}
		od := in.line[0]
		in.line = in.line[1:]
		in.mu.Unlock()
		if od.ctx.Err() != nil {
			continue
		}
		res, err := in.carryOne(od)
		od.reply <- reply[R]{res, err}
	}
}

// carryOne carries out one order; a panic in it is its caller's error,
// not the end of the owner's line.
func (in *Inbox[O, R]) carryOne(od *order[O, R]) (res R, err error) {
	defer func() {
		if p := recover(); p != nil {
			slog.Error("a command panicked", "command", od.what, "owner", in.who, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = fault.Errorf(fault.Internal, "the command %s to %s failed inside the server", od.what, in.who)
		}
	}()
	return in.carry(od.ctx, od.o)
}

// Waiting is how many orders wait in the line, beyond one being carried
// out.
func (in *Inbox[O, R]) Waiting() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.line)
}
