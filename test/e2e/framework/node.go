package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/certs"
)

// NodeOptions describe a real node: containerd + runc + the CNI bridge from
// the distribution, and a kubelet, kube-scheduler and kube-controller-manager
// built from the k8s.io/kubernetes module, beside the harness's etcd and
// kube-apiserver.
type NodeOptions struct {
	Dir  string // everything of the node; must be empty or absent
	Root string // repository root
	// Bridge is the Linux bridge the pods are attached to, created here with
	// the first address of PodCIDR and removed by hack/node-down.sh.
	Bridge  string
	PodCIDR netip.Prefix
	// ServiceClusterIPRange of the apiserver.
	ServiceClusterIPRange string
	// Images are OCI layouts pushed to the loopback registry, by repository
	// name (for example "clusterip-policy" and "pause"); "pause" is the
	// sandbox image.
	Images map[string]string
	Logf   func(format string, args ...any)
}

// Node is a running node and its control plane. Everything runs detached:
// hack/node-down.sh stops it from the pids file Start writes.
type Node struct {
	*Cluster
	Registry          *Registry
	Containerd        *Process
	Kubelet           *Process
	Scheduler         *Process
	ControllerManager *Process

	Name     string
	BridgeIP netip.Addr
	// ImageRefs are repo:tag@digest of each pushed image, as the registry
	// serves them.
	ImageRefs map[string]string
	Dir       string
}

// NodeName is the name the kubelet registers.
const NodeName = "cip-node"

