package pelwarden_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

// MaxDeliveries has one reading everywhere: 0 is the default limit,
// NoDeliveryLimit none, a positive n is n; anything else is refused.
func TestDeliveryLimit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in      int
		limit   int
		limited bool
	}{
		{0, pelwarden.DefaultMaxDeliveries, true},
		{pelwarden.NoDeliveryLimit, 0, false},
		{1, 1, true},
		{12, 12, true},
	} {
		limit, limited, err := pelwarden.DeliveryLimit("MaxDeliveries", c.in)
		require.NoError(t, err, "%d", c.in)
		require.Equal(t, c.limit, limit, "%d", c.in)
		require.Equal(t, c.limited, limited, "%d", c.in)
	}
	_, _, err := pelwarden.DeliveryLimit("Config.MaxDeliveries", -2)
	require.ErrorIs(t, err, pelwarden.ErrInvalidArgument)
	require.ErrorContains(t, err, "Config.MaxDeliveries")
	require.ErrorContains(t, err, "got -2")
}
