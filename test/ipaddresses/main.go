// Command ipaddresses creates (or deletes) many IPAddress objects on a
// local kube-apiserver, so that the webhook's view can be measured at the
// size of a large cluster: its resident memory with 100,000 allocated
// addresses, and its cost per review then.
//
//	go run ./test/ipaddresses --kubeconfig .local/kubeconfig --count 100000
//	go run ./test/ipaddresses --kubeconfig .local/kubeconfig --delete
//
// The objects hold 10.100.0.1 onwards (outside the local cluster's
// 10.96.0.0/16, so they block nothing a test uses), name Services
// namespace-N/service-M as a cluster's would, and carry a managed-by label
// of their own: the apiserver's repair loop leaves them alone, and
// --delete removes exactly them. Only a loopback apiserver is accepted.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	managedByLabel = "ipaddress.kubernetes.io/managed-by"
	managedBy      = "measurement.clusterip-policy.io"
	maxCount       = 200_000
)

func main() {
	kubeconfig := flag.String("kubeconfig", ".local/kubeconfig", "kubeconfig of a kube-apiserver on loopback")
	count := flag.Int("count", 100_000, fmt.Sprintf("IPAddress objects to create (at most %d)", maxCount))
	workers := flag.Int("concurrency", 16, "requests in flight (1 to 64)")
	timeout := flag.Duration("timeout", 15*time.Minute, "give up after this long")
	del := flag.Bool("delete", false, "delete the objects this command created instead")
	flag.Parse()
	if err := run(*kubeconfig, *count, *workers, *timeout, *del); err != nil {
		fmt.Fprintln(os.Stderr, "ipaddresses:", err)
		os.Exit(1)
	}
}

func run(kubeconfig string, count, workers int, timeout time.Duration, del bool) error {
	if count < 1 || count > maxCount {
		return fmt.Errorf("--count %d: use 1 to %d", count, maxCount)
	}
	if workers < 1 || workers > 64 {
		return fmt.Errorf("--concurrency %d: use 1 to 64", workers)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig: %w", err)
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return fmt.Errorf("kubeconfig server %q: %w", cfg.Host, err)
	}
	if ip := net.ParseIP(u.Hostname()); (ip == nil || !ip.IsLoopback()) && u.Hostname() != "localhost" {
		return fmt.Errorf("kubeconfig server %q: only a loopback apiserver is allowed", cfg.Host)
	}
	cfg.QPS, cfg.Burst = 5000, 5000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ipas := client.NetworkingV1().IPAddresses()
	start := time.Now()
	if del {
		// The apiserver gives up answering a large DeleteCollection after
		// a minute (a timeout, or a reset HTTP/2 stream) but goes on
		// deleting; ask again until none is left.
		selector := metav1.ListOptions{LabelSelector: managedByLabel + "=" + managedBy}
		var err error
		for attempt := 0; attempt < 10; attempt++ {
			if err = ipas.DeleteCollection(ctx, metav1.DeleteOptions{}, selector); err == nil {
				break
			}
			left, lerr := ipas.List(ctx, metav1.ListOptions{LabelSelector: selector.LabelSelector, Limit: 1})
			if lerr == nil && len(left.Items) == 0 {
				err = nil
				break
			}
		}
		if err != nil {
			return fmt.Errorf("delete: %w", err)
		}
		fmt.Printf("deleted the IPAddresses labelled %s=%s in %s\n", managedByLabel, managedBy, time.Since(start).Round(time.Millisecond))
		return nil
	}

	var next, created, existed atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= count {
					return
				}
				_, err := ipas.Create(ctx, object(i), metav1.CreateOptions{})
				switch {
				case err == nil:
					created.Add(1)
				case apierrors.IsAlreadyExists(err):
					existed.Add(1)
				default:
					once.Do(func() { firstErr = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("create: %w (created %d)", firstErr, created.Load())
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("created %d of %d before --timeout %s", created.Load(), count, timeout)
	}
	elapsed := time.Since(start)
	fmt.Printf("created %d IPAddresses (%d existed already) in %s, %.0f/s\n", created.Load(), existed.Load(), elapsed.Round(time.Millisecond), float64(created.Load())/elapsed.Seconds())
	return nil
}

// object is the i-th IPAddress: 10.100.0.1 + i, held by Service
// namespace-(i%100)/service-i.
func object(i int) *networkingv1.IPAddress {
	ip := netip.MustParseAddr("10.100.0.1")
	b := ip.As4()
	n := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) + uint32(i)
	addr := netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
	return &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: addr.String(), Labels: map[string]string{managedByLabel: managedBy}},
		Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{
			Resource: "services", Namespace: fmt.Sprintf("namespace-%d", i%100), Name: fmt.Sprintf("service-%d", i),
		}},
	}
}
