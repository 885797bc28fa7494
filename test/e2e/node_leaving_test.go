//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"clusterip-policy/test/fixtures"
)

// leaving is the timeline of one webhook pod that goes away during a fault,
// each time measured from the fault's start as this test saw it.
//
// The order that matters: the apiserver (--enable-aggregator-routing) picks
// a webhook endpoint from its EndpointSlice informer and skips endpoints
// whose ready condition is false (k8s.io/apiserver pkg/util/proxy
// RandomEndpoint); the EndpointSlice controller in the controller-manager
// sets ready=false once it has seen the pod's deletionTimestamp. So the pod
// must keep serving until notReady, and exited must come after it. The
// watch below is served by the same apiserver watch cache the resolver's
// informer reads, so notReady is when the resolver stopped choosing the pod,
// give or take the informer's own dispatch.
type leaving struct {
	pod, ip  string
	deleted  time.Duration // deletionTimestamp seen on the pod (watch)
	sigterm  time.Duration // the webhook logged "shutting down"
	notReady time.Duration // its endpoint's ready condition false (watch)
	stopped  time.Duration // the webhook logged "stopped"
	exited   time.Duration // its process gone from this host's /proc
}

func (l *leaving) String() string {
	at := func(d time.Duration) string {
		if d == 0 {
			return "not seen"
		}
		return "+" + d.Round(10*time.Millisecond).String()
	}
	margin := "unknown"
	if l.notReady != 0 && l.exited != 0 {
		margin = (l.exited - l.notReady).Round(10 * time.Millisecond).String()
	}
	return fmt.Sprintf("pod %s (%s): deletionTimestamp %s, SIGTERM logged %s, endpoint not ready %s, \"stopped\" logged %s, process gone %s; served %s after leaving the endpoints",
		l.pod, l.ip, at(l.deleted), at(l.sigterm), at(l.notReady), at(l.stopped), at(l.exited), margin)
}

// leaveWatch follows the pods of the webhook Deployment that exist when it
// starts, until stop: their deletion, their log, their endpoint and their
// process. Every goroutine ends at stop or after 3 minutes.
type leaveWatch struct {
	start  time.Time
	mu     sync.Mutex
	byUID  map[string]*leaving
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (n *realNode) watchLeaving(t *testing.T, parent context.Context, ns string) *leaveWatch {
	t.Helper()
	ctx, cancel := context.WithTimeout(parent, 3*time.Minute)
	w := &leaveWatch{start: time.Now(), byUID: map[string]*leaving{}, cancel: cancel}
	pods, err := n.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=clusterip-policy-webhook"})
	if err != nil {
		t.Fatal(err)
	}
	byIP := map[string]*leaving{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.PodIP == "" {
			continue
		}
		l := &leaving{pod: p.Name, ip: p.Status.PodIP}
		w.byUID[string(p.UID)] = l
		byIP[l.ip] = l
	}
	set := func(d *time.Duration) {
		w.mu.Lock()
		if *d == 0 {
			*d = time.Since(w.start)
		}
		w.mu.Unlock()
	}

	// The pods' deletionTimestamp.
	pw, err := n.cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=clusterip-policy-webhook", ResourceVersion: pods.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	w.goWatch(ctx, pw, func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && p.DeletionTimestamp != nil {
			if l := w.byUID[string(p.UID)]; l != nil {
				set(&l.deleted)
			}
		}
	})

	// The webhook Service's EndpointSlices: when each address turns not
	// ready or disappears.
	slices, err := n.cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=clusterip-policy-webhook"})
	if err != nil {
		t.Fatal(err)
	}
	// A ready address in any of the Service's slices is one the resolver may pick.
	readyIn := map[string]map[string]bool{}
	for _, s := range slices.Items {
		readyIn[s.Name] = map[string]bool{}
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				if e.Conditions.Ready == nil || *e.Conditions.Ready {
					readyIn[s.Name][a] = true
				}
			}
		}
	}
	ew, err := n.cs.DiscoveryV1().EndpointSlices(ns).Watch(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=clusterip-policy-webhook", ResourceVersion: slices.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	w.goWatch(ctx, ew, func(obj any) {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			return
		}
		ready := map[string]bool{}
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				if e.Conditions.Ready == nil || *e.Conditions.Ready {
					ready[a] = true
				}
			}
		}
		readyIn[s.Name] = ready // one goroutine: no lock needed
		for ip, l := range byIP {
			if !slicesReady(readyIn, ip) {
				set(&l.notReady)
			}
		}
	})

	for uid, l := range w.byUID {
		// The webhook's own log, streamed through the kubelet as it is
		// written; the stream ends when the container exits.
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			rc, err := n.cs.CoreV1().Pods(ns).GetLogs(l.pod, &corev1.PodLogOptions{Follow: true, SinceTime: &metav1.Time{Time: w.start.Add(-time.Second)}}).Stream(ctx)
			if err != nil {
				return
			}
			defer rc.Close()
			sc := bufio.NewScanner(io.LimitReader(rc, 64<<20))
			sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
			for sc.Scan() {
				line := sc.Text()
				switch {
				case strings.Contains(line, `"shutting down`):
					set(&l.sigterm)
				case strings.Contains(line, `"msg":"stopped"`):
					set(&l.stopped)
				}
			}
		}()
		// The process, by its pod's cgroup on this host.
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for ctx.Err() == nil {
				if _, err := containerProcess(uid); err != nil {
					set(&l.exited)
					return
				}
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
	}
	return w
}

