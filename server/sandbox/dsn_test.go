package sandbox

import "testing"

func TestWithUser_ReplacesTheUserAndDropsThePassword(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"host=/tmp/x/sock port=5432 user=fencelab dbname=postgres sslmode=disable", "host=/tmp/x/sock port=5432 dbname=postgres sslmode=disable user=r_sql"},
		{"host = h  password='s e\\'cret' user=u dbname='my db'", "host=h dbname='my db' user=r_sql"},
		{"postgres://u:secret@db.example:5433/app?sslmode=require&password=x", "postgres://r_sql@db.example:5433/app?sslmode=require"},
		{"postgresql://db.example/app?user=u", "postgresql://r_sql@db.example/app"},
	} {
		got, err := withUser(tc.in, "r_sql")
		if err != nil || got != tc.want {
			t.Errorf("withUser(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"host", "host='open", "=x"} {
		if got, err := withUser(bad, "r_sql"); err == nil {
			t.Errorf("withUser(%q) = %q, want an error", bad, got)
		}
	}
}
