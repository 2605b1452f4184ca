package crowd

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencelab/fencelab/server/lab/protocol"
)

// ClassReport is how the server held up under one class: what RunClass
// reports, and `fencelab crowd --class N` prints as Table, or with --json
// as is.
//
// A student is ok when exactly one report of their check came (on the
// socket, and in the session's log afterwards) and it says what their
// solution is: ours passes; a wrong one fails, naming first the
// requirement its missing clause keeps. The other counts are not
// exclusive: a student whose report came twice and was wrong is counted
// in both.
type ClassReport struct {
	URL       string `json:"url"`
	ServerPID int    `json:"server_pid,omitempty"` // the fencelab serve the crowd started
	Class     string `json:"class"`                // its id (ended at the end)
	Students  int    `json:"students"`
	// Joined is the students who joined and had their socket live when
	// all pressed Check.
	Joined    int   `json:"joined"`
	LeaseMS   int64 `json:"lease_ms"` // the check's; 0: the server's default
	TimeoutMS int64 `json:"timeout_ms"`
	// Solutions are what the students checked, each with how many did.
	Solutions []SolutionCount `json:"solutions"`

	OK int `json:"ok"`
	// WrongVerdicts are the students whose report did not say what their
	// solution is; WrongMessages say how, most frequent first.
	WrongVerdicts int          `json:"wrong_verdicts"`
	WrongMessages []ErrorCount `json:"wrong_messages"`
	// Duplicates are the students who got more than one report for their
	// one check, on the socket or in the log.
	Duplicates int `json:"duplicates"`
	// Missing are the students whose check was pressed and no report came
	// within the timeout.
	Missing int `json:"missing"`
	// Busy are the students the server answered busy (HTTP 503).
	Busy int `json:"busy"`
	// Errors are the students who failed otherwise: the join, the socket,
	// the check refused or stopped.
	Errors        int          `json:"errors"`
	ErrorMessages []ErrorCount `json:"error_messages"`
	Reconnects    int          `json:"reconnects"`

	// CheckToReportMS is from pressing Check to reading the report, over
	// the students whose report came; InLineMS from pressing Check to the
	// check's start (its turn in the server's line); PeakPlace the
	// farthest back in line a student was told it was.
	CheckToReportMS *Spread `json:"check_to_report_ms"`
	InLineMS        *Spread `json:"in_line_ms"`
	PeakPlace       int     `json:"peak_place_in_line"`
	// BoardLagMS is from a student reading their report to the poll of
	// the board whose row first showed that check (polled every 250ms; 0
	// when the board showed it first), over BoardShown students.
	// BoardMissing reports never showed; BoardWrong rows showed a pass
	// other than the report's.
	BoardLagMS       *Spread `json:"board_lag_ms"`
	BoardShown       int     `json:"board_shown"`
	BoardMissing     int     `json:"board_missing"`
	BoardWrong       int     `json:"board_wrong"`
	BoardPolls       int     `json:"board_polls"`
	BoardPollsFailed int     `json:"board_polls_failed"`

	Stats *ServerStats `json:"stats"`
	// Each is every student, in the order they were named.
	Each        []StudentResult `json:"each"`
	ElapsedMS   int64           `json:"elapsed_ms"`
	Interrupted bool            `json:"interrupted,omitempty"`
	// ServerExit says how the server the crowd started did not stop
	// cleanly; empty when it did.
	ServerExit string `json:"server_exit,omitempty"`
}

// Spread is a nearest-rank p50 and p95, and the max, in milliseconds.
type Spread struct {
	P50 int64 `json:"p50"`
	P95 int64 `json:"p95"`
	Max int64 `json:"max"`
}

func spreadOf(ds []time.Duration) *Spread {
	if len(ds) == 0 {
		return nil
	}
	slices.Sort(ds)
	return &Spread{P50: percentile(ds, 50).Milliseconds(), P95: percentile(ds, 95).Milliseconds(), Max: ds[len(ds)-1].Milliseconds()}
}

func (s *Spread) String() string {
	return fmt.Sprintf("p50 %s  p95 %s  max %s", secs(s.P50), secs(s.P95), secs(s.Max))
}

// SolutionCount is one solution of a class, and how many students
// checked it.
type SolutionCount struct {
	Solution string `json:"solution"`
	Right    bool   `json:"right"`
	Students int    `json:"students"`
}

