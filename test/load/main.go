// Command load sends recorded AdmissionReview requests to a running webhook
// over TLS, at a fixed concurrency for a bounded time, and reports
// throughput and latency percentiles. Only loopback targets are accepted:
// it exists to size and compare the webhook on this machine.
//
//	go run ./test/load --url https://127.0.0.1:9443/validate-v1-service \
//	    --ca .local/webhook/ca.crt --duration 10s --concurrency 8
//
// Hostile input: 100 CREATEs of 50,000 clusterIPs each, with the webhook's
// resident memory before and after:
//
//	go run ./test/load --url https://127.0.0.1:9443/mutate-v1-service \
//	    --ca .local/cluster/webhook-certs/ca.crt --review internal/admission/testdata/admissionreviews/mutate-003-create-wh-static.json \
//	    --hostile-clusterips 50000 --requests 100 --concurrency 4 --webhook-pid PID
//
// With --webhook-pid it also reports the CPU time (utime+stime from
// /proc/PID/stat) the webhook spent per answered review, the figure that
// compares webhooks independently of the load generator's own share of the
// machine. hack/cpu-compare.sh runs it against ours and test/nopwebhook in
// turn.
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
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"clusterip-policy/test/procstat"
)

func main() {
	target := flag.String("url", "", "webhook endpoint, e.g. https://127.0.0.1:9443/validate-v1-service (loopback only)")
	caFile := flag.String("ca", "", "CA certificate that signed the webhook's serving certificate")
	reviewFile := flag.String("review", "internal/admission/testdata/admissionreviews/validate-002-create-wh-auto.json", "AdmissionReview request body to send")
	duration := flag.Duration("duration", 10*time.Second, "how long to send (at most 5m)")
	concurrency := flag.Int("concurrency", 8, "requests in flight")
	requests := flag.Int("requests", 0, "stop after this many requests (0: send until --duration ends)")
	hostile := flag.Int("hostile-clusterips", 0, "replace the review's spec.clusterIPs by this many copies of one dynamic-band address (50000 makes the 0.7 MB body the webhook must answer with one short denial)")
	pid := flag.Int("webhook-pid", 0, "report this process's resident memory (VmRSS) before and after, and its CPU time per review (a webhook on this machine)")
	certFile := flag.String("cert", "", "client certificate to present (a webhook run with --client-ca-file); with --key")
	keyFile := flag.String("key", "", "key of --cert")
	flag.Parse()
	opts := options{requests: *requests, hostile: *hostile, pid: *pid, certFile: *certFile, keyFile: *keyFile}
	if err := run(*target, *caFile, *reviewFile, *duration, *concurrency, opts); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

// options are the flags beyond the basic load: hostile-input
// measurements and a client certificate.
type options struct {
	requests int // total requests; 0 for no limit but the duration
	hostile  int // clusterIPs entries to send; 0 to send the review as recorded
	pid      int // webhook process whose RSS to report; 0 for none

	certFile, keyFile string // client certificate, for a webhook run with --client-ca-file
}

func run(target, caFile, reviewFile string, duration time.Duration, concurrency int, opts options) error {
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
	if opts.requests < 0 || opts.requests > 1000000 {
		return fmt.Errorf("--requests %d: use 0 to 1000000", opts.requests)
	}
	if opts.hostile < 0 || opts.hostile > 250000 {
		return fmt.Errorf("--hostile-clusterips %d: use 0 to 250000 (3 MiB, the apiserver's body limit, holds about 220000)", opts.hostile)
	}
	body, err := os.ReadFile(reviewFile)
	if err != nil {
		return fmt.Errorf("--review: %w", err)
	}
	if opts.hostile > 0 {
		if body, err = withClusterIPs(body, opts.hostile); err != nil {
			return fmt.Errorf("--review %s: %w", reviewFile, err)
		}
	}
	rssBefore := rss(opts.pid)
	cpuBefore, cpuErr := cpuTime(opts.pid)
	var sent atomic.Int64
	var maxResp atomic.Int64
	tlsConfig := &tls.Config{RootCAs: pool}
	if opts.certFile != "" || opts.keyFile != "" {
		pair, err := tls.LoadX509KeyPair(opts.certFile, opts.keyFile)
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
				if opts.requests > 0 && sent.Add(1) > int64(opts.requests) {
					break
				}
				t0 := time.Now()
				ok, isAllowed, msg, size := send(client, target, body)
				for m := maxResp.Load(); int64(size) > m && !maxResp.CompareAndSwap(m, int64(size)); m = maxResp.Load() {
				}
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
	cpuAfter, err := cpuTime(opts.pid)
	if cpuErr == nil {
		cpuErr = err
	}
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
	fmt.Printf("request body: %d bytes; largest response: %d bytes\n", len(body), maxResp.Load())
	if opts.pid > 0 {
		fmt.Printf("webhook pid %d VmRSS: %s before, %s after\n", opts.pid, rssBefore, rss(opts.pid))
		cpuPerReview := "unknown"
		if cpuErr != nil {
			fmt.Printf("webhook pid %d CPU: %v\n", opts.pid, cpuErr)
		} else if n := len(latencies); n > 0 {
			used := cpuAfter - cpuBefore
			cpuPerReview = fmt.Sprintf("%.4f", used.Seconds()*1000/float64(n))
			fmt.Printf("webhook pid %d CPU: %s for %d reviews, %s ms per review\n", opts.pid, used, n, cpuPerReview)
		}
		// One line for scripts (hack/cpu-compare.sh).
		fmt.Printf("summary: reviews_per_s=%.0f p50_ms=%.3f p99_ms=%.3f cpu_ms_per_review=%s\n",
			float64(len(latencies))/elapsed.Seconds(), ms(pct(0.50)), ms(pct(0.99)), cpuPerReview)
	}
	if failures > 0 {
		return fmt.Errorf("%d requests failed; first: %s", failures, firstErr)
	}
	return nil
}

// send posts one review; ok is false for transport errors and malformed
// answers (a denial is a valid answer).
func send(c *http.Client, target string, body []byte) (ok, allowed bool, msg string, size int) {
	resp, err := c.Post(target, "application/json", bytes.NewReader(body))
	if err != nil {
		return false, false, err.Error(), 0
	}
	defer resp.Body.Close()
	// Read at most 1 MiB: a larger answer is itself the failure to report.
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return false, false, fmt.Sprintf("HTTP %d %v %.300s", resp.StatusCode, err, strings.TrimSpace(string(data))), len(data)
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(data, &review); err != nil || review.Response == nil {
		return false, false, fmt.Sprintf("malformed response (%d bytes): %v", len(data), err), len(data)
	}
	return true, review.Response.Allowed, "", len(data)
}

// withClusterIPs returns the review with n copies of 10.96.200.5 (a
// dynamic-band address of 10.96.0.0/16) as the object's clusterIPs.
func withClusterIPs(body []byte, n int) ([]byte, error) {
	var review map[string]any
	if err := json.Unmarshal(body, &review); err != nil {
		return nil, err
	}
	req, _ := review["request"].(map[string]any)
	obj, _ := req["object"].(map[string]any)
	spec, _ := obj["spec"].(map[string]any)
	if spec == nil {
		return nil, fmt.Errorf("no request.object.spec to put clusterIPs in")
	}
	ips := make([]string, n)
	for i := range ips {
		ips[i] = "10.96.200.5"
	}
	spec["clusterIP"], spec["clusterIPs"] = ips[0], ips
	return json.Marshal(review)
}

// rss reads VmRSS from /proc/PID/status, or says why it cannot.
func rss(pid int) string {
	if pid <= 0 {
		return ""
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return err.Error()
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "no VmRSS"
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// cpuTime is the user and system CPU time a process has used so far
// (test/procstat); 0 when no pid was given.
func cpuTime(pid int) (time.Duration, error) {
	if pid <= 0 {
		return 0, nil
	}
	return procstat.ProcessCPU(pid)
}
