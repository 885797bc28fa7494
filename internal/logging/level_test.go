package logging

import (
	"bytes"
	"strings"
	"testing"
)

// --log-level error keeps error lines only; debug adds V(1) lines, which
// info drops; a level that is not one of the three is refused, naming it.
func TestLevels(t *testing.T) {
	for _, tc := range []struct {
		level string
		want  []string
	}{
		{"debug", []string{"a failure", "a start", "a retry"}},
		{"info", []string{"a failure", "a start"}},
		{"error", []string{"a failure"}},
	} {
		var l Level
		if err := l.Set(tc.level); err != nil || l.String() != tc.level {
			t.Fatalf("Set(%q): %v, %s", tc.level, err, l)
		}
		var buf bytes.Buffer
		log := NewAt(&buf, l)
		log.Error(nil, "a failure")
		log.Info("a start")
		log.V(1).Info("a retry")
		var got []string
		for _, msg := range []string{"a failure", "a start", "a retry"} {
			if strings.Contains(buf.String(), `"msg":"`+msg+`"`) {
				got = append(got, msg)
			}
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("--log-level %s wrote %q, want %q", tc.level, got, tc.want)
		}
	}
	var l Level
	if err := l.Set("warn"); err == nil || err.Error() != `"warn" is not a log level; use debug, info or error` {
		t.Errorf("Set(warn): %v", err)
	}
}
