package driver

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func testJob(id string) job { return job{m: &Message{ID: id}} }

// testJobs returns n jobs, their ids "0" to n-1.
func testJobs(n int) []job {
	jobs := make([]job, n)
	for i := range jobs {
		jobs[i] = testJob(fmt.Sprint(i))
	}
	return jobs
}

// startWorkers starts n workers taking jobs from q, each reporting took
// as its last handler's time (negative: none) and running handle with its
// number for every job. stop closes q and waits for the workers.
func startWorkers(q *jobQueue, n int, took time.Duration, handle func(w int)) (stop func()) {
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() {
			for {
				if _, ok, _ := q.take(nil, took); !ok {
					return
				}
				handle(w)
			}
		})
	}
	return func() {
		q.close()
		wg.Wait()
	}
}

// waitParked waits until n workers are parked in get.
func waitParked(t *testing.T, q *jobQueue, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d workers parked", n), func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.parked == n
	})
}

// Every job is taken exactly once by many workers taking and pushers
// pushing at once.
func TestJobQueueDeliversEveryJobOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const workers, pushers, perPusher = 16, 4, 2000
		q := newJobQueue(workers, new(atomic.Bool))
		var mu sync.Mutex
		seen := map[string]int{}
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for {
					j, ok := q.get()
					if !ok {
						return
					}
					mu.Lock()
					seen[j.m.ID]++
					mu.Unlock()
				}
			})
		}
		var pwg sync.WaitGroup
		for p := range pushers {
			pwg.Go(func() {
				for i := 0; i < perPusher; i += 10 {
					batch := make([]job, 10)
					for k := range batch {
						batch[k] = testJob(fmt.Sprintf("%d-%d", p, i+k))
					}
					require.True(t, q.push(batch...))
				}
			})
		}
		pwg.Wait()
		eventually(t, "every job taken", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(seen) == pushers*perPusher
		})
		q.close()
		wg.Wait()
		for id, n := range seen {
			require.Equal(t, 1, n, "job %s taken %d times", id, n)
		}
	})
}

// A queue that is never empty (pushes while jobs are still queued, as
// under steady load with Prefetch) keeps its memory bounded, in order.
func TestJobQueueNeverEmptyStaysBounded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := newJobQueue(1, new(atomic.Bool))
		next, want := 0, 0
		push := func(n int) {
			batch := make([]job, n)
			for i := range batch {
				batch[i] = testJob(fmt.Sprint(next))
				next++
			}
			require.True(t, q.push(batch...))
		}
		push(1000)
		for range 300 {
			push(500)
			for range 500 {
				j, ok := q.get()
				if !ok || j.m.ID != fmt.Sprint(want) {
					t.Fatalf("got %v (%v), want job %d: first in, first out", j.m, ok, want)
				}
				want++
			}
		}
		require.LessOrEqual(t, cap(q.jobs), 4*1500, "the taken front is reused")
		require.Len(t, q.drain(), 1000)
	})
}

// A push wakes one parked worker, not one per job, and no second one while
// that wake-up is in flight (the woken worker wakes the next; see
// TestJobQueueStartsEveryWorkerForBlockingJobs).
func TestJobQueueWakesOneAtATime(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := newJobQueue(8, new(atomic.Bool))
		q.parked = 8 // as if 8 workers waited in get
		jobs := testJobs(100)
		require.True(t, q.push(jobs...))
		require.Equal(t, 1, len(q.wakeups), "one wake-up for a batch")
		require.True(t, q.push(testJob("more")))
		require.Equal(t, 1, len(q.wakeups), "none while one is in flight")
		require.Equal(t, 7, q.parked)
		// A worker that was running takes a job without waking anyone.
		j, ok := q.get()
		require.True(t, ok)
		require.Equal(t, "0", j.m.ID)
		require.Equal(t, 1, len(q.wakeups))
	})
}

// Handlers that block do not hold the other jobs back: the chained
// wake-ups start every worker, so as many jobs run at once as there are
// workers.
func TestJobQueueStartsEveryWorkerForBlockingJobs(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const workers = 32
		q := newJobQueue(workers, new(atomic.Bool))
		var running sync.WaitGroup
		running.Add(workers)
		allRunning := make(chan struct{})
		go func() { running.Wait(); close(allRunning) }()
		stop := startWorkers(q, workers, -1, func(int) {
			running.Done()
			<-allRunning // blocks until every job runs at once
		})
		waitParked(t, q, workers)
		jobs := testJobs(workers)
		require.True(t, q.push(jobs...))
		select {
		case <-allRunning:
		case <-time.After(10 * time.Second):
			t.Fatal("not every worker was woken for blocking jobs")
		}
		stop()
	})
}

