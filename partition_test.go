package pelwarden_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

// The names are stable forever: these were computed once, by this code and
// by an independent Python implementation of the documented scheme.
func TestPartitionsAreStable(t *testing.T) {
	t.Parallel()
	got, err := pelwarden.Partitions("events", 6)
	require.NoError(t, err)
	require.Equal(t, []string{"{events/6/0/2}", "{events/6/1/22}", "{events/6/2/1}", "{events/6/3/1}", "{events/6/4/1}", "{events/6/5/3}"}, got)
	got, err = pelwarden.Partitions("orders", 2)
	require.NoError(t, err)
	require.Equal(t, []string{"{orders/2/0/0}", "{orders/2/1/0}"}, got)
}

// Partition i lands in slot range i of n, with its dead-letter stream, so n
// partitions on k primaries of the default layout (n a multiple of k) put
// n/k on each.
func TestPartitionsCoverTheSlotRanges(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 3, 6, 12, 16, 100, 1024} {
		names, err := pelwarden.Partitions("orders.v2", n)
		require.NoError(t, err)
		require.Len(t, names, n)
		seen := map[string]bool{}
		for i, name := range names {
			slot := pelwarden.Slot(name)
			require.GreaterOrEqual(t, slot, i*pelwarden.SlotCount/n, "%s (n %d)", name, n)
			require.Less(t, slot, (i+1)*pelwarden.SlotCount/n, "%s (n %d)", name, n)
			require.Equal(t, slot, pelwarden.Slot(pelwarden.DeadLetterStreamFor(name)))
			require.False(t, seen[name])
			seen[name] = true
		}
		for _, k := range []int{1, 2, 3} { // primaries of the default layout
			if n%k != 0 {
				continue
			}
			per := map[int]int{}
			for _, name := range names {
				per[pelwarden.Slot(name)*k/pelwarden.SlotCount]++
			}
			for p := range k {
				require.Equal(t, n/k, per[p], "n %d on %d primaries", n, k)
			}
		}
	}
	// Streams of one name differ from another's: n = 1 does not put every
	// stream in one slot.
	a, err := pelwarden.Partitions("orders", 1)
	require.NoError(t, err)
	b, err := pelwarden.Partitions("payments", 1)
	require.NoError(t, err)
	require.NotEqual(t, pelwarden.Slot(a[0]), pelwarden.Slot(b[0]))
}

func TestPartitionsRefusesBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		n    int
	}{
		{"", 2}, {"{orders}", 2}, {"or}ders", 2}, {"orders", 0}, {"orders", -1},
		{"orders", pelwarden.MaxPartitions + 1}, {strings.Repeat("x", pelwarden.MaxNameBytes), 2},
	} {
		_, err := pelwarden.Partitions(tc.name, tc.n)
		require.ErrorIs(t, err, pelwarden.ErrInvalidArgument, "%q %d", tc.name, tc.n)
	}
	names, err := pelwarden.Partitions("x", pelwarden.MaxPartitions)
	require.NoError(t, err)
	require.Len(t, names, pelwarden.MaxPartitions)
}

// FNV-1a 64 modulo n, checked against values computed independently.
func TestPartitionFor(t *testing.T) {
	t.Parallel()
	for key, want := range map[string][2]int{
		"": {5, 37}, "a": {4, 996}, "customer-42": {2, 86}, "order-1001": {0, 348},
	} {
		require.Equal(t, want[0], pelwarden.PartitionFor(key, 6), key)
		require.Equal(t, want[1], pelwarden.PartitionFor(key, 1000), key)
	}
	counts := make([]int, 8)
	for i := range 8000 {
		counts[pelwarden.PartitionFor("customer-"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+string(rune(i)), 8)]++
	}
	for p, c := range counts {
		require.Greater(t, c, 500, "partition %d gets its share: %v", p, counts)
	}
	require.Panics(t, func() { pelwarden.PartitionFor("k", 0) })
}
