//go:build !unix

package measure

import "time"

// ProcessCPU reports 0: the platform has no getrusage.
func ProcessCPU() time.Duration { return 0 }
