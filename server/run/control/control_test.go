package control_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/run/control"
)

func TestParse_Good(t *testing.T) {
	lim := control.DefaultLimits()
	for in, check := range map[string]func(control.Command) bool{
		`{"action":"step"}`: func(c control.Command) bool { return c.Action == control.Step },
		`{"action":"run","ordering":"zombie-first"}`: func(c control.Command) bool {
			return c.Mode == "auto" && c.Ordering == experiments.ZombieFirst
		},
		`{"action":"run","ordering":"new-owner-first","mode":"step","broken":["epoch-check","owner-check"],"same_identity":true,"lease_ms":300}`: func(c control.Command) bool {
			rc, err := c.RunConfig()
			return err == nil && !rc.Broken.On(playground.EpochCheck) && !rc.Broken.On(playground.OwnerCheck) && rc.SameIdentity && rc.Lease.Milliseconds() == 300
		},
		`{"action":"run","ordering":"clock-skew","skew_ms":5000,"style":"token"}`: func(c control.Command) bool {
			rc, err := c.RunConfig()
			return err == nil && rc.Skew.Milliseconds() == 5000 && !rc.Broken.On(playground.ReceiverCheck)
		},
		`{"action":"run","ordering":"free-play"}`: func(c control.Command) bool { return c.Mode == "" },
		`{"action":"pace","pace_ms":0}`:           func(c control.Command) bool { return *c.PaceMS == 0 },
		`{"action":"pause_worker","worker":"B"}`:  func(c control.Command) bool { return c.Worker == "B" },
		`{"action":"load"}`: func(c control.Command) bool {
			lc := c.LoadConfig()
			return lc.Workers == 8 && lc.Jobs == 500 && lc.LeaseMS == 300 && len(lc.Styles) == 5
		},
		`{"action":"load","workers":4,"jobs":200,"lease_ms":250,"styles":["token","fencelab"]}`: func(c control.Command) bool {
			lc := c.LoadConfig()
			return lc.Workers == 4 && lc.Jobs == 200 && lc.LeaseMS == 250 && lc.Styles[0] == "token"
		},
		`{"action":"add_job"}`:                                func(c control.Command) bool { return json.Valid(c.Payload) },
		`{"action":"add_job","payload":{"n":1}}`:              func(c control.Command) bool { return string(c.Payload) == `{"n":1}` },
		`{"action":"add_worker","skew_ms":-2000,"work_ms":0}`: func(c control.Command) bool { return c.SkewMS == -2000 },
		`{"action":"matrix","lease_ms":200}`:                  func(c control.Command) bool { return c.LeaseMS == 200 },
		`{"action":"batch","name":"epoch-check-same-name"}`: func(c control.Command) bool {
			return c.Name == experiments.BatchEpochCheckSameIdentity // an older spelling, today's name
		},
		`{"action":"run","ordering":"zombie-first","lease_ms":60000,"pace_ms":10000}`: func(c control.Command) bool { return c.LeaseMS == 60000 && *c.PaceMS == 10000 },
		`{"action":"run","ordering":"zombie-first","lease_ms":0,"pace_ms":null}`:      func(c control.Command) bool { return c.LeaseMS == 0 && c.PaceMS == nil },
		`{"action":"add_worker","skew_ms":-3600000,"work_ms":60000}`:                  func(c control.Command) bool { return c.SkewMS == -3600000 && c.WorkMS == 60000 },
		`{"action":"add_job","payload":{"a":"\\u0000","b":"\ud83d\ude00","c":"é"}}`:   func(c control.Command) bool { return len(c.Payload) > 0 },
	} {
		c, err := control.Parse([]byte(in), lim)
		if err != nil || !check(c) {
			t.Errorf("Parse(%s) = %+v, %v", in, c, err)
		}
	}
}

