package pelwardentest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/pelwardentest"
)

// exampleT stands in for the *testing.T a real test passes: examples have
// none. It panics on failure and runs cleanups in finish.
type exampleT struct{ recorder }

func (t *exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (t *exampleT) Errorf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

func newExampleT() *exampleT { return &exampleT{recorder{name: "Example"}} }

// A handler that fails on malformed orders: the consumer retries them until
// MaxDeliveries, then the reclaim pass parks them in the dead-letter stream.
func Example() {
	t := newExampleT() // in a test: the *testing.T
	defer t.finish()

	f := pelwardentest.Start(t).NewFixture(t)
	good := f.Add("order", "42", "qty", "1")
	bad := f.AddPoison("order", "43")
	f.RunConsumer(driver.Config{MaxDeliveries: 3, Handler: driver.HandlerFunc(
		func(ctx context.Context, m *driver.Message) error {
			if pelwardentest.IsPoison(m.Fields) {
				return errors.New("malformed order")
			}
			return nil
		})})

	rec := f.Within(10*time.Second).RequireDeadLettered(bad, pelwardentest.DeadLettered{Reason: pelwarden.ReasonMaxDeliveries})
	f.RequireAcked(good)
	f.RequirePELEmpty()
	fmt.Println(rec.Reason, "after", rec.Deliveries, "deliveries:", rec.Fields)
	// Output: max_deliveries after 3 deliveries: [{order 43} {pelwardentest.poison 1}]
}

// A consumer crashed holding entries, two of them already delivered three
// times; one reclaim pass with MaxDeliveries 3 dead-letters those two and
// hands the others to the handler.
func ExampleFixture_Reclaim() {
	t := newExampleT()
	defer t.finish()

	f := pelwardentest.Start(t).NewFixture(t)
	f.Produce(4, func(i int) []string { return []string{"order", fmt.Sprint(100 + i)} })
	ids := f.LeavePending("crashed", 4)
	f.SetDeliveries(3, ids[0], ids[1])
	f.RequirePending(ids[0], pelwardentest.Pending{Consumer: "crashed", Deliveries: 3})

	res := f.Reclaim(pelwardentest.ReclaimArgs{MaxDeliveries: 3, Handler: driver.HandlerFunc(
		func(ctx context.Context, m *driver.Message) error {
			order, _ := m.Value("order")
			fmt.Println("handled order", order, "delivery", m.Deliveries)
			return nil
		})})
	f.RequireDeadLetterIDs(ids[0], ids[1])
	f.RequirePELEmpty()
	fmt.Println(len(res.Acked), "acked,", len(res.DeadLettered), "dead-lettered")
	// Output:
	// handled order 102 delivery 2
	// handled order 103 delivery 2
	// 2 acked, 2 dead-lettered
}

// A driver.DeadLetter outcome parks the entry at once, with the handler's
// error text.
func ExampleFixture_RequireDeadLettered() {
	t := newExampleT()
	defer t.finish()

	f := pelwardentest.Start(t).NewFixture(t)
	id := f.Add("order", "-1")
	f.RunConsumer(driver.Config{Handler: driver.HandlerFunc(
		func(ctx context.Context, m *driver.Message) error {
			return driver.DeadLetter(errors.New("negative order id"))
		})})
	rec := f.Within(10*time.Second).RequireDeadLettered(id, pelwardentest.DeadLettered{
		Reason: pelwarden.ReasonHandler, Error: "negative order id"})
	fmt.Println(rec.Reason, rec.Error)
	// Output: handler negative order id
}

// A handler fails the first entry once; Eventually waits until the
// consumer's Metrics count every entry acked, and Calls says how often each
// entry reached the handler.
func ExampleFixture_Eventually() {
	t := newExampleT()
	defer t.finish()

	f := pelwardentest.Start(t).NewFixture(t)
	ids := f.Produce(3, nil)
	var m pelwardentest.Metrics
	var calls pelwardentest.Calls
	c := f.RunConsumer(driver.Config{Metrics: &m, Handler: driver.HandlerFunc(
		func(ctx context.Context, msg *driver.Message) error {
			if calls.Add(msg.ID) == 1 && msg.ID == ids[0] {
				return errors.New("busy") // retried after MinIdle
			}
			return nil
		})})

	f.Eventually("3 entries acked", func() bool { return m.Total(driver.EventAcked) == 3 })
	if err := c.Stop(); err != nil {
		panic(err)
	}
	fmt.Println("acked:", m.Total(driver.EventAcked), "entries handled:", calls.Distinct(), "calls of the first:", calls.Count(ids[0]))
	// Output: acked: 3 entries handled: 3 calls of the first: 2
}