// faultStarts makes the fault's start the zero of the timeline; the watches
// were set up just before.
func (w *leaveWatch) faultStarts() {
	w.mu.Lock()
	w.start = time.Now()
	w.mu.Unlock()
}

func slicesReady(readyIn map[string]map[string]bool, ip string) bool {
	for _, ready := range readyIn {
		if ready[ip] {
			return true
		}
	}
	return false
}

func (w *leaveWatch) goWatch(ctx context.Context, wi watch.Interface, on func(any)) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer wi.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-wi.ResultChan():
				if !ok {
					return
				}
				if ev.Type == watch.Added || ev.Type == watch.Modified {
					on(ev.Object)
				}
			}
		}
	}()
}

// settle waits (at most within) until every pod that was deleted has exited
// and left the endpoints, then stops the watch and returns the pods that
// were deleted, in the order they were.
func (w *leaveWatch) settle(within time.Duration) []leaving {
	_ = fixtures.Wait(within, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, l := range w.byUID {
			if l.deleted != 0 && (l.exited == 0 || l.notReady == 0) {
				return false
			}
		}
		return true
	})
	w.cancel()
	w.wg.Wait()
	var out []leaving
	for _, l := range w.byUID {
		if l.deleted != 0 {
			out = append(out, *l)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].deleted < out[j].deleted })
	return out
}

// endpointSliceQueue reads the controller-manager's own metrics for its
// EndpointSlice controller: the work queue's depth now, and the total time
// items waited in it and their count (workqueue_queue_duration_seconds), so
// that two readings give the mean wait between them. Under the load's
// Service churn, every Service with a selector queues a sync there.
type queueReading struct {
	depth, waitSum, waitCount float64
}

func (n *realNode) endpointSliceQueue(ctx context.Context) (queueReading, error) {
	port, err := n.controllerManagerPort()
	if err != nil {
		return queueReading{}, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", n.kubeconfig)
	if err != nil {
		return queueReading{}, err
	}
	// The controller-manager serves a self-signed certificate; the request
	// carries the admin's client certificate, which it authenticates and
	// authorizes through the apiserver.
	cfg.CAData, cfg.CAFile, cfg.Insecure = nil, "", true
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return queueReading{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/metrics", port), nil)
	if err != nil {
		return queueReading{}, err
	}
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return queueReading{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return queueReading{}, fmt.Errorf("controller-manager /metrics: %s", resp.Status)
	}
	var r queueReading
	found := 0
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 64<<20))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		var dst *float64
		switch name {
		case `workqueue_depth{name="endpoint_slice"}`:
			dst = &r.depth
		case `workqueue_queue_duration_seconds_sum{name="endpoint_slice"}`:
			dst = &r.waitSum
		case `workqueue_queue_duration_seconds_count{name="endpoint_slice"}`:
			dst = &r.waitCount
		default:
			continue
		}
		if *dst, err = strconv.ParseFloat(value, 64); err != nil {
			return r, fmt.Errorf("%s %q: %w", name, value, err)
		}
		found++
	}
	if found != 3 {
		return r, fmt.Errorf("controller-manager /metrics has %d of the 3 endpoint_slice work queue series", found)
	}
	return r, sc.Err()
}

// controllerManagerPort reads --secure-port from the command line of the
// controller-manager node-up started (its pid is in NODE_DIR/pids).
func (n *realNode) controllerManagerPort() (int, error) {
	raw, err := os.ReadFile(filepath.Join(n.env["NODE_DIR"], "pids"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "kube-controller-manager" {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + f[1] + "/cmdline")
		if err != nil {
			return 0, err
		}
		for _, a := range strings.Split(string(cmdline), "\x00") {
			if v, ok := strings.CutPrefix(a, "--secure-port="); ok {
				return strconv.Atoi(v)
			}
		}
	}
	return 0, fmt.Errorf("no kube-controller-manager with --secure-port in %s/pids", n.env["NODE_DIR"])
}

// queueFigures says what two readings of the EndpointSlice queue show.
func queueFigures(before, after queueReading, errBefore, errAfter error) string {
	if errBefore != nil || errAfter != nil {
		return fmt.Sprintf("the controller-manager's EndpointSlice queue could not be read: %v %v", errBefore, errAfter)
	}
	mean := "none"
	if n := after.waitCount - before.waitCount; n > 0 {
		mean = (time.Duration((after.waitSum - before.waitSum) / n * float64(time.Second))).Round(time.Millisecond).String()
	}
	return fmt.Sprintf("the controller-manager's EndpointSlice queue: depth %.0f at the fault, %.0f after; %.0f syncs meanwhile waited %s in the queue on average",
		before.depth, after.depth, after.waitCount-before.waitCount, mean)
}
