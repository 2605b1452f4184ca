package crowd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencelab/fencelab/server/run/control"
)

// Series is what RunSeries reports: every load's report, in the order
// they ran, against the one server. `fencelab crowd --readers A,B,...`
// prints it as Table, or with --json as is.
type Series struct {
	Loads []*Report `json:"loads"`
	// BaselineP50MS is the first load's p50, which each load's p50_ratio
	// is against; null when no reader of the first load was ok.
	BaselineP50MS *int64 `json:"baseline_p50_ms"`
	SettleMS      int64  `json:"settle_ms"`
	// NotRun are the loads of the list that never ran (their readers),
	// and Stopped says why the series stopped before them.
	NotRun      []int  `json:"not_run,omitempty"`
	Stopped     string `json:"stopped,omitempty"`
	ElapsedMS   int64  `json:"elapsed_ms"`
	Interrupted bool   `json:"interrupted,omitempty"`
	// ServerExit says how the server the crowd started did not stop
	// cleanly; empty when it did.
	ServerExit string `json:"server_exit,omitempty"`
}

// brief is one load's counts in a line, for the progress of a series.
func (r *Report) brief() string {
	s := fmt.Sprintf("ok %d, busy %d, errors %d", r.OK, r.Busy, r.Errors)
	if r.OK > 0 {
		s += fmt.Sprintf("; Run to verdict p50 %s, p95 %s, max %s", secs(r.RunToVerdictMS.P50), secs(r.RunToVerdictMS.P95), secs(r.RunToVerdictMS.Max))
	}
	return s + fmt.Sprintf("; took %.1fs", float64(r.ElapsedMS)/1000)
}

func secs(ms int64) string { return fmt.Sprintf("%.2fs", float64(ms)/1000) }

// Table renders the series for a terminal: what ran, then a row per load,
// then the errors and reconnects of each.
func (s *Series) Table() string {
	var b strings.Builder
	first := s.Loads[0]
	var cmd control.Command
	_ = json.Unmarshal(first.Command, &cmd)
	var pace int64
	if cmd.PaceMS != nil {
		pace = *cmd.PaceMS
	}
	arrive := "all at once"
	if first.RampMS > 0 {
		arrive = "arriving over " + (time.Duration(first.RampMS) * time.Millisecond).String()
	}
	tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	server := first.URL
	if first.ServerPID > 0 {
		server += fmt.Sprintf(" (fencelab serve, pid %d, started by this crowd)", first.ServerPID)
	}
	fmt.Fprintf(tw, "server\t%s\n", server)
	fmt.Fprintf(tw, "loads\t%d of %d, one after another; between two, no run in flight and %v more\n",
		len(s.Loads), len(s.Loads)+len(s.NotRun), time.Duration(s.SettleMS)*time.Millisecond)
	fmt.Fprintf(tw, "each reader\tpresses Run (%s, lease %v, pace %v), %s, and waits up to %v for the verdict\n",
		cmd.Ordering, time.Duration(cmd.LeaseMS)*time.Millisecond, time.Duration(pace)*time.Millisecond, arrive,
		time.Duration(first.TimeoutMS)*time.Millisecond)
	baseline := fmt.Sprintf("×%d reader%s", first.Readers, plural(first.Readers))
	if s.BaselineP50MS != nil {
		fmt.Fprintf(tw, "baseline\tthe first load (%d reader%s), p50 %s: the column p50 %s is each load's p50 divided by it\n",
			first.Readers, plural(first.Readers), secs(*s.BaselineP50MS), baseline)
	} else {
		fmt.Fprintf(tw, "baseline\tnone: no reader of the first load was ok, so no ratio\n")
	}
	tw.Flush()
	b.WriteString("\n")

	tw = tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "readers\tok\tbusy\terrors\tp50\tp95\tmax\tp50 %s\tstart p50\tstart p95\tpeak RSS\tpeak Postgres connections\n", baseline)
	for _, r := range s.Loads {
		p50, p95, top, ratio, s50, s95 := "-", "-", "-", "-", "-", "-"
		if r.OK > 0 {
			p50, p95, top = secs(r.RunToVerdictMS.P50), secs(r.RunToVerdictMS.P95), secs(r.RunToVerdictMS.Max)
		}
		if r.RunToStartMS != nil {
			s50, s95 = secs(r.RunToStartMS.P50), secs(r.RunToStartMS.P95)
		}
		if r.P50Ratio != nil {
			ratio = fmt.Sprintf("%.2f", *r.P50Ratio)
		}
		rss, db := "-", "-"
		if r.PeakRSSBytes != nil {
			rss = mib(*r.PeakRSSBytes)
		}
		if r.PeakDBConnections != nil {
			db = fmt.Sprint(*r.PeakDBConnections)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Readers, r.OK, r.Busy, r.Errors, p50, p95, top, ratio, s50, s95, rss, db)
	}
	tw.Flush()

	tw = tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	var notes bool
	note := func(format string, a ...any) {
		if !notes {
			b.WriteString("\n")
			notes = true
		}
		fmt.Fprintf(tw, format, a...)
	}
	for _, r := range s.Loads {
		for _, e := range r.ErrorMessages {
			note("errors, %d readers\t%d× %s\n", r.Readers, e.Count, e.Message)
		}
		if r.Reconnects > 0 {
			note("reconnects, %d readers\t%d\n", r.Readers, r.Reconnects)
		}
	}
	if s.Stopped != "" {
		note("not run\t%s: %s\n", joinInts(s.NotRun), s.Stopped)
	}
	if s.Interrupted {
		note("\tinterrupted: these are the loads so far\n")
	}
	if s.ServerExit != "" {
		note("server exit\tthe server %s\n", s.ServerExit)
	}
	note("took\t%.1fs in all\n", float64(s.ElapsedMS)/1000)
	tw.Flush()
	return b.String()
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// ServerStats are the peaks of the server's /api/stats during a load, and
// its first sample, before any reader.
type ServerStats struct {
	Samples        int   `json:"samples"`
	Failed         int   `json:"failed"`
	Unsupported    bool  `json:"unsupported,omitempty"` // the server has no /api/stats
	IdleRSS        int64 `json:"idle_rss_bytes"`
	IdleDB         int   `json:"idle_db_connections"`
	PeakRSS        int64 `json:"peak_rss_bytes"`
	PeakDB         int   `json:"peak_db_connections"`
	PeakRuns       int   `json:"peak_runs"`
	PeakSessions   int   `json:"peak_sessions"`
	PeakGoroutines int   `json:"peak_goroutines"`
}

