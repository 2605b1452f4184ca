package api

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Where the database is — a connection string, its host, the folder of a
// private cluster and its Unix socket — is kept out of the log: pgconn's
// errors name the socket they dialled, a private cluster's notes name its
// folder, and either would otherwise reach every log line and every
// /readyz during an outage. RedactHandler scrubs them from every record.

// dbPlaces are the forms a database's whereabouts take in a message.
var dbPlaces = regexp.MustCompile(`postgres(?:ql)?://\S*` + // a URL
	`|\b(?:host|hostaddr)=(?:'[^']*'|\S*)` + // a keyword DSN's host
	`|\S*\.s\.PGSQL\.\d+` + // a Unix socket
	`|(?:/[^\s/"'()]+)*/fencelab-pg-[^\s"'()]*`) // a private cluster's folder (pgcluster)

// RedactHandler wraps h so that no record it passes on — its message, its
// attributes, an error's text — says where the database is: connection
// strings, hosts, socket paths and private clusters' folders become
// "(the database)". dsn, if given, names the database whose socket folder
// (a host that is a path) is scrubbed wherever it appears; a network host
// is not, since it is also where other things are reached. Safe for
// concurrent use, as h is.
func RedactHandler(h slog.Handler, dsn string) slog.Handler {
	r := &redacting{next: h}
	if prior, ok := h.(*redacting); ok {
		r = &redacting{next: prior.next, places: prior.places}
	}
	if dsn != "" {
		if cfg, err := pgconn.ParseConfig(dsn); err == nil {
			hosts := []string{cfg.Host}
			for _, f := range cfg.Fallbacks {
				hosts = append(hosts, f.Host)
			}
			for _, h := range hosts {
				if strings.HasPrefix(h, "/") && h != "/" {
					r.places = append(r.places, h, filepath.Dir(h))
				}
			}
		}
	}
	return r
}

// Redact returns s with every mention of where a database is replaced.
func Redact(s string) string { return (&redacting{}).scrub(s) }

type redacting struct {
	next   slog.Handler
	places []string // hosts of the server's own database, scrubbed as they are
}

const hidden = "(the database)"

func (r *redacting) scrub(s string) string {
	for _, p := range r.places {
		if len(p) > 4 && strings.Contains(s, p) { // not "/tmp" alone
			s = strings.ReplaceAll(s, p, hidden)
		}
	}
	if !strings.Contains(s, "postgres") && !strings.Contains(s, "host") && !strings.Contains(s, ".s.PGSQL") && !strings.Contains(s, "fencelab-pg-") {
		return s
	}
	s = dbPlaces.ReplaceAllString(s, hidden)
	// A place scrubbed first, then its socket file after it: one mention.
	for strings.Contains(s, "(the "+hidden) {
		s = strings.ReplaceAll(s, "(the "+hidden, hidden)
	}
	return s
}

func (r *redacting) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		if s := r.scrub(v.String()); s != v.String() {
			return slog.String(a.Key, s)
		}
	case slog.KindGroup:
		in := v.Group()
		out := make([]slog.Attr, len(in))
		for i, g := range in {
			out[i] = r.attr(g)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(out...)}
	case slog.KindAny:
		var s string
		switch x := v.Any().(type) {
		case error:
			s = x.Error()
		case fmt.Stringer:
			s = x.String()
		default:
			s = fmt.Sprint(x)
		}
		if scrubbed := r.scrub(s); scrubbed != s {
			return slog.String(a.Key, scrubbed)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

func (r *redacting) Enabled(ctx context.Context, l slog.Level) bool { return r.next.Enabled(ctx, l) }

func (r *redacting) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, r.scrub(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(r.attr(a))
		return true
	})
	return r.next.Handle(ctx, out)
}

func (r *redacting) WithAttrs(as []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = r.attr(a)
	}
	return &redacting{next: r.next.WithAttrs(out), places: r.places}
}

func (r *redacting) WithGroup(name string) slog.Handler {
	return &redacting{next: r.next.WithGroup(name), places: r.places}
}
