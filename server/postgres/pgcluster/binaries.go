package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ErrNoBinaries reports that no PostgreSQL server binaries (initdb and
// postgres from the same folder) were found. Its message is a single line
// that tells the user what to install, or to set DATABASE_URL instead, so
// callers can print it as is.
var ErrNoBinaries = errors.New("no PostgreSQL server binaries found (initdb, postgres): " +
	"install them (Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql) or set DATABASE_URL")

// Binaries locates initdb and postgres. Both always come from the same
// folder, because initdb runs the postgres next to it and refuses a
// postgres of another version.
type Binaries struct {
	Initdb   string
	Postgres string
	// Version is the server version reported by `postgres --version`,
	// e.g. "15.18".
	Version string
}

// defaultSearchDirs are the glob patterns of the folders where packagers
// usually put the server binaries, which are often not on PATH (Debian
// keeps them under /usr/lib/postgresql/<major>/bin, for example).
var defaultSearchDirs = []string{
	"/usr/lib/postgresql/*/bin",
	"/usr/pgsql-*/bin",
	"/usr/local/pgsql/bin",
	"/opt/homebrew/opt/postgresql*/bin",
	"/usr/local/opt/postgresql*/bin",
}

// FindBinaries locates initdb and postgres: first on PATH, then in the
// usual installation folders, preferring the highest major version. It
// returns ErrNoBinaries when there are none.
func FindBinaries() (Binaries, error) {
	return findBinaries(defaultSearchDirs)
}

// findBinaries is FindBinaries with an injectable list of folder patterns,
// so tests can point it at fake folders.
func findBinaries(patterns []string) (Binaries, error) {
	dir, ok := findOnPath()
	if !ok {
		dir, ok = findInDirs(patterns)
	}
	if !ok {
		return Binaries{}, ErrNoBinaries
	}
	b := Binaries{
		Initdb:   filepath.Join(dir, "initdb"),
		Postgres: filepath.Join(dir, "postgres"),
	}
	v, err := serverVersion(b.Postgres)
	if err != nil {
		return Binaries{}, fmt.Errorf("postgres --version: %w", err)
	}
	b.Version = v
	return b, nil
}

// findOnPath returns the real folder (symlinks resolved) of an initdb or
// postgres found on PATH, provided its sibling is there too. Resolving
// matters: /usr/local/bin/initdb is often a link into the versioned folder.
func findOnPath() (string, bool) {
	for _, name := range []string{"initdb", "postgres"} {
		p, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue
		}
		if dir := filepath.Dir(real); hasBoth(dir) {
			return dir, true
		}
	}
	return "", false
}

// findInDirs returns the first folder matching patterns that holds both
// binaries. Within one pattern, higher versions win (compared numerically,
// so 15 beats 9.6).
func findInDirs(patterns []string) (string, bool) {
	for _, pat := range patterns {
		matches, err := filepath.Glob(pat)
		if err != nil {
			continue
		}
		// Only the part the wildcard matched carries the version.
		fixed := pat
		if i := strings.IndexAny(pat, "*?["); i >= 0 {
			fixed = pat[:i]
		}
		sort.SliceStable(matches, func(i, j int) bool {
			vi := pathVersion(strings.TrimPrefix(matches[i], fixed))
			vj := pathVersion(strings.TrimPrefix(matches[j], fixed))
			return compareVersions(vi, vj) > 0
		})
		for _, dir := range matches {
			if hasBoth(dir) {
				return dir, true
			}
		}
	}
	return "", false
}

// hasBoth reports whether dir holds executable initdb and postgres files.
func hasBoth(dir string) bool {
	return isExecutable(filepath.Join(dir, "initdb")) && isExecutable(filepath.Join(dir, "postgres"))
}

// isExecutable reports whether path is a regular file (after following
// symlinks) with an execute bit set.
func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

var versionRE = regexp.MustCompile(`\d+(?:\.\d+)*`)

// pathVersion extracts the version numbers from (the variable part of) a
// folder path, such as "15/bin" or "@16/bin".
func pathVersion(path string) []int {
	var v []int
	for _, m := range versionRE.FindAllString(path, -1) {
		for _, part := range strings.Split(m, ".") {
			n, _ := strconv.Atoi(part)
			v = append(v, n)
		}
	}
	return v
}

// compareVersions compares two version tuples numerically; a missing
// component counts as lower than any present one.
func compareVersions(a, b []int) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	switch {
	case len(a) < len(b):
		return -1
	case len(a) > len(b):
		return 1
	}
	return 0
}

// serverVersion runs `postgres --version` and returns the version number,
// e.g. "15.18" from "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)".
func serverVersion(postgres string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, postgres, "--version").Output()
	if err != nil {
		return "", err
	}
	line := strings.TrimSpace(string(out))
	if _, rest, ok := strings.Cut(line, "(PostgreSQL)"); ok {
		line = rest
	}
	v := versionRE.FindString(line)
	if v == "" {
		return "", fmt.Errorf("unexpected output %q", strings.TrimSpace(string(out)))
	}
	return v, nil
}
