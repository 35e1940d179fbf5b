package pelwardentest_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/pelwardentest"
)

// The README's "Testing your handlers" example, as written there.
func TestBadOrdersAreDeadLettered(t *testing.T) {
	t.Parallel()
	f := pelwardentest.Start(t).NewFixture(t) // own stream, group and dead-letter stream
	good, bad := f.Add("order", "42"), f.Add("order", "forty-two")
	f.RunConsumer(driver.Config{MaxDeliveries: 3, Handler: driver.HandlerFunc(
		func(ctx context.Context, m *driver.Message) error {
			order, _ := m.Value("order")
			if _, err := strconv.Atoi(order); err != nil {
				return fmt.Errorf("bad order %q", order) // retried, until MaxDeliveries
			}
			return nil
		})})
	f.Within(10*time.Second).RequireDeadLettered(bad, pelwardentest.DeadLettered{
		Reason: pelwarden.ReasonMaxDeliveries})
	f.RequireAcked(good)
	f.RequirePELEmpty()
}

// The README shows TestBadOrdersAreDeadLettered exactly as this file has it.
func TestReadmeShowsThisExample(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	src, err := os.ReadFile("readme_test.go")
	require.NoError(t, err)
	const start = "func TestBadOrdersAreDeadLettered(t *testing.T) {\n"
	i := strings.Index(string(readme), start)
	require.GreaterOrEqual(t, i, 0, "README.md has no %q", start)
	body := string(readme)[i:]
	body = body[:strings.Index(body, "\n}\n")+3]
	require.Contains(t, string(src), body, "README.md's example differs from readme_test.go")
	require.Less(t, strings.Count(body, "\n"), 20, "the README example stays under 20 lines")
}
