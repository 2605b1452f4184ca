// Package sandboxtest holds readers' solutions the tests of several
// packages send: ours, changed in one way a stranger might.
package sandboxtest

import (
	"fmt"
	"strings"

	"github.com/fencelab/fencelab/server/sandbox"
)

// SlowClaimFor returns our statements with a claim that, for the worker
// named owner alone, counts the rows of five lists of a hundred values
// joined (10^10 rows in 8 queries, under sandbox.MaxQueries): nothing
// held, no temp file, only CPU, so only the statement timeout ends it.
// It panics if our claim has no ORDER BY to put the clause before.
func SlowClaimFor(owner string) sandbox.Solution {
	var hundred []string
	for i := range 100 {
		hundred = append(hundred, fmt.Sprintf("(%d)", i))
	}
	var from []string
	for i := range 5 {
		from = append(from, fmt.Sprintf("(VALUES %s) v%d(x)", strings.Join(hundred, ","), i))
	}
	sol := sandbox.Ours()
	slow := fmt.Sprintf("AND (:owner <> '%s' OR (SELECT count(*) FROM %s) > 0)\n        ORDER BY", owner, strings.Join(from, ", "))
	claim := strings.Replace(sol.Claim, "ORDER BY", slow, 1)
	if claim == sol.Claim {
		panic("sandboxtest: our claim has no ORDER BY")
	}
	sol.Claim = claim
	return sol
}
