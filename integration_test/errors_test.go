package integration_test

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/pelwardentest"
)

// Server-side errors come back as the library's codes and match the
// sentinel errors; the server's state is unchanged.
func TestErrors(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		ids := f.Produce(3, order)
		f.LeavePending("a", 3)
		claim := func(mod func(*pelwarden.ClaimArgs)) error {
			a := pelwarden.ClaimArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "c", MaxDeliveries: 1}
			mod(&a)
			_, err := s.lib.Claim(ctx, a)
			return err
		}

		// NOGROUP: a missing group, a missing stream.
		err := claim(func(a *pelwarden.ClaimArgs) { a.Group = "nope" })
		require.ErrorIs(t, err, pelwarden.ErrNoGroup)
		var pe *pelwarden.Error
		require.ErrorAs(t, err, &pe)
		require.Equal(t, "PWNOGROUP", pe.Code)
		require.Contains(t, err.Error(), "XGROUP CREATE")
		missing := pelwardentest.NewKeys(t)
		err = claim(func(a *pelwarden.ClaimArgs) { a.Stream, a.DeadLetterStream = missing.Stream, missing.DeadLetterStream })
		require.ErrorIs(t, err, pelwarden.ErrNoGroup)
		_, err = s.lib.Ack(ctx, pelwarden.AckArgs{Stream: missing.Stream, Group: "g", Consumer: "c", IDs: ids})
		require.ErrorIs(t, err, pelwarden.ErrNoGroup)
		_, err = s.lib.Stats(ctx, pelwarden.StatsArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: "nope"})
		require.ErrorIs(t, err, pelwarden.ErrNoGroup)
		exists, err := s.rdb.Exists(ctx, missing.Stream, missing.DeadLetterStream).Result()
		require.NoError(t, err)
		require.Zero(t, exists, "an error creates no key")

		// WRONGTYPE: the dead-letter key is a hash; the stream key a string.
		require.NoError(t, s.rdb.HSet(ctx, f.DeadLetterStream, "f", "v").Err())
		err = claim(func(a *pelwarden.ClaimArgs) {})
		require.ErrorIs(t, err, pelwarden.ErrWrongType)
		require.Contains(t, err.Error(), f.DeadLetterStream)
		_, err = s.lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "a", IDs: ids})
		require.ErrorIs(t, err, pelwarden.ErrWrongType)
		require.EqualValues(t, 3, f.PendingCount(), "nothing was acked")
		str := pelwardentest.NewKeys(t)
		require.NoError(t, s.rdb.Set(ctx, str.Stream, "x", 0).Err())
		_, err = s.lib.Extend(ctx, pelwarden.ExtendArgs{Stream: str.Stream, Group: "g", Consumer: "c", IDs: ids})
		require.ErrorIs(t, err, pelwarden.ErrWrongType)
		_, err = s.lib.Redrive(ctx, pelwarden.RedriveArgs{DeadLetterStream: f.DeadLetterStream, Stream: f.Stream})
		require.ErrorIs(t, err, pelwarden.ErrWrongType)
	})
}

