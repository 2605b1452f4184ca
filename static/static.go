// Package static holds the page's CSS, ES modules and icons, embedded in
// the binary: no build step, no CDN. Files are served under a version
// derived from their content, so they can be cached for a year.
package static

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"sort"
	"sync"
)

//go:embed css js img
var FS embed.FS

var (
	versionOnce sync.Once
	version     string
)

// Version returns a short hash of every embedded file: it changes when
// any file changes, so a URL that carries it never serves stale content.
func Version() string {
	versionOnce.Do(func() {
		h := sha256.New()
		var paths []string
		_ = fs.WalkDir(FS, ".", func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				paths = append(paths, p)
			}
			return nil
		})
		sort.Strings(paths)
		for _, p := range paths {
			b, _ := FS.ReadFile(p)
			h.Write([]byte(p))
			h.Write(b)
		}
		version = hex.EncodeToString(h.Sum(nil))[:12]
	})
	return version
}
