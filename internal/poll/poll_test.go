package poll

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// A read that keeps failing the same way is reported once; a new error,
// and every good read, are reported.
func TestRereadReportsAnErrorOnceWhileItLasts(t *testing.T) {
	results := []error{errors.New("bad"), errors.New("bad"), errors.New("bad"), nil, errors.New("bad"), errors.New("worse"), errors.New("worse")}
	var mu sync.Mutex
	var got []string
	i := 0
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Reread(ctx, time.Millisecond, func() error {
			mu.Lock()
			defer mu.Unlock()
			if i == len(results) {
				cancel()
				return nil
			}
			i++
			return results[i-1]
		}, func(err error) {
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				got = append(got, "ok")
			} else {
				got = append(got, err.Error())
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Reread did not return once its context ended")
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"bad", "ok", "bad", "worse"}
	if len(got) < len(want) {
		t.Fatalf("reported %q, want %q", got, want)
	}
	for k := range want {
		if got[k] != want[k] {
			t.Fatalf("reported %q, want %q", got, want)
		}
	}
	// The reads that cancel (one, or more before Reread sees the context
	// end) succeed and may be reported as ok; nothing else may follow.
	for _, r := range got[len(want):] {
		if r != "ok" {
			t.Fatalf("reported %q, want %q then only ok", got, want)
		}
	}
}

func TestFailuresKeepTheFirstAndCountTheRest(t *testing.T) {
	var f Failures
	f.Add(nil)
	if f.Err() != nil || f.N != 0 {
		t.Fatalf("no failure: %v %d", f.Err(), f.N)
	}
	first := errors.New("get the owner a/b: forbidden")
	f.Add(first)
	if !errors.Is(f.Err(), first) || f.Err().Error() != first.Error() {
		t.Fatalf("one failure: %v", f.Err())
	}
	f.Add(errors.New("second"))
	f.Add(errors.New("third"))
	if err := f.Err(); !errors.Is(err, first) || err.Error() != "get the owner a/b: forbidden (and 2 more failures this pass)" || f.N != 3 {
		t.Fatalf("three failures: %v (%d)", err, f.N)
	}
}

func TestSleepEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep on an ended context reported it live")
	}
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep on a live context reported it ended")
	}
}