// Malformed arguments reaching the library directly (raw FCALL, as an older
// or foreign caller might send) get PWBADARG/PWBADID, never a raw Lua error.
func TestLibraryRejectsBadArguments(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t)
		f.Produce(1, order)
		two := []string{f.Stream, f.DeadLetterStream}
		lease := []string{f.Stream, pelwarden.LeaseKeyFor(f.Stream)}
		three := []string{f.Stream, f.DeadLetterStream, pelwarden.LeaseKeyFor(f.Stream)}
		cases := []struct {
			fn   string
			keys []string
			args []any
			code string
		}{
			{pelwarden.FunctionClaim, two, []any{f.Group, "c", "0", "0-0", "abc", "0", "0", "1", "0"}, "PWBADARG"},
			{pelwarden.FunctionClaim, two, []any{f.Group, "c", "0", "0-0", "0", "0", "0", "1", "0"}, "PWBADARG"},
			{pelwarden.FunctionClaim, two, []any{f.Group, "c", "-5", "0-0", "10", "0", "0", "1", "0"}, "PWBADARG"},
			{pelwarden.FunctionClaim, two, []any{f.Group, "c", "0", "zzz", "10", "0", "0", "1", "0"}, "PWBADID"},
			{pelwarden.FunctionClaim, two, []any{f.Group, "c", "0", "0-0", "10", "0", "2", "1", "0"}, "PWBADARG"},
			{pelwarden.FunctionClaim, two, []any{f.Group}, "PWBADARG"},
			{pelwarden.FunctionClaim, []string{f.Stream}, []any{f.Group, "c", "0", "0-0", "10", "0", "0", "1", "0"}, "PWBADARG"},
			{pelwarden.FunctionClaim, two, []any{"", "c", "0", "0-0", "10", "0", "0", "1", "0"}, "PWBADARG"},
			{pelwarden.FunctionAck, []string{f.Stream}, []any{f.Group, "c", "0"}, "PWBADARG"},
			{pelwarden.FunctionAck, []string{f.Stream}, []any{f.Group, "c", "0", "1-x"}, "PWBADID"},
			{pelwarden.FunctionExtend, []string{f.Stream}, []any{f.Group, "c", "18446744073709551616-0"}, "PWBADID"},
			{pelwarden.FunctionDeadLetter, two, []any{f.Group, "c", "0", "", "err", "1-0"}, "PWBADARG"},
			{pelwarden.FunctionReap, []string{f.Stream}, []any{f.Group, "1.5"}, "PWBADARG"},
			{pelwarden.FunctionRedrive, two, []any{"0-0", "10", "maybe"}, "PWBADARG"},
			{pelwarden.FunctionStats, two, []any{}, "PWBADARG"},
			{pelwarden.FunctionTrim, []string{f.Stream}, []any{"0", "0"}, "PWBADARG"},
			{pelwarden.FunctionTrim, []string{f.Stream}, []any{"10", "maybe"}, "PWBADARG"},
			{pelwarden.FunctionTrim, []string{f.Stream}, []any{"10001", "1"}, "PWBADARG"},
			{pelwarden.FunctionTrim, []string{}, []any{"10", "0"}, "PWBADARG"},
			{pelwarden.FunctionTrimPlan, []string{f.Stream}, []any{}, "PWBADARG"},
			{pelwarden.FunctionTrimPlan, []string{f.Stream}, []any{"-1"}, "PWBADARG"},
			{pelwarden.FunctionLease, []string{f.Stream}, []any{f.Group, "c", "1000"}, "PWBADARG"},
			{pelwarden.FunctionLease, lease, []any{f.Group, "c", "0"}, "PWBADARG"},
			{pelwarden.FunctionLease, []string{f.Stream, f.Stream}, []any{f.Group, "c", "1000"}, "PWBADARG"},
			{pelwarden.FunctionLeaseRelease, lease, []any{f.Group, "c", "0", "0"}, "PWBADARG"},
			{pelwarden.FunctionLeaseRelease, lease, []any{f.Group, "c", "1", "0", "1", "x-1", "0"}, "PWBADID"},
			{pelwarden.FunctionLeaseRelease, lease, []any{f.Group, "c", "1", "0", "2", "1-0"}, "PWBADARG"},
			{pelwarden.FunctionLeaseRelease, lease, []any{f.Group, "c", "1", "0", "0", "1", "1"}, "PWBADID"},
			{pelwarden.FunctionLeaseNext, three, []any{f.Group, "c", "1", "1000", "0", "0", "1", "1", "1-", "0"}, "PWBADID"},
			{pelwarden.FunctionLeaseNext, three, []any{f.Group, "c", "1", "1000", "0", "0", "1", "0", "1", "x"}, "PWBADID"},
			{pelwarden.FunctionLeaseNext, three, []any{f.Group, "c", "1", "1000", "0", "0", "-1", "0", "0"}, "PWBADARG"},
			{pelwarden.FunctionLeaseNext, three, []any{f.Group, "c", "1", "1000", "0", "0", "10001", "0", "0"}, "PWBADARG"},
			{pelwarden.FunctionLeaseNext, three, []any{f.Group, "c", "1", "0", "0", "0", "1", "0", "0"}, "PWBADARG"},
			{pelwarden.FunctionLeaseNext, two, []any{f.Group, "c", "1", "1000", "0", "0", "1", "0", "0"}, "PWBADARG"},
		}
		for i, c := range cases {
			err := s.rdb.FCall(ctx, c.fn, c.keys, c.args...).Err()
			require.Error(t, err, "case %d", i)
			require.True(t, redis.HasErrorPrefix(err, c.code), "case %d (%s %v): got %v", i, c.fn, c.args, err)
		}
		require.Zero(t, f.PendingCount(), "nothing was delivered")
		n, err := s.rdb.XLen(ctx, f.Stream).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "nothing was deleted")
	})
}

// NOGROUP from the driver's point of view is permanent: errors.Is works
// through the wrappers' errors.
func TestErrorsAreComparable(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		k := pelwardentest.NewKeys(t)
		_, err := s.lib.Reap(ctx, pelwarden.ReapArgs{Stream: k.Stream, Group: "g", Idle: 1})
		require.True(t, errors.Is(err, pelwarden.ErrNoGroup))
		require.False(t, errors.Is(err, pelwarden.ErrWrongType))
	})
}
