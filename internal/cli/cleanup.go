package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"clusterip-policy/internal/exitcode"
	"clusterip-policy/pkg/holds"
)

const cleanupLong = `Deletes what the webhook's pods wrote and nothing else, once no pod of the
webhook is left in --namespace: the reservation holds (IPAddress objects
labelled ipaddress.kubernetes.io/managed-by=clusterip-policy.io, each
deleted only if it is still the object that was listed), the leader's Lease,
and the certificate Secrets the leader made (labelled
app.kubernetes.io/managed-by=clusterip-policy; a Secret someone else made
under that name is kept and named). The chart runs it as a post-delete hook,
so after helm uninstall a Service created naming a reserved address (kube-dns
with its address) gets it.

It waits for the pods first because a running leader would hold the
addresses again, and it refuses to start while the webhook configurations
exist: the webhook is then still installed (perhaps in another namespace
than the one given), and its holds are in force. The ServiceCIDRs, the
Services, the apiserver's own IPAddresses and the ClusterIPPolicy CRD are
never touched.

Needs get on the two webhook configurations, list on pods in --namespace,
list and delete on ipaddresses, delete on the Lease and get and delete on
the Secrets, by name.

Exit status: 0 nothing of the webhook's is left; 2 a flag or an argument
cannot be used, or no kubeconfig; 3 the webhook configurations still
exist, a pod of the webhook was still there at --timeout, or something
could not be read or deleted (unreachable, not allowed).`

// managedByWebhook is the label the leader puts on the Secrets it writes
// (internal/controllers/servingcerts): only those are deleted.
const managedByWebhook = "app.kubernetes.io/managed-by=clusterip-policy"

func newCleanupCommand(streams IOStreams) *cobra.Command {
	var kube kubeFlags
	var o cleanupOptions
	cmd := &cobra.Command{
		Use:               "cleanup [--namespace NAMESPACE] [--timeout 2m]",
		Short:             "delete the holds, the Lease and the Secrets the webhook wrote, once its pods are gone (the chart's post-delete hook)",
		Long:              cleanupLong,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(c *cobra.Command, args []string) error {
			o.namespace = kube.namespace
			return exitcode.Err(runCleanup(c.Context(), kube, o, args, streams.Out, streams.ErrOut))
		},
	}
	fs := cmd.Flags()
	kube.addFlags(fs)
	fs.Lookup("kubeconfig").Usage = "Kubeconfig of the cluster. Empty: $KUBECONFIG, else ~/.kube/config, as kubectl does; inside a pod without either, its service account."
	ns := fs.Lookup("namespace")
	ns.Hidden, ns.Usage = false, "Namespace the webhook ran in (its pods, Lease and Secrets). Empty: the kubeconfig's namespace (inside a pod, its own)."
	fs.StringVar(&o.podSelector, "pod-selector", "app.kubernetes.io/name=clusterip-policy-webhook", "Label selector of the webhook's pods; cleanup waits until none is left.")
	fs.StringVar(&o.lease, "leader-election-lease", "clusterip-policy-leader", "Name of the leader's Lease to delete (serve's --leader-election-lease). Empty: keep it.")
	fs.StringVar(&o.previousLease, "leader-election-previous-lease", "clusterip-policy-holds", "Name of the Lease builds before v0.1.0 elected the leader with, which the leader holds too (serve's --leader-election-previous-lease), to delete. Empty: keep it.")
	fs.StringSliceVar(&o.secrets, "secret", []string{"clusterip-policy-webhook-tls", "clusterip-policy-webhook-ca"}, "Secrets to delete if the leader made them (serve's --cert-secret and --ca-secret). Empty: none.")
	fs.StringVar(&o.mutating, "mutating-webhook-configuration", "clusterip-policy", "Name of the MutatingWebhookConfiguration that must be gone (unregister deletes it).")
	fs.StringVar(&o.validating, "validating-webhook-configuration", "clusterip-policy", "Name of the ValidatingWebhookConfiguration that must be gone (unregister deletes it).")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "Time allowed for the pods to go and for the deletes (1s-10m).")
	kube.complete(cmd)
	return cmd
}

type cleanupOptions struct {
	namespace, podSelector, lease string
	previousLease                 string
	mutating, validating          string
	secrets                       []string
	timeout                       time.Duration
	// pollEvery is how often the pods are listed while they go.
	pollEvery time.Duration
}

// cleanupWorkers deletes holds in parallel: a reserved range can bring
// thousands, and the post-delete hook runs within helm's --timeout.
const cleanupWorkers = 8

