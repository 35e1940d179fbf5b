package driver

import (
	"sync"
	"time"
)

// ackItem is one entry to ack.
type ackItem struct {
	id string
	// ownedUntil (since monoEpoch): until then no other consumer can have
	// taken the entry over, so a plain XACK acks exactly what the fenced
	// ack would (see fenceFrom).
	ownedUntil time.Duration
}

// ackQueue hands the entries whose handler succeeded from the handler
// workers to the ack loop.
//
// A push is one locked append; the ack loop is woken only when a batch is
// full (otherwise its interval timer collects the ids), instead of once per
// id as with a channel. The queue holds at most limit ids: a push beyond
// that waits for the ack loop, which is the back-pressure a slow or failing
// ack call puts on the handlers.
type ackQueue struct {
	batch, limit int

	mu     sync.Mutex
	ids    []ackItem
	closed bool

	full chan struct{} // holds a token once batch ids are queued
	// drained holds a token when the consumer has nothing in hand (no
	// entry queued or running, and its last read found nothing new): no
	// more acks are coming soon, so waiting for a fuller batch only delays
	// them.
	drained chan struct{}
	room    chan struct{} // holds a token after the ack loop took ids
	gone    chan struct{} // closed by close
}

func newAckQueue(batch, limit int) *ackQueue {
	return &ackQueue{
		batch: batch, limit: limit,
		full: make(chan struct{}, 1), drained: make(chan struct{}, 1), room: make(chan struct{}, 1), gone: make(chan struct{}),
	}
}

// push queues id. It reports false when the queue was closed: the ack loop
// has stopped and the entry stays pending.
func (q *ackQueue) push(id ackItem) bool {
	waited := false
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return false
		}
		if len(q.ids) < q.limit {
			q.ids = append(q.ids, id)
			n := len(q.ids)
			q.mu.Unlock()
			if n >= q.batch {
				signal(q.full)
			}
			if waited && n < q.limit {
				// A take wakes one waiting push; pass the wake-up on while
				// there is room, or the other waiters would trickle in one
				// per take.
				signal(q.room)
			}
			return true
		}
		q.mu.Unlock()
		waited = true
		select {
		case <-q.room:
		case <-q.gone:
		}
	}
}

// take removes and returns every queued id.
func (q *ackQueue) take() []ackItem {
	q.mu.Lock()
	ids := q.ids
	q.ids = nil
	q.mu.Unlock()
	if len(ids) > 0 {
		signal(q.room)
	}
	return ids
}

// close refuses further pushes and returns the ids still queued.
func (q *ackQueue) close() []ackItem {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil
	}
	q.closed = true
	close(q.gone)
	ids := q.ids
	q.ids = nil
	return ids
}

// signal puts a token in ch (capacity 1) unless one is there already.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
