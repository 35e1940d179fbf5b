//go:build unix

package measure

import (
	"syscall"
	"time"
)

// ProcessCPU is this process's user+system CPU time so far (0 when the
// platform cannot tell: see cpu_other.go).
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