func runCleanup(ctx context.Context, kube kubeFlags, o cleanupOptions, args []string, stdout, stderr io.Writer) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "cleanup: "+format+"\n", a...)
		return code
	}
	if len(args) > 0 {
		return fail(exitcode.BadData, "unexpected argument %q: cleanup deletes what its flags name and takes no file", args[0])
	}
	if msg := o.check(); msg != "" {
		return fail(exitcode.BadData, "%s", msg)
	}
	cfg, err := toolRESTConfig(kube, "cleanup", 0)
	if err != nil {
		return fail(exitcode.BadData, "%v", err)
	}
	if o.namespace == "" {
		ns, _, err := kube.loader().Namespace()
		if err != nil || ns == "" {
			return fail(exitcode.BadData, "no --namespace, and the kubeconfig names none: give the webhook's namespace (-n clusterip-policy)")
		}
		o.namespace = ns
	}
	// client-go's default of 5 requests/s would take 14 minutes for the
	// 4,096 holds of one /20 range; the apiserver's own fairness still
	// applies.
	cfg.QPS, cfg.Burst = 200, 400
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fail(exitcode.BadData, "%v", err)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if o.pollEvery == 0 {
		o.pollEvery = time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	return cleanup(ctx, client, o, stdout, func(format string, a ...any) int { return fail(exitcode.Unreadable, format, a...) })
}

// check returns what is wrong with the flags, naming the value and the fix.
func (o cleanupOptions) check() string {
	if o.timeout < time.Second || o.timeout > 10*time.Minute {
		return fmt.Sprintf("--timeout %s: use 1s to 10m", o.timeout)
	}
	if o.mutating == "" || o.validating == "" {
		return "--mutating-webhook-configuration and --validating-webhook-configuration must name the configurations (clusterip-policy)"
	}
	sel, err := labels.Parse(o.podSelector)
	switch {
	case err != nil:
		return fmt.Sprintf("--pod-selector %q: %v", o.podSelector, err)
	case sel.Empty():
		return fmt.Sprintf("--pod-selector %q selects every pod: give the webhook pods' labels (app.kubernetes.io/name=clusterip-policy-webhook)", o.podSelector)
	}
	for flag, name := range map[string]string{"--leader-election-lease": o.lease, "--leader-election-previous-lease": o.previousLease} {
		if errs := validation.IsDNS1123Subdomain(name); name != "" && len(errs) > 0 {
			return fmt.Sprintf("%s %q is not a Lease name: %s", flag, name, strings.Join(errs, "; "))
		}
	}
	for _, s := range o.secrets {
		if errs := validation.IsDNS1123Subdomain(s); len(errs) > 0 {
			return fmt.Sprintf("--secret %q is not a Secret name: %s", s, strings.Join(errs, "; "))
		}
	}
	return ""
}