func TestParse_BadInputSaysWhatWasWrong(t *testing.T) {
	lim := control.DefaultLimits()
	for in, want := range map[string]string{
		``:                               "JSON object",
		`[]`:                             "JSON object",
		`null`:                           "JSON object",
		`{"action":"step"}{}`:            "more after it",
		`{}`:                             "no \"action\"",
		`{"action":7}`:                   "no \"action\"",
		`{"action":"dance"}`:             "unknown action",
		`{"action":"step","worker":"A"}`: "takes no fields",
		`{"action":"load","workers":1}`:  "workers 1 must be between 2 and 16",
		`{"action":"load","workers":99999999999999999999}`:                          "wrong types",
		`{"action":"load","jobs":-5}`:                                               "jobs -5 must be between 10 and 5000",
		`{"action":"load","jobs":1e3}`:                                              "wrong types",
		`{"action":"load","lease_ms":100}`:                                          "lease 100ms must be between 200ms and 2s",
		`{"action":"load","styles":["fencelab","fencelab"]}`:                        "named twice",
		`{"action":"load","styles":["\u0000"]}`:                                     "unknown queue style",
		`{"action":"load","styles":["\ud800"]}`:                                     "unknown queue style",
		`{"action":"load","ordering":"zombie-first"}`:                               "does not take \"ordering\"",
		`{"action":"pause_worker","pace_ms":1}`:                                     "does not take \"pace_ms\"",
		`{"action":"run"}`:                                                          "needs an ordering",
		`{"action":"run","ordering":"sideways"}`:                                    "unknown ordering",
		`{"action":"run","ordering":"zombie-first","mode":"fast"}`:                  "auto or step",
		`{"action":"run","ordering":"free-play","mode":"step"}`:                     "free play has no mode",
		`{"action":"run","ordering":"zombie-first","broken":["seatbelt"]}`:          "unknown guard",
		`{"action":"run","ordering":"zombie-first","broken":"epoch-check"}`:         "wrong types",
		`{"action":"run","ordering":"zombie-first","style":"bespoke"}`:              "unknown queue style",
		`{"action":"run","ordering":"zombie-first","lease_ms":5}`:                   "lease_ms 5",
		`{"action":"run","ordering":"zombie-first","lease_ms":99999999}`:            "lease_ms",
		`{"action":"run","ordering":"zombie-first","lease_ms":-1}`:                  "lease_ms",
		`{"action":"run","ordering":"zombie-first","lease_ms":1.5}`:                 "lease_ms 1.5 is not a whole number of milliseconds",
		`{"action":"run","ordering":"zombie-first","pace_ms":9223372036854775807}`:  "pace_ms 9223372036854775807 is more than the most, 10000",
		`{"action":"run","ordering":"zombie-first","lease_ms":9223372036854775808}`: "lease_ms 9223372036854775808 is more than the most, 60000",
		`{"action":"run","ordering":"clock-skew","skew_ms":-9223372036854775809}`:   "skew_ms -9223372036854775809 is less than the least, 0",
		`{"action":"add_worker","work_ms":1e400}`:                                   "work_ms 1e400 is not a whole number",
		`{"action":"add_worker","skew_ms":"5"}`:                                     "skew_ms must be a whole number of milliseconds, not a string",
		`{"action":"add_job","payload":{"a":"\u0000"}}`:                             "payload.a has a NUL",
		`{"action":"add_job","payload":{"a":[1,"\ud800"]}}`:                         "payload.a[1] has the first half of a UTF-16 surrogate pair",
		`{"action":"add_job","payload":{"x y":"\udfff"}}`:                           `payload["x y"] has the second half`,
		`{"action":"add_job","payload":{"\u0000":1}}`:                               "a key of payload has a NUL",
		"{\"action\":\"add_job\",\"payload\":{\"a\":\"\xff\"}}":                     "payload.a is not valid UTF-8",
		`{"action":"run","ordering":"zombie-first","skew_ms":100}`:                  "only to the clock-skew",
		`{"action":"run","ordering":"clock-skew","skew_ms":-100}`:                   "skew_ms",
		`{"action":"pace"}`:                                                   "needs pace_ms",
		`{"action":"pace","pace_ms":-3}`:                                      "pace_ms -3",
		`{"action":"pace","pace_ms":3600000}`:                                 "pace_ms",
		`{"action":"kill_worker"}`:                                            "needs a worker",
		`{"action":"kill_worker","worker":"a; rm -rf /"}`:                     "not a worker label",
		`{"action":"add_job","payload":null}`:                                 "null",
		`{"action":"add_job","payload":"` + strings.Repeat("x", 70000) + `"}`: "limit",
		`{"action":"add_worker","work_ms":-1}`:                                "work_ms",
		`{"action":"add_worker","skew_ms":99999999999}`:                       "skew_ms",
		`{"action":"matrix","lease_ms":1}`:                                    "lease_ms",
	} {
		_, err := control.Parse([]byte(in), lim)
		if err == nil {
			t.Errorf("Parse(%.60s) succeeded, want an error with %q", in, want)
			continue
		}
		if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Parse(%.60s) = %q, want one line with %q", in, err, want)
		}
	}
}

// FuzzParse: any input is either refused with a sentence, or decodes to a
// command whose action is known and which decodes the same when encoded
// again. Never a panic.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"action":"step"}`, `{"action":"run","ordering":"zombie-first","broken":["epoch-check"],"lease_ms":300}`,
		`{"action":"pause_worker","worker":"A"}`, `{"action":"add_job","payload":{"a":[1,2]}}`, `{"action":"pace","pace_ms":10}`, `{`, `{"action":"run","ordering":"clock-skew","skew_ms":9}`} {
		f.Add([]byte(s))
	}
	lim := control.DefaultLimits()
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := control.Parse(b, lim)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error with no words")
			}
			return
		}
		if !strings.Contains(strings.Join(control.Actions(), ","), string(c.Action)) {
			t.Fatalf("decoded unknown action %q", c.Action)
		}
		again, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := control.Parse(again, lim)
		if err != nil {
			t.Fatalf("re-encoded %s no longer decodes: %v", again, err)
		}
		if c2.Action != c.Action || c2.Ordering != c.Ordering || c2.Worker != c.Worker {
			t.Fatalf("round trip changed the command: %+v vs %+v", c, c2)
		}
	})
}
