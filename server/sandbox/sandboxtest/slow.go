// Package sandboxtest holds readers' solutions the tests of several
// packages send: ours or the start, changed in one way a stranger might.
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

// BigOwnerClaim returns the start's claim (sandbox.Start) with an owner
// 2^n bytes longer in what it returns: a text doubled n times in a CTE.
// At n = 12 (4 KiB) it is under the value cap; at 21 (2 MiB) over it.
func BigOwnerClaim(n int) string {
	claim := sandbox.Start().Claim
	big := strings.Replace(claim, "RETURNING id, owner, epoch", "RETURNING id, owner || (SELECT s FROM big) AS owner, epoch", 1)
	if big == claim {
		panic("sandboxtest: the start's claim returns no id, owner, epoch")
	}
	return fmt.Sprintf(`WITH RECURSIVE d(s, n) AS (SELECT 'x'::text, 0 UNION ALL SELECT s || s, n + 1 FROM d WHERE n < %d),
big AS (SELECT s FROM d WHERE n = %d)
`, n, n) + big
}
