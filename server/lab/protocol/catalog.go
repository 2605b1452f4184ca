package protocol

import (
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/lab/experiments"
)

// Catalog is everything a front end needs to offer a run's choices and to
// say what it sees: the scenarios with their scripts and what a correct
// build shows, the guards, the queue styles and the word table.
type Catalog struct {
	Orderings []OrderingInfo      `json:"orderings"`
	Guards    []GuardText         `json:"guards"`
	Styles    []experiments.Style `json:"styles"`
	Words     WordTable           `json:"words"`
	Version   int                 `json:"protocol_version"`
}

// OrderingInfo is one scenario of the catalog.
type OrderingInfo struct {
	Name     experiments.Ordering     `json:"name"`
	Words    experiments.OrderingText `json:"words"`
	Steps    []experiments.Step       `json:"steps"`
	Expected *experiments.Expected    `json:"expected,omitempty"` // what a correct build shows
}

// NewCatalog returns the catalog.
func NewCatalog() Catalog {
	c := Catalog{Styles: experiments.Styles(), Words: Words(), Version: ProtocolVersion}
	for _, o := range append(experiments.Orderings(), experiments.FreePlay) {
		sc, _ := experiments.Script(o) // every ordering listed has a script
		oi := OrderingInfo{Name: o, Words: experiments.OrderingWords(o), Steps: sc.Steps}
		if x, ok := experiments.ExpectedOutcome(o); ok {
			oi.Expected = &x
		}
		c.Orderings = append(c.Orderings, oi)
	}
	for _, g := range playground.AllGuards() {
		c.Guards = append(c.Guards, GuardWords(g))
	}
	return c
}