// StudentResult is one student's check.
type StudentResult struct {
	Name     string `json:"name"`
	Solution string `json:"solution"`
	Right    bool   `json:"right"`
	// Result is ok, wrong, duplicate, missing, busy or error: the first
	// that applies of error, busy, missing, duplicate, wrong; else ok.
	Result string `json:"result"`
	// Pass is the report's, and Requirement the first it names; null:
	// no report came.
	Pass        *bool  `json:"pass"`
	Requirement string `json:"requirement,omitempty"`
	// Reports are the finished checks read on the socket, Logged those in
	// the session's log afterwards (-1: not read).
	Reports         int    `json:"reports"`
	Logged          int    `json:"logged"`
	CheckToReportMS *int64 `json:"check_to_report_ms"`
	InLineMS        *int64 `json:"in_line_ms"`
	BoardLagMS      *int64 `json:"board_lag_ms"`
	// ReportedAt is when the student read their report: a clock to set
	// beside a board page's, to measure what its teacher sees.
	ReportedAt *time.Time `json:"reported_at"`
	Error      string     `json:"error,omitempty"`
}

func msOf(d time.Duration) *int64 {
	ms := d.Milliseconds()
	return &ms
}

// verdict says how s's report differs from what its solution is; "" when
// it does not.
func verdict(sol classSolution, pass bool, first string) string {
	switch {
	case sol.right() && !pass:
		return fmt.Sprintf("%s failed, naming %s", sol.name, first)
	case !sol.right() && pass:
		return fmt.Sprintf("%s passed", sol.name)
	case !sol.right() && first != string(sol.want):
		return fmt.Sprintf("%s named %s first, not %s", sol.name, first, sol.want)
	}
	return ""
}

func newClassReport(c *classLoader, students []*student, bp boardPolls, st *ServerStats, elapsed time.Duration, interrupted bool) *ClassReport {
	r := &ClassReport{URL: c.base.String(), Class: c.classID, Students: len(students), LeaseMS: c.cfg.Lease.Milliseconds(),
		TimeoutMS: c.cfg.Timeout.Milliseconds(), WrongMessages: []ErrorCount{}, ErrorMessages: []ErrorCount{},
		BoardPolls: bp.ok, BoardPollsFailed: bp.failed, Stats: st, ElapsedMS: elapsed.Milliseconds(), Interrupted: interrupted}
	counts := make([]int, len(classSolutions))
	var took, inLine, lag []time.Duration
	wrongBy, errBy := map[string]int{}, map[string]int{}
	for _, s := range students {
		s.mu.Lock()
		sol := classSolutions[s.sol]
		counts[s.sol]++
		res := StudentResult{Name: s.name, Solution: sol.name, Right: sol.right(), Pass: s.pass, Requirement: string(s.first),
			Reports: s.reports, Logged: s.logged, Error: s.err}
		if s.joined {
			r.Joined++
		}
		r.Reconnects += s.reconnects
		r.PeakPlace = max(r.PeakPlace, s.place)
		if !s.started.IsZero() && !s.sent.IsZero() {
			d := max(0, s.started.Sub(s.sent))
			inLine = append(inLine, d)
			res.InLineMS = msOf(d)
		}
		wrong := ""
		if !s.reported.IsZero() {
			at := s.reported
			res.ReportedAt = &at
			d := s.reported.Sub(s.sent)
			took = append(took, d)
			res.CheckToReportMS = msOf(d)
			if s.pass != nil {
				wrong = verdict(sol, *s.pass, string(s.first))
			}
			if s.boardAt.IsZero() {
				r.BoardMissing++
			} else {
				d := max(0, s.boardAt.Sub(s.reported))
				lag = append(lag, d)
				res.BoardLagMS = msOf(d)
				r.BoardShown++
				if s.pass != nil && (s.boardPass == nil || *s.boardPass != *s.pass) {
					r.BoardWrong++
				}
			}
		}
		dup := s.reports > 1 || s.logged > 1
		switch {
		case s.err != "":
			res.Result = "error"
			r.Errors++
			errBy[s.err]++
		case s.busy:
			res.Result = "busy"
			r.Busy++
		case s.missing || s.reports == 0:
			res.Result = "missing"
			r.Missing++
		case dup:
			res.Result = "duplicate"
		case wrong != "":
			res.Result = "wrong"
		default:
			res.Result = "ok"
			r.OK++
		}
		if dup {
			r.Duplicates++
		}
		if wrong != "" {
			r.WrongVerdicts++
			wrongBy[wrong]++
		}
		s.mu.Unlock()
		r.Each = append(r.Each, res)
	}
	for i, sol := range classSolutions {
		if counts[i] > 0 {
			r.Solutions = append(r.Solutions, SolutionCount{Solution: sol.name, Right: sol.right(), Students: counts[i]})
		}
	}
	r.WrongMessages, r.ErrorMessages = byCount(wrongBy), byCount(errBy)
	r.CheckToReportMS, r.InLineMS, r.BoardLagMS = spreadOf(took), spreadOf(inLine), spreadOf(lag)
	return r
}

