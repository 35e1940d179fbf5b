package pelwarden_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

func TestParseID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want pelwarden.StreamID
	}{
		{"0-0", pelwarden.StreamID{}},
		{"1700000000000-7", pelwarden.StreamID{Ms: 1700000000000, Seq: 7}},
		{"18446744073709551615-18446744073709551615", pelwarden.StreamID{Ms: 1<<64 - 1, Seq: 1<<64 - 1}},
		{"007-01", pelwarden.StreamID{Ms: 7, Seq: 1}},
	} {
		got, err := pelwarden.ParseID(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
	require.Equal(t, "1700000000000-7", pelwarden.StreamID{Ms: 1700000000000, Seq: 7}.String())
	for _, bad := range []string{"", "0", "$", "-", "+", "1-", "-1", "1-2-3", "a-1", "1-b", " 1-1", "18446744073709551616-0", "1-18446744073709551616", "1.5-0"} {
		_, err := pelwarden.ParseID(bad)
		require.ErrorIs(t, err, pelwarden.ErrInvalidID, "%q", bad)
		require.ErrorIs(t, err, pelwarden.ErrInvalidArgument, "%q", bad)
	}
	a, b := pelwarden.StreamID{Ms: 1, Seq: 9}, pelwarden.StreamID{Ms: 2, Seq: 0}
	require.Equal(t, -1, a.Compare(b))
	require.Equal(t, 1, b.Compare(a))
	require.Equal(t, 0, a.Compare(a))
	require.Equal(t, -1, a.Compare(pelwarden.StreamID{Ms: 1, Seq: 10}))
}

func TestCompareIDs(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"9-0", "10-0", -1},
		{"10-2", "10-1", 1},
		{"10-1", "10-1", 0},
		{"bad", "1-0", -1},
		{"1-0", "bad", 1},
		{"a", "b", -1},
	} {
		require.Equal(t, c.want, pelwarden.CompareIDs(c.a, c.b), "%q vs %q", c.a, c.b)
	}
}