// leases are the Leases to delete: the leader's and the previous one it
// holds too, each once.
func (o cleanupOptions) leases() []string {
	var names []string
	for _, n := range []string{o.lease, o.previousLease} {
		if n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// cleanup waits for the pods to go, then deletes the Lease, the Secrets
// and the holds; fail reports what stopped it.
func cleanup(ctx context.Context, client kubernetes.Interface, o cleanupOptions, out io.Writer, fail func(string, ...any) int) int {
	if err := stillRegistered(ctx, client, o); err != nil {
		return fail("%v", err)
	}
	start := time.Now()
	if err := waitPodsGone(ctx, client, o, out, start); err != nil {
		return fail("%v", err)
	}
	for _, lease := range o.leases() {
		err := client.CoordinationV1().Leases(o.namespace).Delete(ctx, lease, metav1.DeleteOptions{})
		switch {
		case apierrors.IsNotFound(err):
			fmt.Fprintf(out, "Lease %s/%s: already gone\n", o.namespace, lease)
		case err != nil:
			return fail("delete the Lease %s/%s: %v", o.namespace, lease, err)
		default:
			fmt.Fprintf(out, "Lease %s/%s: deleted\n", o.namespace, lease)
		}
	}
	for _, name := range o.secrets {
		what, err := deleteOwnSecret(ctx, client, o.namespace, name)
		if err != nil {
			return fail("%v", err)
		}
		fmt.Fprintf(out, "Secret %s/%s: %s\n", o.namespace, name, what)
	}
	holdsStart := time.Now()
	deleted, gone, err := deleteHolds(ctx, client)
	fmt.Fprintf(out, "IPAddress holds (%s): %d deleted, %d already gone, in %s\n", holds.Selector, deleted, gone, since(holdsStart))
	if err != nil {
		return fail("%v", err)
	}
	fmt.Fprintf(out, "done in %s\n", since(start))
	return exitcode.OK
}

// stillRegistered refuses while a webhook configuration exists: the webhook
// is installed, and -n naming the wrong namespace (no pods there to wait
// for) must not take the holds of a running webhook away.
func stillRegistered(ctx context.Context, client kubernetes.Interface, o cleanupOptions) error {
	adm := client.AdmissionregistrationV1()
	_, err := adm.MutatingWebhookConfigurations().Get(ctx, o.mutating, metav1.GetOptions{})
	kind, name := "MutatingWebhookConfiguration", o.mutating
	if apierrors.IsNotFound(err) {
		_, err = adm.ValidatingWebhookConfigurations().Get(ctx, o.validating, metav1.GetOptions{})
		kind, name = "ValidatingWebhookConfiguration", o.validating
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("read the %s %s: %w", kind, name, err)
	}
	return fmt.Errorf("the %s %s exists: the webhook is still installed and its holds are in force. Uninstall it first (helm uninstall, or docs/install.md's uninstall), or run clusterip-policy unregister if it is being removed; nothing was deleted", kind, name)
}

// waitPodsGone lists the webhook's pods until none is left: a leader still
// running (terminating, within its grace period) would write the holds
// and the Lease again.
func waitPodsGone(ctx context.Context, client kubernetes.Interface, o cleanupOptions, out io.Writer, start time.Time) error {
	said := false
	for {
		pods, err := client.CoreV1().Pods(o.namespace).List(ctx, metav1.ListOptions{LabelSelector: o.podSelector, Limit: 5})
		if err != nil {
			return fmt.Errorf("list the pods %s in %s: %w", o.podSelector, o.namespace, err)
		}
		if len(pods.Items) == 0 {
			if said {
				fmt.Fprintf(out, "pods %s in %s: gone after %s\n", o.podSelector, o.namespace, since(start))
			}
			return nil
		}
		if !said {
			fmt.Fprintf(out, "waiting for the pods %s in %s to go: %s\n", o.podSelector, o.namespace, podNames(pods.Items))
			said = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pods %s in %s still there after --timeout %s: %s; a running leader would hold the addresses again. Delete the Deployment (or wait for the pods to go: kubectl -n %s get pods -l %s) and run cleanup again", o.podSelector, o.namespace, o.timeout, podNames(pods.Items), o.namespace, o.podSelector)
		case <-time.After(o.pollEvery):
		}
	}
}

// since is the time since start, to the millisecond: the Job's log says
// where an uninstall's time went.
func since(start time.Time) time.Duration { return time.Since(start).Round(time.Millisecond) }

func podNames(pods []corev1.Pod) string {
	names := make([]string, 0, len(pods))
	for _, p := range pods {
		names = append(names, p.Name)
	}
	return strings.Join(names, " ")
}

// deleteOwnSecret deletes the Secret if the leader made it (its label), and
// only the object it read (a precondition on its UID and resourceVersion).
func deleteOwnSecret(ctx context.Context, client kubernetes.Interface, ns, name string) (string, error) {
	api := client.CoreV1().Secrets(ns)
	s, err := api.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "already gone", nil
	case err != nil:
		return "", fmt.Errorf("read the Secret %s/%s: %w", ns, name, err)
	}
	own, _ := labels.Parse(managedByWebhook)
	if !own.Matches(labels.Set(s.Labels)) {
		return fmt.Sprintf("kept: not made by the webhook (no label %s)", managedByWebhook), nil
	}
	err = api.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID, ResourceVersion: &s.ResourceVersion}})
	switch {
	case apierrors.IsNotFound(err):
		return "already gone", nil
	case err != nil:
		return "", fmt.Errorf("delete the Secret %s/%s: %w", ns, name, err)
	}
	return "deleted", nil
}

// deleteHolds deletes every IPAddress labelled as a hold of ours, a page at
// a time, each with a precondition on the UID it was listed with: if the
// address changed hands in between (the apiserver allocated it to a
// Service), the Service's IPAddress is not touched.
func deleteHolds(ctx context.Context, client kubernetes.Interface) (deleted, gone int, err error) {
	api := client.NetworkingV1().IPAddresses()
	var mu sync.Mutex
	var firstErr error
	failed := 0
	opts := metav1.ListOptions{LabelSelector: holds.Selector, Limit: 500}
	for {
		page, lerr := api.List(ctx, opts)
		if lerr != nil {
			return deleted, gone, fmt.Errorf("list the IPAddresses %s: %w", holds.Selector, lerr)
		}
		work := make(chan int)
		var wg sync.WaitGroup
		for range cleanupWorkers {
			wg.Go(func() {
				for i := range work {
					ip := &page.Items[i]
					if ip.Labels[holds.ManagedByLabel] != holds.ManagedBy {
						continue // the selector is the server's; the label decides
					}
					err := api.Delete(ctx, ip.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &ip.UID}})
					mu.Lock()
					switch {
					case err == nil:
						deleted++
					case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
						gone++ // deleted by someone else, or no longer the hold
					default:
						failed++
						if firstErr == nil {
							firstErr = fmt.Errorf("delete the IPAddress %s: %w", ip.Name, err)
						}
					}
					mu.Unlock()
				}
			})
		}
		for i := range page.Items {
			work <- i
		}
		close(work)
		wg.Wait()
		if firstErr != nil {
			return deleted, gone, fmt.Errorf("%d holds could not be deleted; the first: %w", failed, firstErr)
		}
		if page.Continue == "" {
			return deleted, gone, nil
		}
		opts.Continue = page.Continue
	}
}
