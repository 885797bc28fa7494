//go:build !linux

package matchconditions

import (
	"testing"
	"time"
)

// threadCPU is 0 where a thread's own CPU time is not read: the benchmark
// then reports wall time only.
func threadCPU(testing.TB) time.Duration { return 0 }
