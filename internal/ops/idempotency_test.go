package ops

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// A server without IDMP reports no idmp-maxsize: nothing to show.
func TestIdempotencyOf(t *testing.T) {
	t.Parallel()
	require.Nil(t, IdempotencyOf(nil))
	require.Nil(t, IdempotencyOf(&redis.XInfoStream{Length: 3}), "Redis before 8.6, Valkey")
	got := IdempotencyOf(&redis.XInfoStream{IDMPDuration: 3600, IDMPMaxSize: 500, PIDsTracked: 2, IIDsTracked: 501, IIDsAdded: 501, IIDsDuplicates: 500})
	require.Equal(t, &Idempotency{Duplicates: 500, Added: 501, Producers: 2, IDs: 501, MaxSize: 500, Duration: time.Hour}, got)
}
