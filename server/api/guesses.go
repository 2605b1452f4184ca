package api

import (
	"sync"
	"time"

	"github.com/fencelab/fencelab/server/fault"
)

// A class code is six characters of 32: about a billion codes, a handful
// open at once. What keeps a stranger from finding one is that guesses
// are few: guesses counts the wrong codes each address sends to
// POST /api/classes/join.
//
// Up to wrongPerMinute wrong codes a minute are answered 404; the next is answered
// 429 with Retry-After, and so is every join from that address for the
// back-off: a minute the first time, doubling each time the address goes
// over again within a day, up to an hour. A whole school behind one
// public address joins with the right code and a few typos well inside
// the budget; the right code never counts.
type guesses struct {
	mu  sync.Mutex
	by  map[string]*guessed
	now func() time.Time
}

type guessed struct {
	window  time.Time // when the current minute began
	wrong   int       // wrong codes in it
	until   time.Time // joins refused until then
	strikes int       // times over the budget, for the back-off
	last    time.Time // the last time over, to forget strikes a day on
}

const (
	wrongPerMinute = 100
	firstBackoff   = time.Minute
	maxBackoff     = time.Hour
	forgetStrikes  = 24 * time.Hour
	// guessesKept is how many addresses are remembered before the quiet
	// ones are forgotten: the map stays small whatever a flood of
	// addresses sends.
	guessesKept = 4096
)

func newGuesses() *guesses { return &guesses{by: map[string]*guessed{}, now: time.Now} }

// try takes one guess of addr's minute budget before its code is looked
// up, so that guesses sent at once count each other: a TooMany error
// while addr backs off, or when the budget is spent (which starts the
// back-off). A join whose code was no guess (the right one, or one that
// cannot be a code) gives it back with unguess.
func (g *guesses) try(addr string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	e := g.by[addr]
	if e == nil {
		if len(g.by) >= guessesKept {
			g.forget(now)
		}
		if len(g.by) >= guessesKept { // all remembered for a strike: keep only the back-offs running
			for k, old := range g.by {
				if !old.until.After(now) {
					delete(g.by, k)
				}
			}
		}
		e = &guessed{window: now}
		g.by[addr] = e
	}
	if e.until.After(now) {
		return tooMany(e.until.Sub(now))
	}
	if now.Sub(e.window) >= time.Minute {
		e.window, e.wrong = now, 0
	}
	if e.wrong >= wrongPerMinute {
		if now.Sub(e.last) > forgetStrikes {
			e.strikes = 0
		}
		back := min(maxBackoff, firstBackoff<<min(e.strikes, 10))
		e.until, e.last = now.Add(back), now
		e.strikes++
		e.window, e.wrong = now, 0
		return tooMany(back)
	}
	e.wrong++
	return nil
}

// unguess gives back a guess try took, for a join whose code was right
// or could not be a code.
func (g *guesses) unguess(addr string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e := g.by[addr]; e != nil && e.wrong > 0 {
		e.wrong--
	}
}

func tooMany(wait time.Duration) error {
	return &fault.Error{Code: fault.TooMany, RetryAfter: wait,
		Message: "too many wrong class codes from your address: wait " + wait.Round(time.Second).String() + ", then check the code with your teacher"}
}

// forget drops the addresses with nothing to remember: no back-off
// running, no strike within a day, no wrong code this minute.
func (g *guesses) forget(now time.Time) {
	for k, e := range g.by {
		if !e.until.After(now) && now.Sub(e.last) > forgetStrikes && now.Sub(e.window) >= time.Minute {
			delete(g.by, k)
		}
	}
}