// Report is how the server held up under one crowd: what Run reports, and
// `fencelab crowd` prints as Table, or with --json as is.
type Report struct {
	URL       string          `json:"url"`
	ServerPID int             `json:"server_pid,omitempty"` // the fencelab serve the crowd started
	Command   json.RawMessage `json:"command"`              // what each reader's Run sent
	Readers   int             `json:"readers"`
	RampMS    int64           `json:"ramp_ms"`
	TimeoutMS int64           `json:"timeout_ms"`
	OK        int             `json:"ok"`
	Busy      int             `json:"busy"`
	Errors    int             `json:"errors"`
	// ErrorMessages are the distinct errors, most frequent first.
	ErrorMessages []ErrorCount `json:"error_messages"`
	// Reconnects counts the sockets the readers had to open again.
	Reconnects int `json:"reconnects"`
	// RunToVerdictMS is from sending Run to reading the verdict, over the
	// readers that were ok.
	RunToVerdictMS struct {
		P50 int64 `json:"p50"`
		P95 int64 `json:"p95"`
		Max int64 `json:"max"`
	} `json:"run_to_verdict_ms"`
	// RunToStartMS is from sending Run to its reply, which comes once the
	// run's schemas are set up and its workers started and connected,
	// over the readers that were ok: the share of RunToVerdictMS that grows
	// with a crowd before the run itself plays.
	RunToStartMS *Spread `json:"run_to_start_ms,omitempty"`
	// PeakRSSBytes and PeakDBConnections are null when the server has no
	// /api/stats or never answered it.
	PeakRSSBytes      *int64 `json:"peak_rss_bytes"`
	PeakDBConnections *int   `json:"peak_db_connections"`
	// P50Ratio is this load's p50 as a ratio to the first load's, in a
	// series (--readers A,B,...); absent from a single load's report, and
	// when either load had no reader ok.
	P50Ratio    *float64     `json:"p50_ratio,omitempty"`
	Stats       *ServerStats `json:"stats"`
	ElapsedMS   int64        `json:"elapsed_ms"`
	Interrupted bool         `json:"interrupted,omitempty"`
	// ServerExit says how the server the crowd started did not stop
	// cleanly; empty when it did.
	ServerExit string `json:"server_exit,omitempty"`
}

// ErrorCount is one distinct error of a crowd's readers, and how many
// readers it ended.
type ErrorCount struct {
	Message string `json:"message"`
	Count   int    `json:"count"`
}

