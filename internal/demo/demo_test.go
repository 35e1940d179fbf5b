package demo

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pelwarden/pelwarden"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOrderPlan(t *testing.T) {
	t.Parallel()
	count := func(ks []orderKind) map[orderKind]int {
		m := map[orderKind]int{}
		for _, k := range ks {
			m[k]++
		}
		return m
	}
	m := count(orderPlan(5000, 0.02))
	require.Equal(t, 50, m[kindDeclined])
	require.Equal(t, 50, m[kindInvalid])
	require.Equal(t, 10, m[kindSlow])
	m = count(orderPlan(10, 0.01))
	require.Equal(t, 1, m[kindDeclined], "a positive rate gives at least one poison order")
	require.Equal(t, 1, m[kindSlow])
	m = count(orderPlan(1, 0))
	require.Equal(t, 1, m[kindSlow])
	require.Len(t, orderPlan(3, 0.5), 3)
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, Options{}.WithDefaults().Validate())
	o := Options{NoPoison: true}.WithDefaults()
	require.Zero(t, o.PoisonRate, "NoPoison keeps the rate at 0")
	for _, c := range []struct {
		o     Options
		field string
	}{
		{Options{Orders: -1}, "Orders"},
		{Options{Orders: MaxOrders + 1}, "Orders"},
		{Options{PoisonRate: 0.6}, "PoisonRate"},
		{Options{Duration: time.Second}, "Duration"},
		{Options{Rate: -5}, "Rate"},
	} {
		err := c.o.WithDefaults().Validate()
		var oe *pelwarden.ArgumentError
		require.True(t, errors.As(err, &oe), "%+v: %v", c.o, err)
		require.Equal(t, c.field, oe.Field)
	}
}
