package framework

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// HAProxy is a haproxy (Debian's package) in TCP mode on loopback, standing
// in for the load balancer in front of a highly available control plane, or
// for the webhook's Service in front of its replicas. TLS passes through
// untouched; haproxy only decides where each new connection goes, and
// takes a backend out of rotation while its health check fails.
type HAProxy struct {
	*Process
	Port int // the frontend's loopback port
	// MonitorPort answers GET /healthz with 200 while haproxy runs: a
	// way to wait for it that opens no connection to a backend (a TCP
	// probe of the frontend would, and leave a failed TLS handshake in
	// the backend's log).
	MonitorPort int
	ConfigPath  string
}

// Backend is one server behind a HAProxy.
type Backend struct {
	Name string
	Addr string // host:port that connections go to
	// CheckAddr is where the health check goes when it is not Addr (a
	// webhook's plain-HTTP probe port); empty: Addr.
	CheckAddr string
}

// HAProxyOptions say how haproxy checks and balances its backends.
type HAProxyOptions struct {
	Name string // process and log name
	// CheckTLS sends the health check over TLS without verifying the
	// certificate (the kube-apiserver serves /readyz only over TLS).
	CheckTLS bool
	// Timeout bounds an idle connection; watches need minutes.
	Timeout time.Duration
}

// HAProxyBinary is haproxy from $E2E_HAPROXY or the PATH (Debian installs it
// in /usr/sbin, which is not always on a user's PATH).
func HAProxyBinary() (string, error) {
	if p := os.Getenv("E2E_HAPROXY"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("haproxy"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/haproxy", "/usr/local/sbin/haproxy"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("haproxy is missing: install it (`apt-get install haproxy`; .ci/run does) or set $E2E_HAPROXY")
}

// haproxyConfig renders the configuration. Every choice is what a
// production control-plane load balancer does, tightened for tests:
//   - mode tcp: TLS ends at the apiserver (or webhook), so client
//     certificates reach it;
//   - option httpchk GET /readyz with http-check expect status 200: a
//     backend that is alive but not ready (starting, shutting down, its
//     etcd unreachable) gets no new connections; inter 500ms fall 2 rise 2
//     takes a dead one out within about a second;
//   - retries 3 with option redispatch: a connection refused by a backend
//     that died since the last check is retried on another one, so
//     clients rarely see the fault at all;
//   - balance roundrobin, as kubeadm's HA guide does.
func haproxyConfig(port, monitorPort int, backends []Backend, o HAProxyOptions) string {
	timeout := o.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	var b strings.Builder
	fmt.Fprintf(&b, `global
    maxconn 4096

defaults
    mode tcp
    timeout connect 2s
    timeout client %[1]dms
    timeout server %[1]dms
    timeout check 2s
    retries 3
    option redispatch

frontend %[2]s-monitor
    mode http
    bind 127.0.0.1:%[4]d
    monitor-uri /healthz

frontend %[2]s
    bind 127.0.0.1:%[3]d
    default_backend %[2]s-servers

backend %[2]s-servers
    balance roundrobin
    option httpchk GET /readyz
    http-check expect status 200
    default-server inter 500ms fastinter 250ms downinter 500ms fall 2 rise 2
`, timeout.Milliseconds(), o.Name, port, monitorPort)
	for _, be := range backends {
		line := "    server " + be.Name + " " + be.Addr + " check"
		if be.CheckAddr != "" && be.CheckAddr != be.Addr {
			_, p, _ := net.SplitHostPort(be.CheckAddr)
			line += " port " + p
		}
		if o.CheckTLS {
			line += " check-ssl verify none"
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// StartHAProxy writes the configuration into dir, starts haproxy in the
// foreground (-db) and waits until its frontend accepts connections.
func StartHAProxy(ctx context.Context, dir string, backends []Backend, o HAProxyOptions, po ProcessOptions) (*HAProxy, error) {
	binary, err := HAProxyBinary()
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	monitorPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, o.Name+".cfg")
	if err := os.WriteFile(cfg, []byte(haproxyConfig(port, monitorPort, backends, o)), 0o644); err != nil {
		return nil, err
	}
	// Validate first: a bad configuration is a clear error, not a timeout.
	if out, err := exec.CommandContext(ctx, binary, "-c", "-q", "-f", cfg).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("haproxy -c %s: %w: %s", cfg, err, out)
	}
	p, err := StartProcess(o.Name, filepath.Join(dir, "logs", o.Name+".log"), []string{binary, "-db", "-f", cfg}, po)
	if err != nil {
		return nil, err
	}
	h := &HAProxy{Process: p, Port: port, MonitorPort: monitorPort, ConfigPath: cfg}
	err = poll(ctx, o.Name+" listening", 10*time.Second, 50*time.Millisecond, []*Process{p},
		getOK(&http.Client{Timeout: time.Second}, "http://"+hostPort(monitorPort)+"/healthz"))
	if err != nil {
		p.Stop(5 * time.Second)
		return nil, err
	}
	return h, nil
}

// Addr is the frontend's host:port.
func (h *HAProxy) Addr() string { return hostPort(h.Port) }

// URL is the frontend as an https URL.
func (h *HAProxy) URL() string { return "https://" + h.Addr() }