// After close, pushes are refused, parked workers return, and queued jobs
// are still handed out (the consumer's workers skip them) or drained.
func TestJobQueueClose(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := newJobQueue(2, new(atomic.Bool))
		require.True(t, q.push(testJob("a"), testJob("b")))
		q.close()
		q.close() // idempotent
		require.False(t, q.push(testJob("c")))
		j, ok := q.get()
		require.True(t, ok)
		require.Equal(t, "a", j.m.ID)
		rest := q.drain()
		require.Len(t, rest, 1)
		require.Equal(t, "b", rest[0].m.ID)
		_, ok = q.get()
		require.False(t, ok, "closed and empty")

		parked := newJobQueue(3, new(atomic.Bool))
		done := make(chan struct{})
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				_, ok := parked.get()
				require.False(t, ok)
			})
		}
		go func() { wg.Wait(); close(done) }()
		waitParked(t, parked, 3)
		parked.close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("parked workers not released by close")
		}
	})
}

// pushBuffer takes the caller's buffer as the queue's array when every
// queued job was taken, copies it behind queued jobs otherwise, and the
// buffer it gives back is empty and holds no job (nothing kept alive).
func TestJobQueuePushBuffer(t *testing.T) {
	t.Parallel()
	q := newJobQueue(1, new(atomic.Bool))
	buf := []job{testJob("1"), testJob("2")}
	next := q.pushBuffer(buf)
	require.Empty(t, next)
	require.Same(t, &buf[0], &q.jobs[0], "an empty queue takes the buffer without copying")

	next = append(next, testJob("3"))
	kept := next
	next = q.pushBuffer(next)
	require.Empty(t, next)
	require.Equal(t, job{}, kept[0], "copied behind queued jobs, the buffer is cleared")

	var ids []string
	for range 3 {
		j, ok := q.get()
		require.True(t, ok)
		ids = append(ids, j.m.ID)
	}
	require.Equal(t, []string{"1", "2", "3"}, ids)
	taken := q.jobs
	next = q.pushBuffer(append(next, testJob("4")))
	require.Empty(t, next)
	for _, j := range taken[:cap(taken)] {
		require.Equal(t, job{}, j, "the array given back holds no job")
	}
	j, ok := q.get()
	require.True(t, ok)
	require.Equal(t, "4", j.m.ID)

	q.close()
	refused := []job{testJob("5")}
	next = q.pushBuffer(refused)
	require.Empty(t, next)
	require.Equal(t, job{}, refused[0])
	_, ok = q.get()
	require.False(t, ok, "nothing queued after close")
}

// Fast handlers are run by as many workers as there are cores: the chain
// of wake-ups stops there, and the others stay parked (each wake-up would
// cost more than the handlers it runs). Before, the chain woke all eight.
func TestJobQueueFastHandlersWakeAsManyAsCores(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const workers = 8
		q := newJobQueue(workers, new(atomic.Bool))
		q.cores = 2
		var mu sync.Mutex
		took := map[int]int{} // jobs taken, by worker
		stop := startWorkers(q, workers, time.Microsecond, func(w int) {
			mu.Lock()
			took[w]++
			mu.Unlock()
			time.Sleep(time.Microsecond) // the handler: fast, but the others may run meanwhile
		})
		waitParked(t, q, workers)
		jobs := testJobs(500)
		require.True(t, q.push(jobs...))
		waitParked(t, q, workers)
		time.Sleep(10 * queueWatch) // the watch finds the queue empty: no wake-up
		synctest.Wait()
		mu.Lock()
		require.Len(t, took, 2, "as many workers as cores ran the batch: %v", took)
		total := 0
		for _, n := range took {
			total += n
		}
		require.Equal(t, 500, total)
		mu.Unlock()
		stop()
	})
}

// A worker that reports a slow handler makes the chain wake every worker
// again, at once (no watch to wait for).
func TestJobQueueSlowHandlerWakesFreely(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := newJobQueue(4, new(atomic.Bool))
		q.cores = 1
		q.parked = 3 // as if three workers waited in get, one running
		require.True(t, q.push(testJob("a"), testJob("b"), testJob("c")))
		require.Zero(t, len(q.wakeups), "fast handlers: one running worker is enough")
		require.True(t, q.watching, "the watch looks again")
		_, ok, _ := q.take(nil, slowHandler)
		require.True(t, ok)
		require.Equal(t, 1, len(q.wakeups), "a slow handler: the next worker is woken")
		q.close()
	})
}
