package crowd

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math"
	"time"
)

// RunSeries plays one crowd per entry of readers (each its Readers), one
// after another against the one server, settling between two: it waits
// until /api/stats counts no run in flight (at most a minute), then
// cfg.Settle more, so the server makes its spare schemas again while
// quiet. Each load's p50 is then given as a ratio to the first load's.
//
// Each load keeps its own deadline (the ramp, the timeout and 30s, from
// its own start, as a single crowd has); the series' deadline allows every
// load that and its goodbyes, and every settle its bounds. The series is
// nil only when it could not start; with a series, the error says why it
// stopped early (ErrInterrupted for Ctrl-C) or how the server it started
// did not stop cleanly.
func RunSeries(ctx context.Context, cfg Config, readers []int) (*Series, error) {
	if err := validateSeries(readers); err != nil {
		return nil, fmt.Errorf("crowd: the series %w", err)
	}
	first := cfg
	for i, n := range readers {
		c := cfg
		c.Readers = n
		if err := c.Validate(); err != nil {
			return nil, err
		}
		if i == 0 {
			first = c // validated, its defaults filled
		}
	}
	cfg = first
	base, child, err := cfg.open(ctx)
	if err != nil {
		return nil, err
	}
	defer child.stop() // nil: no server of its own to stop
	began := time.Now()
	n := time.Duration(len(readers))
	budget := n*(cfg.Ramp+cfg.Timeout+loadGrace+seriesSlack) + (n-1)*(settleRunsMax+cfg.Settle)
	sctx, cancel := context.WithTimeoutCause(ctx, budget, errSeriesDeadline)
	defer cancel()

	ser := &Series{Loads: []*Report{}, SettleMS: cfg.Settle.Milliseconds()}
	var prev *loader
	for i, count := range readers {
		if i > 0 {
			why := prev.seriesStop(ctx, sctx, child)
			if why == "" {
				prev.settle(sctx, child, cfg.Settle, cfg.Log)
				why = prev.seriesStop(ctx, sctx, child)
			}
			if why != "" {
				ser.Stopped, ser.NotRun = why, readers[i:]
				cfg.Log.Printf("the series stops after load %d of %d: %s", i, len(readers), why)
				break
			}
		}
		l := newLoader(base, cfg.command(), count, cfg.Ramp, cfg.Timeout)
		cfg.Log.Printf("load %d of %d: %d reader%s against %s, each pressing Run (%s) and waiting up to %v for the verdict",
			i+1, len(readers), count, plural(count), base, cfg.Ordering, cfg.Timeout)
		rep := l.run(sctx)
		if child != nil {
			rep.ServerPID = child.pid
		}
		ser.Loads = append(ser.Loads, rep)
		cfg.Log.Printf("load %d of %d: %s", i+1, len(readers), rep.brief())
		prev = l
	}
	if first := ser.Loads[0]; first.OK > 0 && first.RunToVerdictMS.P50 > 0 {
		p50 := first.RunToVerdictMS.P50
		ser.BaselineP50MS = &p50
		for _, r := range ser.Loads {
			if r.OK > 0 {
				ratio := math.Round(float64(r.RunToVerdictMS.P50)/float64(p50)*1000) / 1000
				r.P50Ratio = &ratio
			}
		}
	}
	if child != nil {
		if err := child.stop(); err != nil {
			ser.ServerExit = err.Error()
		}
	}
	ser.Interrupted = ctx.Err() != nil
	ser.ElapsedMS = time.Since(began).Milliseconds()
	switch {
	case ctx.Err() != nil:
		return ser, ErrInterrupted
	case ser.ServerExit != "":
		return ser, fmt.Errorf("the server it started %s", ser.ServerExit)
	case ser.Stopped != "":
		return ser, fmt.Errorf("crowd: the series stopped after load %d of %d: %s", len(ser.Loads), len(readers), ser.Stopped)
	}
	return ser, nil
}

// seriesStop says why the series must not go on to its next load, or ""
// when it may: Ctrl-C, the series' deadline, the server gone.
func (l *loader) seriesStop(ctx, sctx context.Context, child *serveChild) string {
	switch {
	case ctx.Err() != nil:
		return "interrupted"
	case sctx.Err() != nil:
		return "the series' overall deadline passed"
	}
	if child != nil {
		select {
		case <-child.done:
			return fmt.Sprintf("the server it started exited (%v)", child.waitErr)
		default:
		}
	}
	rctx, cancel := context.WithTimeout(sctx, 5*time.Second)
	defer cancel()
	if err := checkReady(rctx, l.base); err != nil {
		return fmt.Sprintf("%s: %v", l.base, err)
	}
	return ""
}

// settle waits, between two loads, until the server counts no run in
// flight (for at most settleRunsMax), then extra more. A server makes
// its spare schemas again only once no run has started for a second, one
// pair at a time; the next load should find them made, as the first did,
// or it measures the schemas' making instead of the server.
func (l *loader) settle(ctx context.Context, child *serveChild, extra time.Duration, lg *log.Logger) {
	var exited <-chan struct{}
	if child != nil {
		exited = child.done
	}
	wait := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-exited:
			return false
		case <-time.After(d):
			return true
		}
	}
	began := time.Now()
	for {
		s, err := l.stats(ctx)
		if errors.Is(err, errNoStats) {
			lg.Printf("settle: %v to tell when its runs have ended; waiting --settle %v", err, extra)
			break
		}
		if err == nil && s.Runs == 0 {
			lg.Printf("settle: no run in flight after %.1fs; waiting %v more for the spare schemas", time.Since(began).Seconds(), extra)
			break
		}
		if time.Since(began) >= settleRunsMax {
			still := "/api/stats does not answer"
			if err == nil {
				still = fmt.Sprintf("%d run%s still in flight", s.Runs, plural(s.Runs))
			}
			lg.Printf("settle: %s after %v; going on, %v later", still, settleRunsMax, extra)
			break
		}
		if !wait(statsEvery) {
			return
		}
	}
	wait(extra)
}
