package pelwarden

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

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

// The ack reply of library 1.0.2 (two elements) and of 1.0.3 (with the ids
// no longer pending) both decode; OwnedElsewhere is what is left of NotOwned.
func TestDecodeAckAndOwnedElsewhere(t *testing.T) {
	t.Parallel()
	old, err := decodeAck([]any{int64(2), []any{"1-0", "2-0"}})
	require.NoError(t, err)
	require.Equal(t, []string{"1-0", "2-0"}, old.OwnedElsewhere(), "without the third element every not-owned id counts")

	r, err := decodeAck([]any{int64(1), []any{"1-0", "2-0", "3-0"}, []any{"2-0"}})
	require.NoError(t, err)
	require.EqualValues(t, 1, r.Acked)
	require.Equal(t, []string{"2-0"}, r.NotPending)
	require.Equal(t, []string{"1-0", "3-0"}, r.OwnedElsewhere())

	_, err = decodeAck([]any{int64(1), []any{}, int64(3)})
	require.ErrorIs(t, err, ErrMalformedReply)
}

// The dead-letter reply of 1.0.1 (four elements) and of 1.0.3 (with the ids
// no longer pending) both decode.
func TestDecodeDeadLetterNotPending(t *testing.T) {
	t.Parallel()
	old, err := decodeDeadLetter([]any{[]any{}, []any{"1-0"}, []any{}, []any{}})
	require.NoError(t, err)
	require.Equal(t, []string{"1-0"}, old.OwnedElsewhere())
	r, err := decodeDeadLetter([]any{[]any{}, []any{"1-0", "2-0"}, []any{}, []any{}, []any{"1-0"}})
	require.NoError(t, err)
	require.Equal(t, []string{"1-0"}, r.NotPending)
	require.Equal(t, []string{"2-0"}, r.OwnedElsewhere())
}

// The trim reply decodes into its fields and every group's bounds; a reply
// of the wrong shape is ErrMalformedReply.
func TestDecodeTrim(t *testing.T) {
	t.Parallel()
	r, err := decodeTrim([]any{int64(3), "5-0", "slow", int64(1), "1-0", "3-0", int64(7),
		[]any{[]any{"fast", int64(0), "", "9-0", "9-1"}, []any{"slow", int64(2), "5-0", "6-0", "5-0"}}, "a future field"})
	require.NoError(t, err)
	require.Equal(t, &TrimResult{Trimmed: 3, Bound: "5-0", Holder: "slow", More: true, FirstID: "1-0", LastID: "3-0", Length: 7,
		Groups: []GroupBound{
			{Name: "fast", LastDelivered: "9-0", Bound: "9-1"},
			{Name: "slow", Pending: 2, OldestPending: "5-0", LastDelivered: "6-0", Bound: "5-0"},
		}}, r)
	for _, bad := range []any{
		nil, []any{int64(0), "1-0", "g", int64(0), "", "", int64(0)},
		[]any{"x", "1-0", "g", int64(0), "", "", int64(0), []any{}},
		[]any{int64(0), "1-0", "g", int64(0), "", "", int64(0), []any{[]any{"g", int64(0), "", "1-0"}}},
		[]any{int64(0), "1-0", "g", int64(0), "", "", int64(0), []any{[]any{"g", "x", "", "1-0", "1-1"}}},
		[]any{int64(0), "1-0", "g", int64(0), "", "", int64(0), "groups"},
	} {
		_, err := decodeTrim(bad)
		require.ErrorIs(t, err, ErrMalformedReply, "%#v", bad)
	}
}

// A least delay goes to the functions rounded up to whole milliseconds,
// plus one for the server's clock: never shorter than asked.
func TestDelayMs(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]int64{
		0:                                    0,
		time.Nanosecond:                      2,
		time.Millisecond:                     2,
		time.Millisecond + time.Nanosecond:   3,
		3*time.Second - 400*time.Microsecond: 3001,
		3 * time.Second:                      3001,
	} {
		if got := delayMs(d); got != want {
			t.Errorf("delayMs(%v) = %d, want %d", d, got, want)
		}
	}
}