// byCount is the distinct messages, most frequent first.
func byCount(m map[string]int) []ErrorCount {
	out := []ErrorCount{}
	for msg, n := range m {
		out = append(out, ErrorCount{Message: msg, Count: n})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		return a.Count > b.Count || (a.Count == b.Count && a.Message < b.Message)
	})
	return out
}

// Table renders the report for a terminal, a line per figure, as a
// crowd's Report does.
func (r *ClassReport) Table() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	server := r.URL
	if r.ServerPID > 0 {
		server += fmt.Sprintf(" (fencelab serve, pid %d, started by this crowd)", r.ServerPID)
	}
	fmt.Fprintf(tw, "server\t%s\n", server)
	lease := "the server's default lease"
	if r.LeaseMS > 0 {
		lease = "lease " + (time.Duration(r.LeaseMS) * time.Millisecond).String()
	}
	fmt.Fprintf(tw, "class\t%d student%s, %d joined; all press Check at once (%s), each over its own session and socket, and wait up to %v\n",
		r.Students, plural(r.Students), r.Joined, lease, time.Duration(r.TimeoutMS)*time.Millisecond)
	for i, s := range r.Solutions {
		key := ""
		if i == 0 {
			key = "solutions"
		}
		right := "wrong"
		if s.Right {
			right = "right"
		}
		fmt.Fprintf(tw, "%s\t%d× %s (%s)\n", key, s.Students, s.Solution, right)
	}
	fmt.Fprintf(tw, "ok\t%d (one report each, saying what the solution is)\n", r.OK)
	fmt.Fprintf(tw, "wrong verdicts\t%d\n", r.WrongVerdicts)
	for _, e := range r.WrongMessages {
		fmt.Fprintf(tw, "\t%d× %s\n", e.Count, e.Message)
	}
	fmt.Fprintf(tw, "duplicates\t%d\n", r.Duplicates)
	fmt.Fprintf(tw, "missing\t%d\n", r.Missing)
	fmt.Fprintf(tw, "busy\t%d\n", r.Busy)
	fmt.Fprintf(tw, "errors\t%d\n", r.Errors)
	for _, e := range r.ErrorMessages {
		fmt.Fprintf(tw, "\t%d× %s\n", e.Count, e.Message)
	}
	if r.CheckToReportMS != nil {
		fmt.Fprintf(tw, "Check to report\t%s\n", r.CheckToReportMS)
	} else {
		fmt.Fprintf(tw, "Check to report\t- (no report came)\n")
	}
	switch {
	case r.InLineMS != nil && r.PeakPlace > 0:
		fmt.Fprintf(tw, "in line\t%s (Check to the check's start; at most %s in the server's line)\n", r.InLineMS, protocol.Ordinal(r.PeakPlace))
	case r.InLineMS != nil:
		fmt.Fprintf(tw, "in line\t%s (Check to the check's start)\n", r.InLineMS)
	}
	if r.BoardLagMS != nil {
		fmt.Fprintf(tw, "board lag\t%s (report to the board's row, polled every %v; %d of %d shown", r.BoardLagMS, boardEvery, r.BoardShown, r.BoardShown+r.BoardMissing)
	} else {
		fmt.Fprintf(tw, "board lag\t- (no report showed; %d board polls", r.BoardPolls)
	}
	if r.BoardWrong > 0 {
		fmt.Fprintf(tw, ", %d with another pass than the report's", r.BoardWrong)
	}
	if r.BoardPollsFailed > 0 {
		fmt.Fprintf(tw, ", %d polls unanswered", r.BoardPollsFailed)
	}
	fmt.Fprintf(tw, ")\n")
	writeEnd(tw, r.Reconnects, r.Stats, r.ElapsedMS, r.Interrupted, "students", r.ServerExit)
	tw.Flush()
	return b.String()
}
