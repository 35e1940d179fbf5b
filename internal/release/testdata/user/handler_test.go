package main

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/pelwardentest"
)

// The README's handler test (its quick start), as a user writes it.

func TestMain(m *testing.M) { pelwardentest.Main(m) }

func TestBadOrdersAreDeadLettered(t *testing.T) {
	t.Parallel()
	f := pelwardentest.Start(t).NewFixture(t)
	good, bad := f.Add("order", "42"), f.Add("order", "forty-two")
	f.RunConsumer(driver.Config{MaxDeliveries: 3, Handler: driver.HandlerFunc(
		func(ctx context.Context, m *driver.Message) error {
			order, _ := m.Value("order")
			if _, err := strconv.Atoi(order); err != nil {
				return fmt.Errorf("bad order %q", order)
			}
			return nil
		})})
	f.Within(10*time.Second).RequireDeadLettered(bad, pelwardentest.DeadLettered{
		Reason: pelwarden.ReasonMaxDeliveries})
	f.RequireAcked(good)
	f.RequirePELEmpty()
}
