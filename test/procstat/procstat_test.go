package procstat

import (
	"strings"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// A command name with a space and a ')' in it; utime 250, stime 50 ticks.
	line := "4242 (kube-api (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 100 0 0"
	got, err := ParseStatCPU(line)
	if err != nil || got != 3*time.Second {
		t.Fatalf("ParseStatCPU = %s, %v; want 3s", got, err)
	}
	for _, bad := range []string{"", "4242 (x S 1", "4242 (x) S 1 2 3", "4242 (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 -5 50"} {
		if _, err := ParseStatCPU(bad); err == nil {
			t.Errorf("ParseStatCPU(%q) accepted a broken line", bad)
		}
	}
	if _, err := ProcessCPU(-1); err == nil || !strings.Contains(err.Error(), "pid -1") {
		t.Errorf("ProcessCPU(-1) = %v, want an error naming the pid", err)
	}
}
