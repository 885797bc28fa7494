package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"clusterip-policy/certs"
	"clusterip-policy/test/e2e/framework"
)

// nodeUp starts a real node (framework.StartNode) and leaves it running:
// DIR/pids lists its processes for hack/node-down.sh, DIR/env what a test
// or a person needs to use it. hack/node-up.sh runs it as root after
// recording the host's network state.
func nodeUp(args []string, stdout io.Writer) error {
	fl := flag.NewFlagSet("node-up", flag.ContinueOnError)
	dir := fl.String("dir", ".local/node", "directory for everything of the node (made by hack/node-up.sh)")
	bridge := fl.String("bridge", "cipnode0", "Linux bridge the pods attach to; created here, removed by node-down")
	podCIDR := fl.String("pod-cidr", "10.244.0.0/24", "the pods' addresses; the bridge (and the node) get the first")
	serviceCIDR := fl.String("service-cidr", "10.96.0.0/16", "--service-cluster-ip-range of the kube-apiserver")
	if err := fl.Parse(args); err != nil {
		return err
	}
	pc, err := netip.ParsePrefix(*podCIDR)
	if err != nil || !pc.Addr().Is4() || pc.Bits() > 28 {
		return fmt.Errorf("--pod-cidr %q: want an IPv4 CIDR of /28 or wider, such as 10.244.0.0/24", *podCIDR)
	}
	if len(*bridge) == 0 || len(*bridge) > 15 || strings.ContainsAny(*bridge, "/ \t") {
		return fmt.Errorf("--bridge %q: want an interface name of 1-15 characters without spaces or slashes", *bridge)
	}
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	if !filepath.IsAbs(*dir) {
		*dir = filepath.Join(root, *dir)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 6*time.Minute)
	defer cancelTimeout()
	start := time.Now()
	logf := func(format string, a ...any) { fmt.Fprintf(stdout, strings.TrimPrefix(format, "e2e: ")+"\n", a...) }
	n, err := framework.StartNode(ctx, framework.NodeOptions{
		Dir: *dir, Root: root, Bridge: *bridge, PodCIDR: pc, ServiceClusterIPRange: *serviceCIDR,
		Images: map[string]string{
			"clusterip-policy": filepath.Join(root, "_output", "image", "clusterip-policy"),
			"pause":            filepath.Join(root, "_output", "image", "pause"),
		},
		Logf: logf,
	})
	// The pids first, even on failure: node-down stops what did start.
	var pids strings.Builder
	if n != nil {
		for _, p := range n.Processes() {
			fmt.Fprintf(&pids, "%s %d %s\n", p.Name, p.Pid(), filepath.Base(p.Args[0]))
		}
	}
	if werr := certs.WriteFileAtomic(filepath.Join(*dir, "pids"), []byte(pids.String()), 0o644); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		if n != nil {
			for _, p := range n.Processes() {
				fmt.Fprintf(stdout, "--- %s (last lines of %s)\n%s\n", p.Name, p.LogPath, p.Tail(15))
			}
		}
		return err
	}
	a := n.APIServers[0]
	kubeconfig := filepath.Join(*dir, "kubeconfig")
	data, err := os.ReadFile(n.AdminKubeconfig)
	if err == nil {
		err = certs.WriteFileAtomic(kubeconfig, data, 0o600)
	}
	if err != nil {
		return err
	}
	u := strings.TrimPrefix(a.URL, "https://")
	host, port, _ := strings.Cut(u, ":")
	env := fmt.Sprintf(`NODE_DIR=%s
NODE_NAME=%s
NODE_KUBECONFIG=%s
NODE_APISERVER_HOST=%s
NODE_APISERVER_PORT=%s
NODE_REGISTRY=%s
NODE_IMAGE=%s
NODE_PAUSE_IMAGE=%s
NODE_BRIDGE=%s
NODE_POD_CIDR=%s
NODE_CONTAINERD_SOCK=%s
`, *dir, n.Name, kubeconfig, host, port, n.Registry.Addr(), n.ImageRefs["clusterip-policy"], n.ImageRefs["pause"], *bridge, pc.Masked(),
		filepath.Join(*dir, "containerd", "containerd.sock"))
	if err := certs.WriteFileAtomic(filepath.Join(*dir, "env"), []byte(env), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, `
node %s Ready in %s:
  kube-apiserver  %s (--service-cluster-ip-range=%s, --enable-aggregator-routing)
  registry        http://%s  (image %s)
  pods            bridge %s, %s, no route out, no masquerade
  kubeconfig      %s
  logs            %s
try:
  export KUBECONFIG=%s PATH=$PWD/.local/bin:$PATH
  kubectl get nodes -o wide
stop with: make node-down
`, n.Name, time.Since(start).Round(time.Millisecond), a.URL, *serviceCIDR, n.Registry.Addr(), n.ImageRefs["clusterip-policy"],
		*bridge, pc.Masked(), kubeconfig, filepath.Join(*dir, "logs"), kubeconfig)
	return nil
}
