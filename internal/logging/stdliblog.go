package logging

import (
	stdlog "log"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// Go's HTTP server reports what happens below the handlers (a failed TLS
// handshake above all: a client without a certificate once
// --client-ca-file is set, a port scanner, a wrong CA) through the
// standard library's log package, as plain text. On stderr beside the JSON
// lines, that breaks `jq` over the log, and anyone who can open connections
// to the admission port decides how many lines it writes.
const (
	// stdlibLogPerSecond lines are written per second at most; the rest are
	// counted, and the count goes with the next line written.
	stdlibLogPerSecond = 10
	// stdlibLogMaxLine bounds one line (net/http's are far shorter).
	stdlibLogMaxLine = 1024
)

// stdlibLog turns the standard library's log lines into JSON lines of a
// logr logger, at most stdlibLogPerSecond a second.
type stdlibLog struct {
	log logr.Logger
	now func() time.Time

	mu          sync.Mutex
	windowStart time.Time
	inWindow    int
	suppressed  int
}

// RouteStdlib sends the standard library's log output (net/http's
// server errors) to log, bounded as above.
func RouteStdlib(log logr.Logger) {
	stdlog.SetFlags(0) // the JSON line has its own time stamp
	stdlog.SetOutput(&stdlibLog{log: log, now: time.Now})
}

func (w *stdlibLog) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	if len(line) > stdlibLogMaxLine {
		line = line[:stdlibLogMaxLine] + "…"
	}
	w.mu.Lock()
	now := w.now()
	if now.Sub(w.windowStart) >= time.Second {
		w.windowStart, w.inWindow = now, 0
	}
	if w.inWindow >= stdlibLogPerSecond {
		w.suppressed++
		w.mu.Unlock()
		return len(p), nil
	}
	w.inWindow++
	suppressed := w.suppressed
	w.suppressed = 0
	w.mu.Unlock()
	kv := []any{"line", line}
	if suppressed > 0 {
		kv = append(kv, "suppressedBefore", suppressed)
	}
	w.log.Error(nil, "net/http", kv...)
	return len(p), nil
}
