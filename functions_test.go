package pelwarden

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// idNum parses part i (0: milliseconds, 1: sequence) of a stream id.
func idNum(t *testing.T, id string, i int) uint64 {
	n, err := strconv.ParseUint(strings.Split(id, "-")[i], 10, 64)
	require.NoError(t, err)
	return n
}

func TestBoundsFirstLast(t *testing.T) {
	t.Parallel()
	// Orders and parses numerically: "9-0" < "10-0", "5-9" < "5-10", and
	// leading zeros count for nothing.
	ids := []string{"10-0", "9-0", "5-10", "5-9", "18446744073709551615-0", "0-1", "007-3", "7-2"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var in []string
		var args []any
		for _, i := range rng.Perm(len(ids))[:1+rng.IntN(len(ids))] {
			in = append(in, ids[i])
			args = append(args, ids[i])
		}
		before := fmt.Sprint(args)
		boundsFirstLast(args)
		got := make([]string, len(args))
		for i, a := range args {
			got[i] = a.(string)
		}
		sorted := slices.SortedFunc(slices.Values(got), func(a, b string) int {
			return cmp.Or(cmp.Compare(idNum(t, a, 0), idNum(t, b, 0)), cmp.Compare(idNum(t, a, 1), idNum(t, b, 1)))
		})
		if got[0] != sorted[0] || got[len(got)-1] != sorted[len(sorted)-1] {
			t.Fatalf("boundsFirstLast(%s) = %v: want %s first and %s last", before, got, sorted[0], sorted[len(sorted)-1])
		}
		if want := fmt.Sprint(slices.Sorted(slices.Values(in))); fmt.Sprint(slices.Sorted(slices.Values(got))) != want {
			t.Fatalf("boundsFirstLast(%s) = %v: not a permutation", before, got)
		}
	}
}
