package logging

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestStdlibLogLinesBecomeBoundedJSONLines(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	w := &stdlibLog{log: New(&buf), now: func() time.Time { return now }}
	for i := range 25 {
		line := "http: TLS handshake error from 127.0.0.1:" + strconv.Itoa(40000+i) + ": tls: client didn't provide a certificate\n"
		if n, err := w.Write([]byte(line)); n != len(line) || err != nil {
			t.Fatalf("Write: %d, %v", n, err)
		}
	}
	now = now.Add(time.Second)
	_, _ = w.Write([]byte(strings.Repeat("x", 5000) + "\n"))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != stdlibLogPerSecond+1 {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), stdlibLogPerSecond+1, buf.String())
	}
	for i, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("line %d is not JSON: %v: %s", i, err, l)
		}
		if rec["msg"] != "net/http" || rec["level"] != "error" {
			t.Errorf("line %d: %s", i, l)
		}
		if i == 0 && rec["line"] != "http: TLS handshake error from 127.0.0.1:40000: tls: client didn't provide a certificate" {
			t.Errorf("first line: %v", rec["line"])
		}
		if i == len(lines)-1 {
			if rec["suppressedBefore"] != float64(15) || len(rec["line"].(string)) > stdlibLogMaxLine+len("…") {
				t.Errorf("last line: suppressedBefore %v, %d bytes of line", rec["suppressedBefore"], len(rec["line"].(string)))
			}
		}
	}
}

// A certificate from a CA that has been removed from the file does not get
// back in by resuming a TLS session it opened while the CA was trusted: Go
// (1.21 and later) verifies a resumed session's chains against the CAs of
// the config in force, which GetConfigForClient builds per handshake.
