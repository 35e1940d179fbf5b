//go:build !unix

package consume

import "time"

// processCPU reports 0: the platform has no getrusage.
func processCPU() time.Duration { return 0 }