// StartNode brings the node up. It creates opts.Bridge (refusing one that
// exists) before anything else; on error the caller runs node-down.
func StartNode(ctx context.Context, o NodeOptions) (*Node, error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	n := &Node{Name: NodeName, Dir: o.Dir, BridgeIP: o.PodCIDR.Masked().Addr().Next(), ImageRefs: map[string]string{}}
	bin := DefaultBinaries(o.Root)
	toolDir := filepath.Dir(bin.Kubectl)
	for _, b := range []string{"kubelet", "kube-scheduler", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(toolDir, b)); err != nil {
			return nil, fmt.Errorf("%s is missing (run `make node-tools`): %w", filepath.Join(toolDir, b), err)
		}
	}
	for _, b := range []string{"containerd", "runc", "ip"} {
		if _, err := exec.LookPath(b); err != nil {
			return nil, fmt.Errorf("%s is missing: install containerd, runc, containernetworking-plugins and iproute2 (.ci/run does): %w", b, err)
		}
	}
	cniBin := "/usr/lib/cni"
	if _, err := os.Stat(filepath.Join(cniBin, "bridge")); err != nil {
		return nil, fmt.Errorf("the CNI bridge plugin is missing: `apt-get install containernetworking-plugins`: %w", err)
	}
	for _, d := range []string{"logs", "containerd/certs.d", "cni/net.d", "kubelet", "pod-logs", "registry"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	po := ProcessOptions{Detach: true}

	// The bridge gets its address here, not from the CNI plugin: the plugin's
	// isGateway would also turn on net.ipv4.ip_forward for the whole host.
	bridgeCIDR := netip.PrefixFrom(n.BridgeIP, o.PodCIDR.Bits()).String()
	if err := run(ctx, "ip", "link", "add", o.Bridge, "type", "bridge"); err != nil {
		return nil, fmt.Errorf("create bridge %s (does it exist? run `make node-down`): %w", o.Bridge, err)
	}
	if err := run(ctx, "ip", "addr", "add", bridgeCIDR, "dev", o.Bridge); err != nil {
		return nil, err
	}
	if err := run(ctx, "ip", "link", "set", o.Bridge, "up"); err != nil {
		return nil, err
	}
	o.Logf("node: bridge %s %s", o.Bridge, bridgeCIDR)

	// The PKI first: the apiserver presents a kubelet client certificate and
	// serves on the bridge address too, where the pods dial it.
	pki, err := NewPKI(filepath.Join(o.Dir, "pki"), net.IP(n.BridgeIP.AsSlice()))
	if err != nil {
		return nil, err
	}
	kubeletClient, err := pki.ClientCert("kube-apiserver-kubelet-client", "system:masters")
	if err != nil {
		return nil, err
	}
	kcCert, kcKey := filepath.Join(pki.Dir, "apiserver-kubelet-client.crt"), filepath.Join(pki.Dir, "apiserver-kubelet-client.key")
	if err := writeFiles(map[string][]byte{kcCert: kubeletClient.CertPEM, kcKey: kubeletClient.KeyPEM}); err != nil {
		return nil, err
	}
	// The admission configuration of a managed provider (GKE's): the
	// ResourceQuota plugin admits pods of the critical priority classes
	// only in a namespace holding a ResourceQuota scoped to the class, so
	// the chart's pods and hook Jobs (system-cluster-critical) start only
	// through the quota the chart ships. Nothing else on the node runs a
	// critical pod: no kube-proxy, no DNS pods, no static pods. PodSecurity
	// keeps its defaults (privileged where a namespace has no label).
	admissionConfig, err := filepath.Abs(filepath.Join(o.Dir, "admission-config.yaml"))
	if err != nil {
		return nil, err
	}
	if err := writeFiles(map[string][]byte{admissionConfig: []byte(ProviderAdmissionConfiguration)}); err != nil {
		return nil, err
	}
	c, err := Start(ctx, Options{
		Dir:  filepath.Join(o.Dir, "cluster"),
		Root: o.Root,
		PKI:  pki,
		APIServers: []APIServerOptions{{
			ServiceClusterIPRange: o.ServiceClusterIPRange,
			BindAddress:           n.BridgeIP.String(),
			ExtraArgs: []string{
				"--advertise-address=" + n.BridgeIP.String(),
				// The apiserver dials a webhook Service's ready endpoints
				// itself: no kube-proxy, no ClusterIP ever contacted.
				"--enable-aggregator-routing=true",
				// Added to the default plugins, ResourceQuota and
				// PodSecurity among them.
				"--enable-admission-plugins=NodeRestriction",
				"--admission-control-config-file=" + admissionConfig,
				// The node's address, never its name: a name would be
				// looked up in the host's DNS, outside this machine.
				"--kubelet-preferred-address-types=InternalIP",
				"--kubelet-client-certificate=" + kcCert,
				"--kubelet-client-key=" + kcKey,
			},
		}},
		NoRBAC: true, NoRegister: true, Detach: true, Logf: o.Logf,
	})
	if c != nil {
		n.Cluster = c
	}
	if err != nil {
		return n, err
	}
	server := c.APIServers[0].URL
	// The harness's apiserver authorizes with RBAC alone (the flag is a list;
	// a second one adds to it). The kubelet gets the bootstrap system:node
	// role for its group, as clusters did before the Node authorizer;
	// NodeRestriction still limits it to its own Node and pods.
	if _, err := c.Client(0).RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "cip-node:system:nodes"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "system:nodes"}},
	}, metav1.CreateOptions{}); err != nil {
		return n, fmt.Errorf("bind system:node to the nodes: %w", err)
	}

	n.Registry, err = StartRegistry(ctx, filepath.Join(o.Dir, "registry"), po)
	if err != nil {
		return n, err
	}
	imagebuild := filepath.Join(o.Root, "_output", "tools", "imagebuild")
	for name, layout := range o.Images {
		tag, err := LayoutTag(layout)
		if err != nil {
			return n, err
		}
		out, err := output(ctx, imagebuild, "push", "--layout", layout, "--ref", n.Registry.Addr()+"/"+name+":"+tag)
		if err != nil {
			return n, fmt.Errorf("push %s: %w", layout, err)
		}
		n.ImageRefs[name] = n.Registry.Addr() + "/" + name + ":" + tag + "@" + strings.TrimPrefix(out, n.Registry.Addr()+"/"+name+"@")
		o.Logf("node: pushed %s", n.ImageRefs[name])
	}
	pause, ok := n.ImageRefs["pause"]
	if !ok {
		return n, fmt.Errorf("no pause image among %v: the sandbox image must come from the loopback registry", o.Images)
	}

	cd := filepath.Join(o.Dir, "containerd")
	sock := filepath.Join(cd, "containerd.sock")
	hosts := fmt.Sprintf("server = \"http://%[1]s\"\n\n[host.\"http://%[1]s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", n.Registry.Addr())
	cni := map[string]any{
		"cniVersion": "1.0.0", "name": "cip-node",
		"plugins": []any{map[string]any{
			"type": "bridge", "bridge": o.Bridge,
			// No gateway and no masquerade: the pods get no default route
			// (nothing leaves the bridge) and the host's forwarding and
			// iptables stay as they are.
			"isGateway": false, "ipMasq": false, "hairpinMode": false,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": o.PodCIDR.Masked().String(), "rangeStart": n.BridgeIP.Next().String()}}},
				"dataDir": filepath.Join(o.Dir, "cni", "ipam"),
			},
		}},
	}
	cniJSON, _ := json.MarshalIndent(cni, "", "  ")
	if err := writeFiles(map[string][]byte{
		filepath.Join(cd, "config.toml"):                              []byte(containerdConfig(cd, pause, filepath.Join(o.Dir, "cni", "net.d"), cniBin)),
		filepath.Join(cd, "certs.d", n.Registry.Addr(), "hosts.toml"): []byte(hosts),
		filepath.Join(o.Dir, "cni", "net.d", "10-cip-node.conflist"):  cniJSON,
	}); err != nil {
		return n, err
	}
	containerd, _ := exec.LookPath("containerd")
	n.Containerd, err = StartProcess("containerd", filepath.Join(o.Dir, "logs", "containerd.log"), []string{containerd, "--config", filepath.Join(cd, "config.toml")}, po)
	if err != nil {
		return n, err
	}
	if err := poll(ctx, "containerd socket", 30*time.Second, 100*time.Millisecond, []*Process{n.Containerd}, func(context.Context) (bool, error) {
		_, err := os.Stat(sock)
		return err == nil, nil
	}); err != nil {
		return n, err
	}

	// The node's components, each with a client certificate of the identity
	// Kubernetes' bootstrap RBAC and the Node authorizer expect.
	kubeconfig := func(name, user string, groups ...string) (string, error) {
		cert, err := pki.ClientCert(user, groups...)
		if err != nil {
			return "", err
		}
		path := filepath.Join(o.Dir, name+".kubeconfig")
		return path, (&Identity{User: user, Groups: groups, Cert: cert}).WriteKubeconfig(path, server, pki.CA.CertPEM)
	}
	kubeletKC, err := kubeconfig("kubelet", "system:node:"+n.Name, "system:nodes")
	if err != nil {
		return n, err
	}
	schedKC, err := kubeconfig("kube-scheduler", "system:kube-scheduler")
	if err != nil {
		return n, err
	}
	cmKC, err := kubeconfig("kube-controller-manager", "system:kube-controller-manager")
	if err != nil {
		return n, err
	}
	ports := make([]int, 4)
	for i := range ports {
		if ports[i], err = FreePort(); err != nil {
			return n, err
		}
	}
	kcfg := filepath.Join(o.Dir, "kubelet", "config.yaml")
	if err := writeFiles(map[string][]byte{kcfg: []byte(kubeletConfig(n.BridgeIP.String(), ports[0], ports[1], pki.CAFile, sock, filepath.Join(o.Dir, "pod-logs")))}); err != nil {
		return n, err
	}
	n.Kubelet, err = StartProcess("kubelet", filepath.Join(o.Dir, "logs", "kubelet.log"), []string{
		filepath.Join(toolDir, "kubelet"), "--config=" + kcfg, "--kubeconfig=" + kubeletKC,
		"--root-dir=" + filepath.Join(o.Dir, "kubelet"), "--cert-dir=" + filepath.Join(o.Dir, "kubelet", "pki"),
		"--node-ip=" + n.BridgeIP.String(), "--hostname-override=" + n.Name, "--v=1",
	}, po)
	if err != nil {
		return n, err
	}
	n.Scheduler, err = StartProcess("kube-scheduler", filepath.Join(o.Dir, "logs", "kube-scheduler.log"), []string{
		filepath.Join(toolDir, "kube-scheduler"), "--kubeconfig=" + schedKC, "--authentication-kubeconfig=" + schedKC, "--authorization-kubeconfig=" + schedKC,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(ports[2]), "--leader-elect=false",
	}, po)
	if err != nil {
		return n, err
	}
	n.ControllerManager, err = StartProcess("kube-controller-manager", filepath.Join(o.Dir, "logs", "kube-controller-manager.log"), []string{
		filepath.Join(toolDir, "kube-controller-manager"), "--kubeconfig=" + cmKC, "--authentication-kubeconfig=" + cmKC, "--authorization-kubeconfig=" + cmKC,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(ports[3]), "--leader-elect=false",
		"--use-service-account-credentials=true", "--root-ca-file=" + pki.CAFile,
		"--service-account-private-key-file=" + pki.SAPrivateKey,
		"--service-cluster-ip-range=" + o.ServiceClusterIPRange,
	}, po)
	if err != nil {
		return n, err
	}

	cs := c.Client(0)
	watch := []*Process{n.Containerd, n.Kubelet, n.Scheduler, n.ControllerManager}
	if err := poll(ctx, "node "+n.Name+" Ready", 3*time.Minute, time.Second, watch, func(ctx context.Context) (bool, error) {
		node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, fmt.Errorf("node Ready=%s: %s", cond.Status, cond.Message)
			}
		}
		return false, nil
	}); err != nil {
		return n, err
	}
	// Pods need their namespace's default ServiceAccount and the root CA
	// ConfigMap, which the controller-manager makes.
	if err := poll(ctx, "default ServiceAccount and kube-root-ca.crt", time.Minute, 500*time.Millisecond, watch, func(ctx context.Context) (bool, error) {
		if _, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return false, err
		}
		_, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err == nil, err
	}); err != nil {
		return n, err
	}
	return n, nil
}

