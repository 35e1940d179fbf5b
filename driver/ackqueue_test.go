package driver

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// Pushes blocked on a full queue all get in after takes make room, without
// waiting for one take each.
func TestAckQueueWakesEveryBlockedPush(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := newAckQueue(2, 4)
		// Before the take nothing wakes a blocked push, so each push signals
		// once: blocked signals mean that many pushes wait on the full queue.
		waiting := make(chan struct{}, 16)
		q.testBlocked = func() { waiting <- struct{}{} }
		for i := range 4 {
			require.True(t, q.push(ackItem{f: &handEntry{id: fmt.Sprint("full-", i)}}))
		}
		const blocked = 3
		var wg sync.WaitGroup
		for i := range blocked {
			wg.Go(func() { require.True(t, q.push(ackItem{f: &handEntry{id: fmt.Sprint("late-", i)}})) })
		}
		for range blocked {
			<-waiting // a push found the queue full and waits
		}
		// One take makes room for all of them.
		require.Len(t, q.take(nil), 4)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second): // only turns a hang into a failure: nothing but the take can wake them
			t.Fatal("blocked pushes still waiting after one take made room for all of them")
		}
		require.Len(t, q.take(nil), blocked)
	})
}

// A full batch wakes the ack loop; fewer ids wait for its interval.
func TestAckQueueSignalsFullBatch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := newAckQueue(3, 10)
		q.push(ackItem{f: &handEntry{id: "1-0"}})
		q.push(ackItem{f: &handEntry{id: "2-0"}})
		select {
		case <-q.full:
			t.Fatal("signalled before the batch was full")
		default:
		}
		q.push(ackItem{f: &handEntry{id: "3-0"}})
		select {
		case <-q.full:
		default:
			t.Fatal("a full batch was not signalled")
		}
		require.Equal(t, []string{"1-0", "2-0", "3-0"}, itemIDs(q.take(nil)))
	})
}

// close refuses later pushes (their entries stay pending), returns what was
// queued, and releases pushes blocked on a full queue.
func TestAckQueueClose(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := newAckQueue(1, 1)
		require.True(t, q.push(ackItem{f: &handEntry{id: "1-0"}}))
		refused := make(chan bool)
		go func() { refused <- !q.push(ackItem{f: &handEntry{id: "2-0"}}) }()
		require.Equal(t, []string{"1-0"}, itemIDs(q.close()))
		require.True(t, <-refused)
		require.False(t, q.push(ackItem{f: &handEntry{id: "3-0"}}))
		require.Nil(t, q.close())
	})
}

// earliest is the first fence among the queued acks whose fence was
// ahead; a push that lowers it signals sooner, and a take clears it.
func TestAckQueueEarliest(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := newAckQueue(10, 10)
		sooner := func() bool {
			select {
			case <-q.sooner:
				return true
			default:
				return false
			}
		}
		require.EqualValues(t, math.MaxInt64, q.earliest())
		q.push(ackItem{f: &handEntry{id: "1-0"}, ownedUntil: time.Second})
		require.False(t, sooner(), "a fence already past times nothing")
		require.EqualValues(t, math.MaxInt64, q.earliest())
		q.push(ackItem{f: &handEntry{id: "2-0"}, ownedUntil: 5 * time.Second, ahead: true})
		require.True(t, sooner())
		q.push(ackItem{f: &handEntry{id: "3-0"}, ownedUntil: 7 * time.Second, ahead: true})
		require.False(t, sooner(), "a later fence")
		q.push(ackItem{f: &handEntry{id: "4-0"}, ownedUntil: 3 * time.Second, ahead: true})
		require.True(t, sooner(), "an earlier one")
		require.Equal(t, 3*time.Second, q.earliest())
		require.Len(t, q.take(nil), 4)
		require.EqualValues(t, math.MaxInt64, q.earliest())
		q.push(ackItem{f: &handEntry{id: "5-0"}, ownedUntil: 9 * time.Second, ahead: true})
		require.True(t, sooner(), "the first after a take")
		require.Equal(t, 9*time.Second, q.earliest())

		// The same rule over items the ack loop took but has not sent.
		require.EqualValues(t, math.MaxInt64, firstFence(nil))
		require.Equal(t, 5*time.Second, firstFence([]ackItem{{ownedUntil: time.Second}, {ownedUntil: 7 * time.Second, ahead: true}, {ownedUntil: 5 * time.Second, ahead: true}}))
	})
}
