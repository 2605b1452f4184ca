package hook

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// Every guard has a name of its own and a line of help, and its name
// parses back to it: the flags, the commands and the events all name a
// guard this way.
func TestGuard_EveryGuardHasOneNameAndItsHelp(t *testing.T) {
	seen := map[string]Guard{}
	for _, g := range AllGuards() {
		name := g.String()
		if name == "" || strings.HasPrefix(name, "guard(") {
			t.Errorf("guard %d has no name", uint8(g))
		}
		if other, ok := seen[name]; ok {
			t.Errorf("guards %d and %d are both %q", uint8(other), uint8(g), name)
		}
		seen[name] = g
		if g.Help() == "" {
			t.Errorf("guard %s has no help", name)
		}
		p, err := ParseGuard(name)
		if err != nil || p != g {
			t.Errorf("ParseGuard(%q) = %v, %v; want %v", name, p, err, g)
		}
		b, err := g.MarshalText()
		if err != nil || string(b) != name {
			t.Errorf("%v.MarshalText() = %q, %v", g, b, err)
		}
	}
	if len(seen) != 7 {
		t.Errorf("%d guards, want the article's 7", len(seen))
	}
	if s := Guard(numGuards).String(); s != "guard(7)" {
		t.Errorf("an unknown guard is %q", s)
	}
	if _, err := Guard(numGuards).MarshalText(); err == nil {
		t.Error("an unknown guard encoded without an error")
	}
}

// A name that is not exactly a guard's is refused with a *ParseError that
// lists the names there are: case, spaces, NULs, invalid UTF-8 and a
// name's prefix alike.
func TestParseGuard_RefusesWhatIsNotExactlyAName(t *testing.T) {
	for _, bad := range []string{
		"", "EPOCH-CHECK", " epoch-check", "epoch-check ", "epoch", "epoch-check\x00",
		"epoch\x00check", "\xed\xa0\x80", "epoch-check\xff", "epoch_check", "epoch-check,owner-check",
		strings.Repeat("a", 1<<16),
	} {
		g, err := ParseGuard(bad)
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("ParseGuard(%.40q) = %v, %v; want a *ParseError", bad, g, err)
			continue
		}
		if !strings.Contains(pe.Error(), "want one of status-check, owner-check") {
			t.Errorf("ParseGuard(%.40q): %q does not list the guards", bad, pe.Error())
		}
	}
}

// A set of broken guards goes through JSON and back as itself, every one
// of the 128 sets, and says which guards it keeps.
func TestGuards_EverySetRoundTrips(t *testing.T) {
	for set := Guards(0); set < 1<<numGuards; set++ {
		if !set.Valid() {
			t.Fatalf("%b is not valid", set)
		}
		b, err := json.Marshal(set)
		if err != nil {
			t.Fatal(err)
		}
		var back Guards
		if err := json.Unmarshal(b, &back); err != nil || back != set {
			t.Fatalf("%b encoded as %s came back as %b (%v)", set, b, back, err)
		}
		for _, g := range AllGuards() {
			if set.On(g) == (set&(1<<g) != 0) {
				t.Fatalf("%b.On(%v) = %v", set, g, set.On(g))
			}
		}
		if len(set.Broken()) != len(set.Names()) {
			t.Fatalf("%b: %v against %v", set, set.Broken(), set.Names())
		}
	}
	if Guards(1 << numGuards).Valid() {
		t.Error("a set with a bit past the last guard is valid")
	}
	if s := Guards(0).String(); s != "all guards on" {
		t.Errorf("the correct build is %q", s)
	}
	if n := Guards(0).Names(); n == nil || len(n) != 0 {
		t.Errorf("no guard broken has names %#v, want [] (JSON shows [])", n)
	}
}

// Break, Keep and ParseBroken change only the guard they name.
func TestGuards_BreakAndKeepChangeOneGuard(t *testing.T) {
	for _, g := range AllGuards() {
		gs := Guards(0).Break(g)
		if gs.On(g) || len(gs.Broken()) != 1 || gs.Broken()[0] != g {
			t.Errorf("Break(%v) = %v", g, gs)
		}
		if gs.Keep(g) != 0 {
			t.Errorf("Keep(%v) after Break left %v", g, gs.Keep(g))
		}
		other := AllGuards()[(int(g)+1)%int(numGuards)]
		if both := gs.Break(other); both.Keep(g) != Guards(0).Break(other) {
			t.Errorf("Keep(%v) of %v left %v, want %v alone broken", g, both, both.Keep(g), other)
		}
		p, err := ParseBroken([]string{g.String()})
		if err != nil || p != gs {
			t.Errorf("ParseBroken(%v) = %v, %v", g, p, err)
		}
	}
}

// A bad list changes nothing: UnmarshalText and Set keep the set as it
// was, and the whole list is refused, not its good names taken.
func TestGuards_ABadListChangesNothing(t *testing.T) {
	for _, bad := range []string{"epoch-check,nope", "nope,epoch-check", "epoch-check,,owner-check", "epoch-check\x00", "\xed\xa0\x80"} {
		gs := Guards(0).Break(DBClock)
		if err := gs.UnmarshalText([]byte(bad)); err == nil {
			t.Errorf("UnmarshalText(%q) took it", bad)
		}
		if gs != Guards(0).Break(DBClock) {
			t.Errorf("UnmarshalText(%q) changed the set to %v", bad, gs)
		}
		var j struct{ Broken Guards }
		j.Broken = Guards(0).Break(DBClock)
		if err := json.Unmarshal([]byte(`{"Broken":`+jsonString(bad)+`}`), &j); err == nil {
			t.Errorf("JSON %q took it", bad)
		}
		if j.Broken != Guards(0).Break(DBClock) {
			t.Errorf("JSON %q changed the set to %v", bad, j.Broken)
		}
		if err := gs.Set(bad); err == nil {
			t.Errorf("Set(%q) took it", bad)
		}
		if gs != Guards(0).Break(DBClock) {
			t.Errorf("Set(%q) changed the set to %v", bad, gs)
		}
	}
	var gs Guards
	if err := gs.UnmarshalText([]byte("  ")); err != nil || gs != 0 {
		t.Errorf("blank text: %v, %v", gs, err)
	}
	// Set, a repeatable flag, adds to what was set before.
	if err := gs.Set("epoch-check"); err != nil {
		t.Fatal(err)
	}
	if err := gs.Set(" owner-check , db-clock"); err != nil {
		t.Fatal(err)
	}
	if want := Guards(0).Break(EpochCheck).Break(OwnerCheck).Break(DBClock); gs != want {
		t.Errorf("Set twice: %v, want %v", gs, want)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