// ProviderAdmissionConfiguration is the node's kube-apiserver
// --admission-control-config-file: the ResourceQuota plugin limits pods of
// system-node-critical and system-cluster-critical to namespaces holding a
// ResourceQuota whose scopeSelector covers the class, as GKE configures it
// (and as the Kubernetes docs' "Limit Priority Class consumption by
// default" example does). The apiserver makes no exception for kube-system
// (k8s.io/apiserver/pkg/admission/plugin/resourcequota, CheckRequest): GKE
// ships a quota there itself.
const ProviderAdmissionConfiguration = `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ResourceQuota
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: ResourceQuotaConfiguration
    limitedResources:
    - resource: pods
      matchScopes:
      - scopeName: PriorityClass
        operator: In
        values: ["system-node-critical", "system-cluster-critical"]
`

// Processes are the node's processes and its control plane's, in start order.
func (n *Node) Processes() []*Process {
	var ps []*Process
	if n.Cluster != nil {
		ps = n.Cluster.Processes()
	}
	for _, p := range []*Process{n.registryProcess(), n.Containerd, n.Kubelet, n.Scheduler, n.ControllerManager} {
		if p != nil {
			ps = append(ps, p)
		}
	}
	return ps
}

func (n *Node) registryProcess() *Process {
	if n.Registry == nil {
		return nil
	}
	return n.Registry.Process
}

