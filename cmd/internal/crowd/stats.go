package crowd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// pollStats samples /api/stats every statsEvery until ctx ends, then
// once more, and keeps the peaks.
func (l *loader) pollStats(ctx context.Context) *ServerStats {
	st := &ServerStats{}
	t := time.NewTicker(statsEvery)
	defer t.Stop()
	for {
		l.sample(st)
		if st.Unsupported {
			return st
		}
		select {
		case <-ctx.Done():
			l.sample(st)
			return st
		case <-t.C:
		}
	}
}

func (l *loader) sample(st *ServerStats) {
	s, err := l.stats(context.Background())
	switch {
	case errors.Is(err, errNoStats):
		st.Unsupported = true
		return
	case err != nil:
		st.Failed++
		return
	}
	if st.Samples == 0 {
		st.IdleRSS, st.IdleDB = s.RSSBytes, s.DBConnections
	}
	st.Samples++
	st.PeakRSS = max(st.PeakRSS, s.RSSBytes)
	st.PeakDB = max(st.PeakDB, s.DBConnections)
	st.PeakRuns = max(st.PeakRuns, s.Runs)
	st.PeakSessions = max(st.PeakSessions, s.Sessions)
	st.PeakGoroutines = max(st.PeakGoroutines, s.Goroutines)
}

// apiStats is an answer of GET /api/stats, the fields read of it.
type apiStats struct {
	Sessions      int   `json:"sessions"`
	Runs          int   `json:"runs"`
	RSSBytes      int64 `json:"rss_bytes"`
	DBConnections int   `json:"db_connections"`
	Goroutines    int   `json:"goroutines"`
}

// errNoStats is a server that answers /api/stats 404: an older one.
var errNoStats = errors.New("the server has no /api/stats")

// stats asks /api/stats once, within 3s.
func (l *loader) stats(ctx context.Context) (apiStats, error) {
	var s apiStats
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, l.base.String()+"/api/stats", nil)
	resp, err := l.client.Do(req)
	if err != nil {
		return s, fmt.Errorf("/api/stats: %w", unwrapURLError(err))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return s, errNoStats
	case resp.StatusCode != http.StatusOK:
		return s, fmt.Errorf("/api/stats: HTTP %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return s, fmt.Errorf("/api/stats: %w", err)
	}
	return s, nil
}
