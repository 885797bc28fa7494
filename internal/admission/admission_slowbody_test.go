package admission

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// slowBodyBound is how long the test allows a slow body before it must
// have been cut: the server's bound and a margin for a loaded machine.
const slowBodyBound = maxBodyTime + 2*time.Second

// slowClient opens a connection to addr and sends the head of a POST to
// path with the given framing header, and none of the body.
func slowClient(t *testing.T, addr, path, framing string) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n%s\r\n\r\n", path, framing)
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	return conn
}

// mutateOverTheWire serves the mutating endpoint on loopback through
// controller-runtime's mux, whose metrics wrapper is between the server and
// the endpoint, as in serve; it returns the server and its host:port.
func mutateOverTheWire(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	r := newTestReviewer(t, testPolicy, true)
	hooks := webhook.NewServer(webhook.Options{})
	hooks.Register("/mutate", admissionEndpoint(r.recorded(mutatingHandler{r.reviewer})))
	srv := httptest.NewServer(hooks.WebhookMux())
	t.Cleanup(srv.Close)
	return srv, strings.TrimPrefix(srv.URL, "http://")
}

// Clients that announce large bodies and send nothing (or a byte now and
// then) hold no part of the body budget: a real review sent meanwhile is
// answered at once, and each slow client is answered 408 and cut within
// the bound. Issue 38, hole 1: five such connections used to hold the whole
// 32 MiB, and every review got 429.
func TestSlowBodiesDoNotStopReviews(t *testing.T) {
	srv, addr := mutateOverTheWire(t)

	start := time.Now()
	var slow []net.Conn
	// 4 x 7 MiB + 4 MiB: the whole budget, as the old code counted it.
	for _, n := range []int{7 << 20, 7 << 20, 7 << 20, 7 << 20, 4 << 20} {
		slow = append(slow, slowClient(t, addr, "/mutate", fmt.Sprintf("Content-Length: %d", n)))
	}
	time.Sleep(200 * time.Millisecond) // they reach the handler first
	// Chunked, no Content-Length, and nothing after the head.
	for range 2 {
		slow = append(slow, slowClient(t, addr, "/mutate", "Transfer-Encoding: chunked"))
	}
	// Two that dribble a byte every 200ms, for at most 15 s.
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	for range 2 {
		c := slowClient(t, addr, "/mutate", "Content-Length: 100000")
		slow = append(slow, c)
		go func() {
			for range 75 {
				select {
				case <-done:
					return
				case <-time.After(200 * time.Millisecond):
				}
				if _, err := c.Write([]byte(" ")); err != nil {
					return
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond) // the slow requests reach the handler

	body := loadReview(t, "mutate-003-create-wh-static.json")
	client := &http.Client{Timeout: 10 * time.Second}
	sent := time.Now()
	resp, err := client.Post(srv.URL+"/mutate", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	took := time.Since(sent)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(out), `"allowed":true`) {
		t.Fatalf("a real review beside %d slow clients: HTTP %d after %s: %.300s", len(slow), resp.StatusCode, took, out)
	}
	if took > time.Second {
		t.Fatalf("a real review beside %d slow clients took %s", len(slow), took)
	}
	t.Logf("a real review beside %d slow clients: HTTP 200 in %s", len(slow), took)

	for i, c := range slow {
		_ = c.SetReadDeadline(start.Add(slowBodyBound + time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("slow client %d: no answer after %s: %v", i, time.Since(start), err)
		}
		_ = resp.Body.Close()
		cut := time.Since(start)
		if resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
			t.Errorf("slow client %d: HTTP %d (close %t) after %s, want 408 and Connection: close", i, resp.StatusCode, resp.Close, cut)
		}
		if cut > slowBodyBound {
			t.Errorf("slow client %d cut after %s, more than %s", i, cut, slowBodyBound)
		}
		if n, err := c.Read(make([]byte, 1)); err == nil {
			t.Errorf("slow client %d: the connection stays open after the 408 (read %d bytes)", i, n)
		}
		t.Logf("slow client %d: HTTP %d after %s", i, resp.StatusCode, cut)
	}
}

// A body over controller-runtime's 7 MiB limit, sent at once, is still
// answered with its 413 review, whether framed by Content-Length or
// chunked; and what it took of the budget is given back.
func TestOversizedBodiesOverTheWireAreStillAnswered413(t *testing.T) {
	_, addr := mutateOverTheWire(t)

	chunk := bytes.Repeat([]byte("x"), 32<<10)
	for _, framing := range []string{fmt.Sprintf("Content-Length: %d", 7<<20+100), fmt.Sprintf("Content-Length: %d", 64<<20), "Transfer-Encoding: chunked"} {
		c := slowClient(t, addr, "/mutate", framing)
		go func() {
			w := bufio.NewWriter(c)
			for range 300 { // 9.4 MiB; the server stops reading at 7 MiB
				if framing == "Transfer-Encoding: chunked" {
					fmt.Fprintf(w, "%x\r\n%s\r\n", len(chunk), chunk)
				} else {
					_, _ = w.Write(chunk)
				}
			}
			_ = w.Flush()
		}()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", framing, err)
		}
		out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(out), `"message":"request entity is too large; limit is 7340032 bytes","code":413`) {
			t.Fatalf("%s: HTTP %d: %.300s", framing, resp.StatusCode, out)
		}
	}
	// The handlers give it back just after the answer is written.
	for i := 0; !bodiesInFlight.TryAcquire(maxBodyBytesInFlight); i++ {
		if i == 200 {
			t.Fatal("the oversized bodies did not give their room back within 2s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	bodiesInFlight.Release(maxBodyBytesInFlight)
}