// containerdConfig is containerd 1.6's configuration (version 2) with every
// path under dir, so the node shares nothing with a containerd of the host.
// restrict_oom_score_adj: the sandbox's oom_score_adj of -998 needs
// CAP_SYS_RESOURCE, which root lacks on these machines (runc init fails with
// "can't get final child's PID from pipe" without it). The native
// snapshotter copies layers: no overlay mounts to leak. The other
// snapshotters are off: aufs would modprobe a kernel module at start.
func containerdConfig(dir, sandboxImage, cniConfDir, cniBinDir string) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = %[3]q

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = %[4]q
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = %[5]q
    restrict_oom_score_adj = true
    enable_selinux = false
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "native"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = %[6]q
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = %[7]q
      conf_dir = %[8]q
      max_conf_num = 1
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = %[9]q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), filepath.Join(dir, "containerd.sock"), filepath.Join(dir, "opt"),
		sandboxImage, filepath.Join(dir, "runc"), cniBinDir, cniConfDir, filepath.Join(dir, "certs.d"))
}

// kubeletConfig: cgroup v1 needs failCgroupV1 false from 1.35 on;
// makeIPTablesUtilChains false keeps the host's iptables as they are; no
// cluster DNS and an empty resolv.conf, so a pod never asks a nameserver
// outside; the server on the bridge address, its API authenticated by the
// cluster CA and authorized by the apiserver.
func kubeletConfig(addr string, port, healthzPort int, caFile, sock, podLogs string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %s
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%s
makeIPTablesUtilChains: false
podLogsDir: %s
resolvConf: ""
clusterDomain: cluster.local
maxPods: 40
serializeImagePulls: false
evictionHard:
  memory.available: 100Mi
  nodefs.available: "1%%"
  imagefs.available: "1%%"
  nodefs.inodesFree: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`, addr, port, healthzPort, caFile, sock, podLogs)
}

// LayoutTag is the tag `imagebuild build` recorded in an OCI layout's
// index.json (its org.opencontainers.image.ref.name annotation).
func LayoutTag(dir string) (string, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		return "", fmt.Errorf("%w (run `make image`)", err)
	}
	var idx struct {
		Manifests []struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		return "", fmt.Errorf("%s/index.json: %w", dir, err)
	}
	if len(idx.Manifests) != 1 || idx.Manifests[0].Annotations["org.opencontainers.image.ref.name"] == "" {
		return "", fmt.Errorf("%s/index.json: want one index with a ref.name annotation, as `make image` writes", dir)
	}
	return idx.Manifests[0].Annotations["org.opencontainers.image.ref.name"], nil
}

func writeFiles(files map[string][]byte) error {
	for path, data := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := certs.WriteFileAtomic(path, data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func run(ctx context.Context, name string, args ...string) error {
	_, err := output(ctx, name, args...)
	return err
}

// output runs a short command and returns its trimmed stdout; its stderr is
// in the error.
func output(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}
