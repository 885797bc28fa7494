package main

import (
	"os"
	"testing"
	"time"

	"clusterip-policy/test/fixtures"
	"clusterip-policy/test/procstat"
)

func TestParseCPUTimeAddsUserAndSystemTicks(t *testing.T) {
	// A real line, with a command name holding a space and a parenthesis.
	stat := "4242 (web hook) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 8 0 100 1000000 500 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0"
	got, err := procstat.ParseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 3250 * time.Millisecond; got != want {
		t.Fatalf("got %s, want %s (250+75 ticks of 10 ms)", got, want)
	}
}

func TestParseCPUTimeRefusesATruncatedLine(t *testing.T) {
	for _, stat := range []string{"", "4242 (webhook", "4242 (webhook) S 1 2 3"} {
		if _, err := procstat.ParseStatCPU(stat); err == nil {
			t.Errorf("%q: no error", stat)
		}
	}
}

func TestCPUTimeOfThisProcessGrows(t *testing.T) {
	pid := os.Getpid()
	before, err := cpuTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	fixtures.Eventually(t, "50 ms of CPU time added by a busy loop", 30*time.Second, func() bool {
		for i := 0; i < 1e7; i++ {
			x += i
		}
		after, _ := cpuTime(pid)
		return after-before >= 50*time.Millisecond
	})
	t.Logf("busy loop sum %d", x)
}
