package framework

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
)

// RepoRoot finds the repository root: $CLUSTERIP_POLICY_ROOT if set, else the
// nearest directory above the working directory that holds go.mod. Tests run
// in test/e2e, the local-cluster command in the root.
func RepoRoot() (string, error) {
	if r := os.Getenv("CLUSTERIP_POLICY_ROOT"); r != "" {
		return filepath.Abs(r)
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory; set CLUSTERIP_POLICY_ROOT")
		}
		dir = parent
	}
}

// Binaries are the executables the harness runs.
type Binaries struct {
	Etcd          string
	KubeAPIServer string
	Kubectl       string
	Webhook       string
}

// DefaultBinaries are the ones `make tools` and `make build` produce:
// .local/bin/{etcd,kube-apiserver,kubectl} and bin/clusterip-policy. $E2E_BIN_DIR
// overrides the tool directory and $E2E_WEBHOOK the webhook binary.
func DefaultBinaries(root string) Binaries {
	dir := os.Getenv("E2E_BIN_DIR")
	if dir == "" {
		dir = filepath.Join(root, ".local", "bin")
	}
	webhook := os.Getenv("E2E_WEBHOOK")
	if webhook == "" {
		webhook = filepath.Join(root, "bin", "clusterip-policy")
	}
	return Binaries{
		Etcd:          filepath.Join(dir, "etcd"),
		KubeAPIServer: filepath.Join(dir, "kube-apiserver"),
		Kubectl:       filepath.Join(dir, "kubectl"),
		Webhook:       webhook,
	}
}

// Check reports the first binary that is missing, with the make target that
// builds it; the webhook only when webhook is set.
func (b Binaries) Check(webhook bool) error {
	for _, f := range []struct{ path, target string }{
		{b.Etcd, "make tools"},
		{b.KubeAPIServer, "make tools"},
		{b.Kubectl, "make tools"},
		{b.Webhook, "make build"},
	} {
		if f.path == b.Webhook && !webhook {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("%s is missing (run `%s`): %w", f.path, f.target, err)
		}
	}
	return nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. The
// kernel hands out ephemeral ports in sequence, so a port just closed is not
// given to the next caller at once; a clash with another process is possible
// but rare, and shows as a start-up failure with the port in the log.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
