package demo

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/internal/ctxwait"
	"github.com/pelwarden/pelwarden/internal/progress"
)

// The demo's orders and their handler. Four kinds of order, told apart by
// their fields as a real handler would:
//   - normal: charged in 100-300ms;
//   - slow (a bulk order, items=250): 5s of work, longer than MinIdle; the
//     lease heartbeat keeps it owned by its consumer;
//   - declined (card ****0119): the payment gateway always times out: a
//     plain error, retried until MaxDeliveries, then dead-lettered by the
//     reclaim pass with reason max_deliveries;
//   - invalid (currency XTS): the handler knows it can never succeed and
//     dead-letters it at once with driver.DeadLetter (reason handler).

type orderKind int

const (
	kindNormal orderKind = iota
	kindSlow
	kindDeclined
	kindInvalid
)

func (k orderKind) poison() bool { return k == kindDeclined || k == kindInvalid }

const (
	declinedCard    = "****0119"
	invalidCurrency = "XTS"
	bulkItems       = "250"
)

// orderPlan decides the kind of each order: round(orders*poisonRate) poison
// orders (at least one when the rate is positive), alternating declined and
// invalid, and one slow order per 500 (at least one), at random positions.
func orderPlan(orders int, poisonRate float64) []orderKind {
	kinds := make([]orderKind, orders)
	poison := int(math.Round(float64(orders) * poisonRate))
	if poisonRate > 0 && poison == 0 {
		poison = 1
	}
	slow := max(1, orders/500)
	if poison+slow > orders {
		slow = max(0, orders-poison)
	}
	perm := rand.Perm(orders)
	for i := range poison {
		if i%2 == 0 {
			kinds[perm[i]] = kindDeclined
		} else {
			kinds[perm[i]] = kindInvalid
		}
	}
	for i := poison; i < poison+slow; i++ {
		kinds[perm[i]] = kindSlow
	}
	return kinds
}

// orderFields are the fields of order n of kind k.
func orderFields(n int, k orderKind) []string {
	card, currency, items := "****4242", "EUR", "3"
	switch k {
	case kindSlow:
		items = bulkItems
	case kindDeclined:
		card = declinedCard
	case kindInvalid:
		currency = invalidCurrency
	}
	amount := fmt.Sprintf("%d.%02d", 5+n%195, n*7%100)
	return []string{"order", fmt.Sprintf("o-%05d", n), "customer", fmt.Sprintf("c-%03d", n%211),
		"amount", amount, "currency", currency, "card", card, "items", items}
}

// state is what the demo's handlers and producer record, for the live
// line and the final check.
type state struct {
	produced atomic.Int64
	handled  atomic.Int64 // successful handler calls, duplicates included
	inflight atomic.Int64

	mu        sync.Mutex
	ids       []string // produced ids, in order
	kindOf    map[string]orderKind
	successes map[string][]string // id -> consumers whose handler succeeded
	starts    map[string]int      // handler calls per id
	lastErr   map[string]string   // last handler error per id
	// Set at the kill: the ids left pending in the dead consumer's name,
	// and, per id, the survivor that took it over.
	orphans      map[string]string
	orphansTaken int
	allTakenAt   time.Time
}

func newState() *state {
	return &state{
		kindOf: map[string]orderKind{}, successes: map[string][]string{},
		starts: map[string]int{}, lastErr: map[string]string{},
	}
}

