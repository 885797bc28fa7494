package framework

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"time"
)

// Etcd is a single-member etcd on loopback.
type Etcd struct {
	*Process
	URL string // client URL
}

// StartEtcd starts etcd with its data in dir/etcd and waits until healthy.
func StartEtcd(ctx context.Context, binary, dir string, po ProcessOptions) (*Etcd, error) {
	client, err := FreePort()
	if err != nil {
		return nil, err
	}
	peer, err := FreePort()
	if err != nil {
		return nil, err
	}
	clientURL := "http://" + hostPort(client)
	peerURL := "http://" + hostPort(peer)
	argv := []string{binary,
		"--name=e2e",
		"--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + clientURL,
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=e2e=" + peerURL,
		"--log-level=warn",
		// The data is thrown away after the run; fsync only slows the
		// 2-core machines the tests run on.
		"--unsafe-no-fsync",
	}
	p, err := StartProcess("etcd", filepath.Join(dir, "logs", "etcd.log"), argv, po)
	if err != nil {
		return nil, err
	}
	e := &Etcd{Process: p, URL: clientURL}
	hc := &http.Client{Timeout: 2 * time.Second}
	err = poll(ctx, "etcd healthy", 30*time.Second, 100*time.Millisecond, []*Process{p}, func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, clientURL+"/health", nil)
		resp, err := hc.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"health":"true"`) {
			return false, fmt.Errorf("%s: %s", resp.Status, body)
		}
		return true, nil
	})
	if err != nil {
		p.Stop(5 * time.Second)
		return nil, err
	}
	return e, nil
}
