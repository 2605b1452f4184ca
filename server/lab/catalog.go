package lab

import "github.com/fencelab/fencelab/engine/playground"

// Catalog is everything a front end needs to offer a run's choices and to
// say what it sees: the scenarios with their scripts and what a correct
// build shows, the guards, the queue styles and the word table.
type Catalog struct {
	Orderings []OrderingInfo `json:"orderings"`
	Guards    []GuardText    `json:"guards"`
	Styles    []Style        `json:"styles"`
	Words     WordTable      `json:"words"`
	Version   int            `json:"protocol_version"`
}

// OrderingInfo is one scenario of the catalog.
type OrderingInfo struct {
	Name     Ordering     `json:"name"`
	Words    OrderingText `json:"words"`
	Steps    []Step       `json:"steps"`
	Expected *Expected    `json:"expected,omitempty"` // what a correct build shows
}

// NewCatalog returns the catalog.
func NewCatalog() Catalog {
	c := Catalog{Styles: Styles(), Words: Words(), Version: ProtocolVersion}
	for _, o := range append(Orderings(), FreePlay) {
		sc, _ := Script(o) // every ordering listed has a script
		oi := OrderingInfo{Name: o, Words: OrderingWords(o), Steps: sc.Steps}
		if x, ok := ExpectedOutcome(o); ok {
			oi.Expected = &x
		}
		c.Orderings = append(c.Orderings, oi)
	}
	for _, g := range playground.AllGuards() {
		c.Guards = append(c.Guards, GuardWords(g))
	}
	return c
}
