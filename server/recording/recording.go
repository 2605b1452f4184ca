// Package recording keeps recorded runs: the real event logs of runs that
// finished, to replay when the live demo is too busy to start another.
// It starts from seed recordings made by real runs and embedded in the
// binary (see seed/), and keeps the latest finished run of each setup.
package recording

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

//go:embed seed
var seedFS embed.FS

// Recording is one finished run and its whole event log.
type Recording struct {
	Key          string               `json:"key"`
	Ordering     experiments.Ordering `json:"ordering"`
	Broken       []string             `json:"broken"`
	SameIdentity bool                 `json:"same_identity"`
	LeaseMS      int64                `json:"lease_ms"`
	Recorded     time.Time            `json:"recorded"`
	Seed         bool                 `json:"seed"`
	// Custom: the run's workers ran a reader's own statements. Such a run
	// is the reader's, never a setup's recording: Add refuses it, and Get
	// never serves one (nor one whose events say so).
	Custom  bool              `json:"custom,omitempty"`
	Outcome *protocol.Outcome `json:"outcome"`
	Events  []protocol.Event  `json:"events,omitempty"`
}

// Summary is a recording without its events.
func (r Recording) Summary() Recording {
	r.Events = nil
	return r
}

// Key names a setup: the ordering, the broken guards (sorted) and whether
// the two workers share a name.
func Key(o experiments.Ordering, broken []string, same bool) string {
	b := append([]string(nil), broken...)
	sort.Strings(b)
	k := string(o)
	if len(b) > 0 {
		k += "+" + strings.Join(b, "+")
	}
	if same {
		k += "+same-identity"
	}
	return k
}

var keyRE = regexp.MustCompile(`^[a-z][a-z+-]{0,200}$`)

// ValidKey reports whether s has the shape of a key.
func ValidKey(s string) bool { return keyRE.MatchString(s) }

// Store holds recordings, at most one per setup, newest wins. Safe for
// concurrent use.
type Store struct {
	mu    sync.Mutex
	byKey map[string]*Recording
	max   int
	load  *LoadRecording // the latest load lab
}

// New returns a store holding the embedded seeds, with room for max setups.
func New(max int) (*Store, error) {
	s := &Store{byKey: map[string]*Recording{}, max: max}
	files, err := fs.Glob(seedFS, "seed/*.json")
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		b, err := seedFS.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var r Recording
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("recording %s: %w", f, err)
		}
		if err := speaksToday(f, r.Events); err != nil {
			return nil, err
		}
		r.Seed = true
		s.byKey[r.Key] = &r
	}
	load, err := loadSeed()
	if err != nil {
		return nil, err
	}
	s.load = load
	return s, nil
}

// Add keeps a finished run, replacing the previous one of its setup. Seeds
// are replaced by fresher runs too; when the store is full, the oldest
// recording that is not a seed goes.
func (s *Store) Add(r Recording) {
	if r.Outcome == nil || len(r.Events) == 0 || !r.lab() {
		return
	}
	r.Key = Key(r.Ordering, r.Broken, r.SameIdentity)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byKey[r.Key]; !ok && len(s.byKey) >= s.max {
		var oldest *Recording
		for _, x := range s.byKey {
			if !x.Seed && (oldest == nil || x.Recorded.Before(oldest.Recorded)) {
				oldest = x
			}
		}
		if oldest == nil {
			return
		}
		delete(s.byKey, oldest.Key)
	}
	s.byKey[r.Key] = &r
}

// lab reports whether the recording is a run of the lab's own statements:
// neither marked Custom nor with an event that says its run was a reader's.
func (r *Recording) lab() bool {
	if r.Custom {
		return false
	}
	for _, e := range r.Events {
		if e.RunState != nil && e.RunState.Info.Custom {
			return false
		}
	}
	return true
}

// Get returns the recording of a key: never one of a reader's own
// statements, however it got in.
func (s *Store) Get(key string) (Recording, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.byKey[key]
	if !ok || !r.lab() {
		return Recording{}, false
	}
	return *r, true
}

// Find returns the recording closest to a setup: that very setup, else the
// correct build of the same ordering, else the correct build of
// zombie-first. ok is false only when the store is empty of all three.
func (s *Store) Find(o experiments.Ordering, broken []string, same bool) (Recording, bool) {
	for _, k := range []string{Key(o, broken, same), Key(o, nil, false), Key(experiments.ZombieFirst, nil, false)} {
		if r, ok := s.Get(k); ok {
			return r, true
		}
	}
	return Recording{}, false
}

// List returns every recording's summary, by key.
func (s *Store) List() []Recording {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Recording, 0, len(s.byKey))
	for _, r := range s.byKey {
		if r.lab() {
			out = append(out, r.Summary())
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// speaksToday checks that a seed's events are in today's event protocol.
func speaksToday(name string, evs []protocol.Event) error {
	for _, e := range evs {
		if e.V != protocol.ProtocolVersion {
			return fmt.Errorf("recording %s speaks protocol %d, not %d: record the seeds again (FENCELAB_UPDATE_SEEDS=1 go test ./server -run TestRecordingSeeds)", name, e.V, protocol.ProtocolVersion)
		}
	}
	return nil
}

// LoadRecording is a finished load lab and its whole event log: its
// ticks, each style's end and its verdict.
type LoadRecording struct {
	Recorded time.Time                     `json:"recorded"`
	Seed     bool                          `json:"seed"`
	Config   experiments.LoadConfig        `json:"config"`
	Verdict  string                        `json:"verdict"`
	Events   []protocol.Event              `json:"events"`
	Results  []experiments.LoadStyleResult `json:"results"`
}

// LoadSeedFile is where the binary's recorded load lab lives.
const LoadSeedFile = "seed/load/load-lab.json"

// loadSeed reads the embedded load lab, if there is one.
func loadSeed() (*LoadRecording, error) {
	b, err := seedFS.ReadFile(LoadSeedFile)
	if err != nil {
		return nil, nil // none recorded yet
	}
	var r LoadRecording
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("recording %s: %w", LoadSeedFile, err)
	}
	if err := speaksToday(LoadSeedFile, r.Events); err != nil {
		return nil, err
	}
	r.Seed = true
	return &r, nil
}

// AddLoad keeps a finished load lab, replacing the one before.
func (s *Store) AddLoad(r LoadRecording) {
	if len(r.Events) == 0 || len(r.Results) == 0 {
		return
	}
	s.mu.Lock()
	s.load = &r
	s.mu.Unlock()
}

// Load returns the latest finished load lab, or the seed.
func (s *Store) Load() (LoadRecording, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.load == nil {
		return LoadRecording{}, false
	}
	return *s.load, true
}
