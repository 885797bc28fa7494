package framework

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Faults the chaos scenarios inject, and the readings they take.

// CrashAPIServer kills apiserver i with SIGKILL, as a crash or an OOM kill
// would: no graceful shutdown, connections cut.
func (c *Cluster) CrashAPIServer(i int) { c.APIServers[i].Kill() }

// repairRaceSignature is what kube-apiserver (v1.37.2) logs when it exits
// during its start because the first pass of its ClusterIP repair controller
// failed: under Service creates on the other apiservers the pass can find a
// Service whose IPAddress its informer has not seen yet, try to create that
// IPAddress, get AlreadyExists, which it treats as not retryable, and the
// post-start hook then times out (fatal, exit 255). The other apiservers
// keep serving; a supervisor (the kubelet for a static pod, systemd) starts
// it again, and so does RestartAPIServer.
const repairRaceSignature = `PostStartHook "start-service-ip-repair-controllers" failed`

// apiserverStarts bounds how often RestartAPIServer starts an apiserver
// that exits with repairRaceSignature; any other exit fails at once.
const apiserverStarts = 3

// RestartAPIServer starts a crashed apiserver i again on its port and waits
// until its /readyz answers ok.
func (c *Cluster) RestartAPIServer(ctx context.Context, i int) error {
	a := c.APIServers[i]
	hc, err := httpsClient(c.PKI.CA.CertPEM, c.Admin)
	if err != nil {
		return err
	}
	for start := 1; ; start++ {
		mark := a.LogSize()
		if err := a.Restart(); err != nil {
			return err
		}
		err := poll(ctx, a.Name+" ready after restart", 90*time.Second, 100*time.Millisecond, []*Process{a.Process}, getOK(hc, a.URL+"/readyz"))
		if err == nil || !errors.Is(err, errExited) || start == apiserverStarts ||
			!strings.Contains(TailFile(a.LogPath, mark, 50), repairRaceSignature) {
			return err
		}
		c.Logf("e2e: %s exited during its start (kube-apiserver's ClusterIP repair race: %s); starting it again, as a supervisor would (start %d of %d)", a.Name, repairRaceSignature, start+1, apiserverStarts)
	}
}

// RestartWebhook starts a crashed webhook replica again on its ports and
// waits until its /readyz answers ok.
func (c *Cluster) RestartWebhook(ctx context.Context, i int) error {
	w := c.Webhooks[i]
	if err := w.Restart(); err != nil {
		return err
	}
	return w.WaitReady(ctx, 60*time.Second)
}

// APIServerMetric sums the samples of a Prometheus metric of apiserver i
// whose labels contain every one of match (`resource="ipaddresses"`, ...).
func (c *Cluster) APIServerMetric(ctx context.Context, i int, name string, match ...string) (float64, error) {
	hc, err := httpsClient(c.PKI.CA.CertPEM, c.Admin)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.APIServers[i].URL+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s/metrics: %s", c.APIServers[i].URL, resp.Status)
	}
	return SumMetric(resp.Body, name, match...)
}

// WebhookMetric sums the samples of a metric of webhook replica i.
func (c *Cluster) WebhookMetric(ctx context.Context, i int, name string, match ...string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.Webhooks[i].MetricsAddr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return SumMetric(resp.Body, name, match...)
}

// SumMetric sums the samples of name in a Prometheus text exposition whose
// labels contain every one of match.
func SumMetric(r io.Reader, name string, match ...string) (float64, error) {
	var sum float64
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue // a longer name with this prefix
		}
		ok := true
		for _, m := range match {
			if !strings.Contains(rest, m) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		f := strings.Fields(rest[strings.LastIndex(rest, "}")+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("metric line %q: %w", line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}
