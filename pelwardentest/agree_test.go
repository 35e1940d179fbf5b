package pelwardentest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/pelwardentest"
)

// The kit's Reclaim and a driver consumer apply a handler's result the
// same way (both through driver.OutcomeOf): the same handler leaves the
// entry in the same state, whatever it returns, a RetryAfter longer than
// MinIdle included (held, not released).
func TestKitAgreesWithDriver(t *testing.T) {
	t.Parallel()
	const minIdle = 4 * time.Second
	srv := pelwardentest.Start(t)
	for _, c := range []struct {
		name    string
		outcome error
		want    string
	}{
		{"ack", nil, "acked"},
		{"dead-letter", driver.DeadLetter(errors.New("poison")), "dead-lettered: reason handler, error poison"},
		{"retry within MinIdle", driver.RetryAfter(minIdle/2, errors.New("busy")), "pending at c, claimable in 2s"},
		{"retry beyond MinIdle", driver.RetryAfter(10*minIdle, errors.New("busy")), "pending at c, claimable in 4s"},
		{"error", errors.New("boom"), "pending at c, claimable in 0s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := driver.HandlerFunc(func(context.Context, *driver.Message) error { return c.outcome })

			kit := srv.NewFixture(t)
			id := kit.Produce(1, nil)[0]
			kit.LeavePending("crashed", 1)
			// Idle long enough for a reclaim pass with MinIdle.
			require.NoError(t, kit.Client().Do(kit.Context(), "XCLAIM", kit.Stream, kit.Group, "crashed", 0, id,
				"IDLE", (2*minIdle).Milliseconds(), "JUSTID").Err())
			kit.Reclaim(pelwardentest.ReclaimArgs{Consumer: "c", MinIdle: minIdle, Handler: h}) // the default limit, as the driver's
			byKit := settledState(t, kit, id, minIdle)

			drv := srv.NewFixture(t)
			id = drv.Produce(1, nil)[0]
			returned := make(chan struct{}, 1)
			consumer := drv.RunConsumer(driver.Config{Consumer: "c", MinIdle: minIdle,
				Handler: driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
					defer func() { returned <- struct{}{} }()
					return h.Handle(ctx, m)
				})})
			<-returned
			require.NoError(t, consumer.Stop()) // the outcome is applied and acks flushed
			byDriver := settledState(t, drv, id, minIdle)

			require.Equal(t, c.want, byKit, "the kit")
			require.Equal(t, byKit, byDriver, "the driver agrees with the kit")
		})
	}
}

// settledState describes what became of id: acked, dead-lettered (reason
// and error), or pending (owner, and in how many seconds a reclaim pass
// with minIdle may take it).
func settledState(t *testing.T, f *pelwardentest.Fixture, id string, minIdle time.Duration) string {
	t.Helper()
	for _, d := range f.DeadLetters() {
		if d.OriginalID == id {
			return fmt.Sprintf("dead-lettered: reason %s, error %s", d.Reason, d.Error)
		}
	}
	p, ok := f.PendingEntry(id)
	if !ok {
		return "acked"
	}
	in := max(minIdle-p.Idle, 0).Round(time.Second)
	return fmt.Sprintf("pending at %s, claimable in %v", p.Consumer, in)
}
