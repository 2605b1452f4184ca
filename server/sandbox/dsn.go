package sandbox

import (
	"errors"
	"net/url"
	"strings"
)

// DatabaseURL returns base, a libpq connection string (a postgres:// URI
// or key=value pairs), with the role as its user and no password in it:
// give the role's Password to the program as PGPASSWORD, which libpq and
// the drivers built on it read. Everything else in base (host, port,
// database, TLS settings) is kept as it was written.
func (r *Role) DatabaseURL(base string) (string, error) {
	return withUser(base, r.name)
}

var errBadDSN = errors.New("the database URL is neither a postgres:// URI nor key=value pairs")

func withUser(base, user string) (string, error) {
	if strings.HasPrefix(base, "postgres://") || strings.HasPrefix(base, "postgresql://") {
		u, err := url.Parse(base)
		if err != nil {
			return "", errBadDSN // its words could quote a password
		}
		u.User = url.User(user)
		q := u.Query()
		q.Del("user")
		q.Del("password")
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	pairs, err := splitPairs(base)
	if err != nil {
		return "", err
	}
	var out []string
	for _, p := range pairs {
		k, _, _ := strings.Cut(p, "=")
		if k == "user" || k == "password" {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(append(out, "user="+quoteValue(user)), " "), nil
}

// splitPairs splits a key=value connection string into its pairs, as
// written ("key=value" or "key='quoted value'"), spaces around = removed.
func splitPairs(s string) ([]string, error) {
	var pairs []string
	rs := []rune(s)
	i := 0
	skip := func() {
		for i < len(rs) && (rs[i] == ' ' || rs[i] == '\t' || rs[i] == '\n' || rs[i] == '\r') {
			i++
		}
	}
	for {
		skip()
		if i >= len(rs) {
			return pairs, nil
		}
		start := i
		for i < len(rs) && rs[i] != '=' && rs[i] != ' ' && rs[i] != '\t' {
			i++
		}
		key := string(rs[start:i])
		skip()
		if key == "" || i >= len(rs) || rs[i] != '=' {
			return nil, errBadDSN
		}
		i++
		skip()
		var v strings.Builder
		if i < len(rs) && rs[i] == '\'' {
			i++
			for ; i < len(rs) && rs[i] != '\''; i++ {
				if rs[i] == '\\' && i+1 < len(rs) {
					i++
				}
				v.WriteRune(rs[i])
			}
			if i >= len(rs) {
				return nil, errBadDSN
			}
			i++
		} else {
			for ; i < len(rs) && rs[i] != ' ' && rs[i] != '\t' && rs[i] != '\n'; i++ {
				if rs[i] == '\\' && i+1 < len(rs) {
					i++
				}
				v.WriteRune(rs[i])
			}
		}
		pairs = append(pairs, key+"="+quoteValue(v.String()))
	}
}

// quoteValue quotes a key=value connection string's value.
func quoteValue(v string) string {
	if v != "" && !strings.ContainsAny(v, " \t\n\\'") {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}