// producer writes the orders at rate per second, in pipelined batches.
func (s *state) produce(ctx context.Context, rdb redis.UniversalClient, stream string, kinds []orderKind, rate int) error {
	start := time.Now()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	n := 0
	for n < len(kinds) {
		due := min(int(time.Since(start).Seconds()*float64(rate))+1, len(kinds))
		for n < due {
			batch := min(due-n, 500)
			p := rdb.Pipeline()
			cmds := make([]*redis.StringCmd, batch)
			for i := range batch {
				cmds[i] = p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: orderFields(n+i, kinds[n+i])})
			}
			if _, err := p.Exec(ctx); err != nil {
				return fmt.Errorf("producer: XADD: %w", err)
			}
			s.mu.Lock()
			for i, c := range cmds {
				s.ids = append(s.ids, c.Val())
				s.kindOf[c.Val()] = kinds[n+i]
			}
			s.mu.Unlock()
			n += batch
			s.produced.Store(int64(n))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// handler returns the business handler of consumer c.
func (s *state) handler(c *consumer) driver.Handler {
	return driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
		s.inflight.Add(1)
		c.inflight.Add(1)
		defer s.inflight.Add(-1)
		defer c.inflight.Add(-1)
		s.started(c, m.ID)

		order, _ := m.Value("order")
		work := time.Duration(100+rand.IntN(201)) * time.Millisecond
		if items, _ := m.Value("items"); items == bulkItems {
			work = SlowWork
		}
		if !ctxwait.Sleep(ctx, work) {
			// Killed, or the entry was taken over: it stays pending.
			return context.Cause(ctx)
		}
		if cur, _ := m.Value("currency"); cur == invalidCurrency {
			return driver.DeadLetter(fmt.Errorf("order %s: unsupported currency %q", order, cur))
		}
		if card, _ := m.Value("card"); card == declinedCard {
			amount, _ := m.Value("amount")
			err := fmt.Errorf("charge %s EUR to card %s for order %s: payment gateway timeout", amount, card, order)
			s.mu.Lock()
			s.lastErr[m.ID] = err.Error()
			s.mu.Unlock()
			return err
		}
		s.mu.Lock()
		s.successes[m.ID] = append(s.successes[m.ID], c.name)
		s.mu.Unlock()
		s.handled.Add(1)
		c.handled.Add(1)
		return nil
	})
}

// started records a handler call; a survivor starting on an orphan of the
// dead consumer has reclaimed it.
func (s *state) started(c *consumer, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.starts[id]++
	if c.victim || s.orphans == nil {
		return
	}
	if by, ok := s.orphans[id]; ok && by == "" {
		s.orphans[id] = c.name
		s.orphansTaken++
		if s.orphansTaken == len(s.orphans) {
			s.allTakenAt = time.Now()
		}
	}
}

// metrics counts one consumer's driver events.
type metrics struct {
	ev                  []atomic.Int64
	deadMax, deadByHand atomic.Int64
}

func newMetrics() *metrics {
	return &metrics{ev: make([]atomic.Int64, len(driver.Events()))}
}

func (m *metrics) Count(e driver.Event, n int) {
	if int(e) >= 0 && int(e) < len(m.ev) {
		m.ev[e].Add(int64(n))
	}
}

func (m *metrics) DeadLettered(reason string, n int) {
	if reason == "max_deliveries" {
		m.deadMax.Add(int64(n))
	} else {
		m.deadByHand.Add(int64(n))
	}
}

func (m *metrics) HandlerDuration(time.Duration) {}

func (m *metrics) get(e driver.Event) int64 { return m.ev[e].Load() }

// consumer is one of the demo's three consumers.
type consumer struct {
	name     string
	victim   bool
	rdb      redis.UniversalClient
	c        *driver.Consumer
	m        *metrics
	inflight atomic.Int64
	handled  atomic.Int64

	cancel   context.CancelFunc
	done     chan struct{}
	err      error
	killedAt time.Duration
}

func (c *consumer) start(ctx context.Context) {
	ctx, c.cancel = context.WithCancel(ctx)
	c.done = make(chan struct{})
	go func() {
		defer close(c.done)
		c.err = c.c.Run(ctx)
	}()
}

// stop cancels the consumer and waits for Run to return.
func (c *consumer) stop() error {
	c.cancel()
	<-c.done
	return c.err
}

// lineWriter turns log output into live-line events (for --verbose).
type lineWriter struct{ live *progress.Line }

func (w lineWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.live.Event("  driver: " + line)
	}
	return len(p), nil
}
