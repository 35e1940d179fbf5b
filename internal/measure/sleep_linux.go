//go:build linux

package measure

import (
	"runtime"
	"syscall"
	"time"
)

// prSetTimerSlack is PR_SET_TIMERSLACK of prctl(2).
const prSetTimerSlack = 29

// lockForPreciseSleep binds the calling goroutine to its thread and sets the
// thread's timer slack to 1 ns, so preciseSleep wakes within microseconds of
// its deadline. The returned func restores the default slack and unbinds.
//
// The thread must not end with the goroutine (as it would if the goroutine
// exited still locked): a child process started from that thread earlier
// with Pdeathsig (the chaos tests' consumers, the CLI demo's server) would
// get the signal, the kernel's "parent" being the thread.
func lockForPreciseSleep() (unlock func()) {
	runtime.LockOSThread()
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 1, 0)
	return func() {
		_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 0, 0) // 0: the thread's default
		runtime.UnlockOSThread()
	}
}

// preciseSleep sleeps d with nanosleep(2), resuming after signals.
func preciseSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for {
		if err := syscall.Nanosleep(&ts, &ts); err != syscall.EINTR {
			return
		}
	}
}
