// Package procstat reads a process's CPU time from /proc/PID/stat, for the
// load generator (test/load) and the end-to-end benchmark (test/bench).
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat: 100
// on every Linux architecture Go supports (the kernel fixes it for user
// space whatever CONFIG_HZ is).
const clockTicks = 100

// ProcessCPU is the CPU time (user + system) a process has used so far,
// from /proc/PID/stat. Threads are included; children are not (the
// apiserver and the webhooks start none).
func ProcessCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("CPU time of pid %d: %w", pid, err)
	}
	return ParseStatCPU(string(data))
}

// ParseStatCPU reads utime and stime (fields 14 and 15) of a /proc/PID/stat
// line. The command name (field 2) is in parentheses and may hold spaces or
// parentheses itself, so the fields are counted from the last ')'.
func ParseStatCPU(stat string) (time.Duration, error) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("/proc stat line %.80q: no ')' after the command name", stat)
	}
	f := strings.Fields(stat[end+1:])
	// f[0] is field 3 (state), so field n is f[n-3].
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat line %.80q: %d fields after the command name, want at least 13", stat, len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("/proc stat line %.80q: utime/stime %q is not a tick count", stat, s)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}
