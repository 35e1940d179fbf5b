package driver

// The lease of a partition while its holder's goroutine runs a handler.

import (
	"sync"
	"time"
)

// leaseWatch keeps a holder's lease while a handler runs on the holder's
// own goroutine. arm starts it before the handler, disarm ends it after:
// a handler that returns within the run's tick costs a timer reset and
// nothing else. Past the tick, a goroutine looks at the lease every tick
// (tenure.keep: it renews the lease when a renewal is due), and once the
// lease is lost it cancels the holder's handler context with
// ErrLostOwnership and stops.
//
// While armed, only the watch goroutine touches the holder's lease state
// (the holder's goroutine is in the handler); disarm waits for it to end,
// so the holder reads that state afterwards without a lock.
type leaseWatch struct {
	o     *tenure
	timer *time.Timer // runs fire one tick after arm; nil until the first arm

	mu       sync.Mutex
	armed    bool          // between arm and disarm
	watching bool          // the watch goroutine runs (or ran, until disarm)
	stop     chan struct{} // closed by disarm: the handler returned
	exited   chan struct{} // closed by the watch goroutine as it ends
	lost     bool          // the watch found the lease lost
}

// arm starts watching, for a handler about to run.
func (w *leaseWatch) arm() {
	w.mu.Lock()
	w.armed, w.lost = true, false
	w.mu.Unlock()
	if w.timer == nil {
		w.timer = time.AfterFunc(w.o.run.tick, w.fire)
		return
	}
	w.timer.Reset(w.o.run.tick)
}

// disarm stops watching once the handler returned, and reports whether
// the lease was lost meanwhile (the handler's context is then cancelled).
func (w *leaseWatch) disarm() (lost bool) {
	w.timer.Stop()
	w.mu.Lock()
	w.armed = false
	watching, stop, exited := w.watching, w.stop, w.exited
	w.mu.Unlock()
	if watching {
		close(stop)
		<-exited
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.watching = false
	return w.lost
}

// fire is the timer's: a handler still runs a tick after arm, so this
// goroutine keeps the lease until disarm. A late fire, after disarm, does
// nothing; one that lands in the next handler's run watches that one.
func (w *leaseWatch) fire() {
	w.mu.Lock()
	if !w.armed || w.watching {
		w.mu.Unlock()
		return
	}
	w.watching = true
	stop, exited := make(chan struct{}), make(chan struct{})
	w.stop, w.exited = stop, exited
	w.mu.Unlock()
	defer close(exited)
	tick := time.NewTicker(w.o.run.tick)
	defer tick.Stop()
	for {
		if !w.o.keep() {
			w.mu.Lock()
			w.lost = true
			w.mu.Unlock()
			w.o.cancel(ErrLostOwnership)
			return
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}