func newReport(l *loader, outs []outcome, st *ServerStats, elapsed time.Duration, interrupted bool) *Report {
	var cmd struct {
		Command json.RawMessage `json:"command"`
	}
	_ = json.Unmarshal(l.command, &cmd)
	r := &Report{URL: l.base.String(), Command: cmd.Command, Readers: len(outs), RampMS: l.ramp.Milliseconds(),
		TimeoutMS: l.timeout.Milliseconds(), ErrorMessages: []ErrorCount{}, Stats: st, ElapsedMS: elapsed.Milliseconds(), Interrupted: interrupted}
	var took, start []time.Duration
	byMsg := map[string]int{}
	for _, o := range outs {
		r.Reconnects += o.reconnects
		switch {
		case o.ok:
			r.OK++
			took, start = append(took, o.took), append(start, o.start)
		case o.busy:
			r.Busy++
		default:
			r.Errors++
			byMsg[o.err]++
		}
	}
	for m, n := range byMsg {
		r.ErrorMessages = append(r.ErrorMessages, ErrorCount{Message: m, Count: n})
	}
	sort.Slice(r.ErrorMessages, func(i, j int) bool {
		a, b := r.ErrorMessages[i], r.ErrorMessages[j]
		return a.Count > b.Count || (a.Count == b.Count && a.Message < b.Message)
	})
	if len(took) > 0 {
		slices.Sort(took)
		r.RunToVerdictMS.P50 = percentile(took, 50).Milliseconds()
		r.RunToVerdictMS.P95 = percentile(took, 95).Milliseconds()
		r.RunToVerdictMS.Max = took[len(took)-1].Milliseconds()
	}
	r.RunToStartMS = spreadOf(start)
	if st != nil && st.Samples > 0 {
		r.PeakRSSBytes, r.PeakDBConnections = &st.PeakRSS, &st.PeakDB
	}
	return r
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Table renders the report for a terminal, a line per figure.
func (r *Report) Table() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	arrive := "all at once"
	if r.RampMS > 0 {
		arrive = "arriving over " + time.Duration(r.RampMS*int64(time.Millisecond)).String()
	}
	fmt.Fprintf(tw, "server\t%s\n", r.URL)
	fmt.Fprintf(tw, "readers\t%d, %s\n", r.Readers, arrive)
	fmt.Fprintf(tw, "ok\t%d\n", r.OK)
	fmt.Fprintf(tw, "busy\t%d\n", r.Busy)
	fmt.Fprintf(tw, "errors\t%d\n", r.Errors)
	for _, e := range r.ErrorMessages {
		fmt.Fprintf(tw, "\t%d× %s\n", e.Count, e.Message)
	}
	if r.OK > 0 {
		ms := func(n int64) string { return fmt.Sprintf("%.2fs", float64(n)/1000) }
		fmt.Fprintf(tw, "Run to verdict\tp50 %s  p95 %s  max %s\n", ms(r.RunToVerdictMS.P50), ms(r.RunToVerdictMS.P95), ms(r.RunToVerdictMS.Max))
		if st := r.RunToStartMS; st != nil {
			fmt.Fprintf(tw, "Run to start\tp50 %s  p95 %s  max %s (the reply: schemas set up, workers started)\n", ms(st.P50), ms(st.P95), ms(st.Max))
		}
	} else {
		fmt.Fprintf(tw, "Run to verdict\t- (no reader was ok)\n")
	}
	writeEnd(tw, r.Reconnects, r.Stats, r.ElapsedMS, r.Interrupted, "readers", r.ServerExit)
	tw.Flush()
	return b.String()
}

// writeEnd writes the rows every crowd's table ends with: the sockets
// opened again, the server's peaks, how long it took, whether it was
// interrupted (who: the readers, the students), and how the server it
// started exited.
func writeEnd(tw io.Writer, reconnects int, stats *ServerStats, elapsedMS int64, interrupted bool, who, serverExit string) {
	if reconnects > 0 {
		fmt.Fprintf(tw, "reconnects\t%d\n", reconnects)
	}
	writeServerStats(tw, stats)
	fmt.Fprintf(tw, "took\t%.1fs\n", float64(elapsedMS)/1000)
	if interrupted {
		fmt.Fprintf(tw, "\tinterrupted: these are the %s so far\n", who)
	}
	if serverExit != "" {
		fmt.Fprintf(tw, "server exit\tthe server %s\n", serverExit)
	}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// writeServerStats writes the server's peaks, as a crowd's table rows.
func writeServerStats(tw io.Writer, st *ServerStats) {
	switch {
	case st == nil || st.Unsupported:
		fmt.Fprintf(tw, "peak RSS\t- (the server has no /api/stats)\n")
	case st.Samples == 0:
		fmt.Fprintf(tw, "peak RSS\t- (/api/stats never answered)\n")
	default:
		fmt.Fprintf(tw, "peak RSS\t%s (idle %s; the server process, not its workers)\n", mib(st.PeakRSS), mib(st.IdleRSS))
		fmt.Fprintf(tw, "peak Postgres connections\t%d (idle %d)\n", st.PeakDB, st.IdleDB)
		fmt.Fprintf(tw, "peak runs at once\t%d (goroutines %d; %d samples", st.PeakRuns, st.PeakGoroutines, st.Samples)
		if st.Failed > 0 {
			fmt.Fprintf(tw, ", %d unanswered", st.Failed)
		}
		fmt.Fprintf(tw, ")\n")
	}
}

// stopServer stops the server a crowd started, if it did (child nil:
// it did not), and says its pid and how it ended badly ("" for well).
func stopServer(child *serveChild) (pid int, exit string) {
	if child == nil {
		return 0, ""
	}
	if err := child.stop(); err != nil {
		return child.pid, err.Error()
	}
	return child.pid, ""
}

// endErr is a crowd's error at its end: interrupted, or its server's bad
// end.
func endErr(ctx context.Context, serverExit string) error {
	switch {
	case ctx.Err() != nil:
		return ErrInterrupted
	case serverExit != "":
		return fmt.Errorf("the server it started %s", serverExit)
	}
	return nil
}
