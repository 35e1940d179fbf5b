package driver

import (
	"sync"
	"sync/atomic"
)

// jobQueue hands dispatched entries to the handler workers, first in first
// out.
//
// It replaces a channel of jobs. A send on a channel with parked receivers
// wakes one receiver per job, so a batch of 500 entries cost 500 goroutine
// wake-ups and switches even when two running workers could have taken
// every job in less time than the wake-ups took. Here wake-ups are chained:
// a push wakes one parked worker, and a woken worker that finds more jobs
// queued wakes the next, so at most one wake-up is in flight. Workers that
// are running keep taking jobs without parking; parallelism still grows to
// every worker within microseconds per worker when handlers block.
type jobQueue struct {
	mu      sync.Mutex
	jobs    []job
	head    int  // jobs[head:] are queued
	closed  bool // no more pushes; get returns false once the queue is empty
	parked  int  // workers waiting in get
	waking  bool // a wake-up is in flight: its worker has not looked yet
	wakeups chan struct{}
	// starved is set whenever a worker finds the queue empty and parks
	// (the window's signal to grow).
	starved *atomic.Bool
}

// newJobQueue returns a queue for at most workers concurrent getters; it
// sets starved whenever a worker runs out of jobs.
func newJobQueue(workers int, starved *atomic.Bool) *jobQueue {
	return &jobQueue{wakeups: make(chan struct{}, workers), starved: starved}
}

// push queues jobs. It never blocks. It reports false, queueing nothing,
// once the queue is closed.
func (q *jobQueue) push(jobs ...job) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	if q.head > 0 && q.head >= len(q.jobs)/2 {
		// Reuse the taken front: under steady load the queue may never be
		// empty, and appending behind an ever-advancing head would grow
		// the slice without bound.
		n := copy(q.jobs, q.jobs[q.head:])
		clear(q.jobs[n:])
		q.jobs, q.head = q.jobs[:n], 0
	}
	q.jobs = append(q.jobs, jobs...)
	wake := q.wakeOneLocked()
	q.mu.Unlock()
	if wake {
		q.wakeups <- struct{}{}
	}
	return true
}

// wakeOneLocked decides whether to wake a parked worker for queued jobs:
// yes when one is parked and no wake-up is in flight already.
func (q *jobQueue) wakeOneLocked() bool {
	if q.head == len(q.jobs) || q.parked == 0 || q.waking {
		return false
	}
	q.parked--
	q.waking = true
	return true
}

// get returns the next job, waiting while the queue is empty. It returns
// false once the queue is closed and empty.
func (q *jobQueue) get() (job, bool) {
	woken := false
	q.mu.Lock()
	for {
		if woken {
			q.waking = false
			woken = false
		}
		if q.head < len(q.jobs) {
			j := q.jobs[q.head]
			q.jobs[q.head] = job{} // the queue does not keep the entry alive
			q.head++
			wake := q.wakeOneLocked()
			q.mu.Unlock()
			if wake {
				q.wakeups <- struct{}{}
			}
			return j, true
		}
		if q.closed {
			q.mu.Unlock()
			return job{}, false
		}
		q.parked++
		q.mu.Unlock()
		if !q.starved.Load() {
			q.starved.Store(true)
		}
		<-q.wakeups
		woken = true
		q.mu.Lock()
	}
}

// close stops pushes and wakes every parked worker; they take what is
// queued, then get returns false. It returns nothing: the workers see the
// queued jobs (and skip them at shutdown).
func (q *jobQueue) close() {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.closed = true
	n := q.parked
	q.parked = 0
	q.mu.Unlock()
	for range n {
		q.wakeups <- struct{}{}
	}
}

// drain removes and returns the queued jobs.
func (q *jobQueue) drain() []job {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := append([]job(nil), q.jobs[q.head:]...)
	clear(q.jobs)
	q.jobs, q.head = q.jobs[:0], 0
	return out
}
