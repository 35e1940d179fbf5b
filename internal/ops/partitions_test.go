package ops

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

func TestParsePartition(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"orders", "a/b", "x*y"} {
		for _, n := range []int{1, 3, 8} {
			keys, err := pelwarden.Partitions(name, n)
			require.NoError(t, err)
			for i, k := range keys {
				p, ok := ParsePartition(k)
				require.True(t, ok, k)
				require.Equal(t, Partition{Name: name, Count: n, Index: i}, p)
			}
		}
	}
	keys, err := pelwarden.Partitions("orders", 8)
	require.NoError(t, err)
	forged := keys[3][:len(keys[3])-2] + "9}" // another k than Partitions picks
	for _, k := range []string{"orders", "{orders}", "{orders/8/3}", "{orders/8/8/0}", "{orders/x/1/0}", "{/8/1/0}", forged, keys[3] + "x"} {
		_, ok := ParsePartition(k)
		require.False(t, ok, k)
	}
}

func TestPartitionGlob(t *testing.T) {
	t.Parallel()
	require.Equal(t, "{orders/*", PartitionGlob("orders"))
	require.Equal(t, `{a\*b\?c\[d\]e\\/*`, PartitionGlob(`a*b?c[d]e\`))
}
