//go:build linux

package reclaimbench

import (
	"runtime"
	"syscall"
	"time"
)

// prSetTimerSlack is PR_SET_TIMERSLACK of prctl(2).
const prSetTimerSlack = 29

// lockForPreciseSleep binds the calling goroutine to its thread for good
// (the thread ends with the goroutine) and sets the thread's timer slack to
// 1 ns, so preciseSleep wakes within microseconds of its deadline.
func lockForPreciseSleep() {
	runtime.LockOSThread()
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 1, 0)
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
