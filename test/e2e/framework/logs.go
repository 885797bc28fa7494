package framework

import (
	"fmt"
	"strings"
)

// LogMarks are the lengths of every process log at one moment, so that a
// failed test shows what the processes wrote while it ran.
type LogMarks map[*Process]int64

// Marks records the current length of every process log.
func (c *Cluster) Marks() LogMarks {
	m := LogMarks{}
	for _, p := range c.Processes() {
		m[p] = p.LogSize()
	}
	return m
}

// LogsSince renders, for each process, at most the last n lines it logged
// after the marks (the whole log for a process started later).
func (c *Cluster) LogsSince(m LogMarks, n int) string {
	var b strings.Builder
	for _, p := range c.Processes() {
		state := "running"
		if exited, err := p.Exited(); exited {
			state = fmt.Sprintf("exited: %v", err)
		}
		fmt.Fprintf(&b, "\n----- %s (pid %d, %s), last %d lines since the test began, full log %s -----\n%s\n",
			p.Name, p.Pid(), state, n, p.LogPath, TailFile(p.LogPath, m[p], n))
	}
	return b.String()
}
