package api

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/labstack/echo/v4"
)

// Stats is the answer to GET /api/stats: how loaded the server is, in
// counts only. `fencelab crowd` polls it to keep the peaks. It carries no
// connection string, path, user or host: anyone may read it.
type Stats struct {
	Sessions int `json:"sessions"`
	Runs     int `json:"runs"` // runs holding a run slot
	// Workers counts the worker processes alive now, of every run and
	// load lab; Loads the load labs running.
	Workers int `json:"workers"`
	Loads   int `json:"loads"`
	// Prestarted counts the worker processes spawned ahead, waiting for
	// a run (--prestarted-workers); Workers does not count them.
	Prestarted int `json:"prestarted"`
	// SpareRuns counts the pairs of schemas made ahead, waiting for a run
	// (--spare-runs).
	SpareRuns int `json:"spare_runs"`
	// RSSBytes is the server process's resident memory, its workers not
	// included (each is a process of its own).
	RSSBytes int64 `json:"rss_bytes"`
	// DBConnections counts every connection to the server's database, from
	// any client: the server's pool, its instance lock and every run's
	// workers and listener, and whatever else shares the database.
	DBConnections int `json:"db_connections"`
	Goroutines    int `json:"goroutines"`
}

// dbConnectionsSQL counts the connections to the database the pool is on,
// from Postgres's own view.
const dbConnectionsSQL = `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()`

// stats answers GET /api/stats. It is read-only and cheap: one query
// through the pool (bounded at 2 s, as /readyz is) and a look at this
// process's memory.
func (s *Server) stats(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	var conns int
	if err := s.cfg.Pool.QueryRow(ctx, dbConnectionsSQL).Scan(&conns); err != nil {
		s.cfg.Log.Warn("stats: the database does not answer", "err", dbDetail(err))
		return fault.Errorf(fault.Unavailable, "the database does not answer")
	}
	return c.JSON(http.StatusOK, Stats{
		Sessions: s.Sessions.Count(), Runs: s.Sessions.RunsInFlight(), Workers: len(s.sup.Procs()), Loads: s.Sessions.LoadsRunning(), Prestarted: s.sup.Prestarted(), SpareRuns: s.Sessions.Spares(),
		RSSBytes: residentBytes(), DBConnections: conns, Goroutines: runtime.NumGoroutine(),
	})
}

// residentBytes returns this process's resident set size: VmRSS from
// /proc/self/status on Linux; elsewhere (macOS) what ps says, which is the
// current figure; failing that, getrusage's peak. 0 if nothing answers.
func residentBytes() int64 {
	if runtime.GOOS == "linux" {
		if n := procStatusRSS(); n > 0 {
			return n
		}
	} else if n := psRSS(); n > 0 {
		return n
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	if runtime.GOOS == "darwin" {
		return int64(ru.Maxrss) // bytes on macOS
	}
	return int64(ru.Maxrss) * 1024 // kilobytes on Linux and the BSDs
}

// procStatusRSS reads VmRSS (in kB) from /proc/self/status.
func procStatusRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb * 1024
		}
	}
	return 0
}

// psRSS asks ps for this process's resident size (in kB).
func psRSS() int64 {
	out, err := exec.Command("ps", "-o", "rss=", "-p", strconv.Itoa(os.Getpid())).Output()
	if err != nil {
		return 0
	}
	kb, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return 0
	}
	return kb * 1024
}
