// Command load sends recorded AdmissionReview requests to a running webhook
// over TLS, at a fixed concurrency for a bounded time, and reports
// throughput and latency percentiles. Only loopback targets are accepted:
// it exists to size and compare the webhook on this machine.
//
//	go run ./test/load --url https://127.0.0.1:9443/validate-v1-service \
//	    --ca .local/webhook/ca.crt --duration 10s --concurrency 8
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
)

func main() {
	target := flag.String("url", "", "webhook endpoint, e.g. https://127.0.0.1:9443/validate-v1-service (loopback only)")
	caFile := flag.String("ca", "", "CA certificate that signed the webhook's serving certificate")
	reviewFile := flag.String("review", "cmd/webhook/testdata/admissionreviews/validate-002-create-wh-auto.json", "AdmissionReview request body to send")
	duration := flag.Duration("duration", 10*time.Second, "how long to send (at most 5m)")
	concurrency := flag.Int("concurrency", 8, "requests in flight")
	certFile := flag.String("cert", "", "client certificate to present (a webhook run with --client-ca-file); with --key")
	keyFile := flag.String("key", "", "key of --cert")
	flag.Parse()
	if err := run(*target, *caFile, *reviewFile, *duration, *concurrency, *certFile, *keyFile); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

func run(target, caFile, reviewFile string, duration time.Duration, concurrency int, certFile, keyFile string) error {
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "https" {
		return fmt.Errorf("--url %q: want an https URL", target)
	}
	if ip := net.ParseIP(u.Hostname()); (ip == nil || !ip.IsLoopback()) && u.Hostname() != "localhost" {
		return fmt.Errorf("--url %q: only loopback targets are allowed", target)
	}
	if duration <= 0 || duration > 5*time.Minute {
		return fmt.Errorf("--duration %s: use 1s to 5m", duration)
	}
	if concurrency < 1 || concurrency > 256 {
		return fmt.Errorf("--concurrency %d: use 1 to 256", concurrency)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("--ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("--ca %s holds no PEM certificate", caFile)
	}
	body, err := os.ReadFile(reviewFile)
	if err != nil {
		return fmt.Errorf("--review: %w", err)
	}
	tlsConfig := &tls.Config{RootCAs: pool}
	if certFile != "" || keyFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return fmt.Errorf("--cert/--key: %w", err)
		}
		tlsConfig.Certificates = []tls.Certificate{pair}
	}
	tr := &http.Transport{TLSClientConfig: tlsConfig, MaxIdleConnsPerHost: concurrency}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	var (
		mu        sync.Mutex
		latencies []time.Duration
		failures  int
		allowed   int
		firstErr  string
	)
	deadline := time.Now().Add(duration)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local []time.Duration
			for time.Now().Before(deadline) {
				t0 := time.Now()
				ok, isAllowed, msg := send(client, target, body)
				d := time.Since(t0)
				mu.Lock()
				if ok {
					local = append(local, d)
					if isAllowed {
						allowed++
					}
				} else {
					failures++
					if firstErr == "" {
						firstErr = msg
					}
				}
				mu.Unlock()
			}
			mu.Lock()
			latencies = append(latencies, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(latencies)
	pct := func(p float64) time.Duration {
		if len(latencies) == 0 {
			return 0
		}
		return latencies[min(len(latencies)-1, int(float64(len(latencies))*p))]
	}
	fmt.Printf("requests: %d ok (%d allowed), %d failed in %s at concurrency %d\n", len(latencies), allowed, failures, elapsed.Round(time.Millisecond), concurrency)
	fmt.Printf("throughput: %.0f requests/s\n", float64(len(latencies))/elapsed.Seconds())
	fmt.Printf("latency: p50 %s  p90 %s  p99 %s  max %s\n", pct(0.50), pct(0.90), pct(0.99), pct(1))
	if failures > 0 {
		return fmt.Errorf("%d requests failed; first: %s", failures, firstErr)
	}
	return nil
}

// send posts one review; ok is false for transport errors and malformed
// answers (a denial is a valid answer).
func send(c *http.Client, target string, body []byte) (ok, allowed bool, msg string) {
	resp, err := c.Post(target, "application/json", bytes.NewReader(body))
	if err != nil {
		return false, false, err.Error()
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return false, false, fmt.Sprintf("HTTP %d %v %s", resp.StatusCode, err, strings.TrimSpace(string(data)))
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(data, &review); err != nil || review.Response == nil {
		return false, false, fmt.Sprintf("malformed response: %v", err)
	}
	return true, review.Response.Allowed, ""
}
