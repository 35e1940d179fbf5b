package pelwardentest_test

import (
	"fmt"
	"runtime"
	"sync"
)

// recorder is a pelwardentest.T that records failures instead of failing
// the test, to check what an assertion reports.
type recorder struct {
	name string

	mu       sync.Mutex
	errors   []string
	fatal    string
	cleanups []func()
}

func (r *recorder) Helper()      {}
func (r *recorder) Name() string { return r.name }
func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// Fatalf records the message and stops the goroutine, as testing.T does.
func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.fatal = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

// run calls fn in its own goroutine (Fatalf ends it) and returns the fatal
// message, "" when fn returned normally.
func (r *recorder) run(fn func()) string {
	r.mu.Lock()
	r.fatal = ""
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fatal
}

// finish runs the cleanups, last registered first.
func (r *recorder) finish() {
	r.mu.Lock()
	cs := r.cleanups
	r.cleanups = nil
	r.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}
