package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/internal/exitcode"
	"clusterip-policy/pkg/backstop"
)

const unregisterLong = `Deletes the MutatingWebhookConfiguration and the ValidatingWebhookConfiguration
that send Service and ServiceCIDR writes to the webhook, and the bindings of
the backstop (the admission policies the leader writes with --backstop),
then waits --settle for every apiserver to drop them, and deletes the
backstop's policies. The chart runs it as a pre-delete hook: helm uninstall
deletes the webhook's Service before the configurations (it knows no order
for their kind), and Service creates the configurations still send to a
Service that is gone fail with failurePolicy Fail. Deleted first, they send
nothing; and the backstop enforces nothing of a policy being uninstalled.
An object already gone is not an error.

Needs get and delete on the two configurations, and delete on the
backstop's policies and bindings, by name.

Exit status: 0 both are gone; 2 a flag or an argument cannot be used, or no
kubeconfig; 3 a configuration could not be deleted (unreachable, not
allowed) within --timeout.`

func newUnregisterCommand(streams IOStreams) *cobra.Command {
	var kube kubeFlags
	var timeout, settle time.Duration
	var mutating, validating string
	cmd := &cobra.Command{
		Use:               "unregister [--kubeconfig FILE] [--settle 3s]",
		Short:             "delete the webhook configurations before the webhook goes (the chart's pre-delete hook)",
		Long:              unregisterLong,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(c *cobra.Command, args []string) error {
			return exitcode.Err(runUnregister(c.Context(), kube, unregisterOptions{mutating, validating, timeout, settle}, args, streams.Out, streams.ErrOut))
		},
	}
	fs := cmd.Flags()
	kube.addFlags(fs)
	fs.Lookup("kubeconfig").Usage = "Kubeconfig of the cluster. Empty: $KUBECONFIG, else ~/.kube/config, as kubectl does; inside a pod without either, its service account."
	fs.StringVar(&mutating, "mutating-webhook-configuration", "clusterip-policy", "Name of the MutatingWebhookConfiguration to delete.")
	fs.StringVar(&validating, "validating-webhook-configuration", "clusterip-policy", "Name of the ValidatingWebhookConfiguration to delete.")
	fs.DurationVar(&timeout, "timeout", time.Minute, "Time allowed for the deletes (1s-10m).")
	fs.DurationVar(&settle, "settle", 3*time.Second, "How long to wait after the deletes, so that every apiserver has dropped the configurations before the webhook's Service goes (0-1m).")
	kube.complete(cmd)
	return cmd
}

type unregisterOptions struct {
	mutating, validating string
	timeout, settle      time.Duration
}

func runUnregister(ctx context.Context, kube kubeFlags, o unregisterOptions, args []string, stdout, stderr io.Writer) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "unregister: "+format+"\n", a...)
		return code
	}
	switch {
	case len(args) > 0:
		return fail(exitcode.BadData, "unexpected argument %q: unregister deletes the configurations its flags name and takes no file", args[0])
	case o.timeout < time.Second || o.timeout > 10*time.Minute:
		return fail(exitcode.BadData, "--timeout %s: use 1s to 10m", o.timeout)
	case o.settle < 0 || o.settle > time.Minute:
		return fail(exitcode.BadData, "--settle %s: use 0 to 1m", o.settle)
	case o.mutating == "" || o.validating == "":
		return fail(exitcode.BadData, "--mutating-webhook-configuration and --validating-webhook-configuration must name the configurations (clusterip-policy)")
	case kube.namespace != "":
		return fail(exitcode.BadData, "--namespace %q: webhook configurations are cluster-scoped; drop -n", kube.namespace)
	}
	client, err := toolClient(kube, "unregister", 0)
	if err != nil {
		return fail(exitcode.BadData, "%v", err)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	adm := client.AdmissionregistrationV1()
	type deletion struct {
		kind, name string
		del        func(context.Context, string, metav1.DeleteOptions) error
	}
	// The configurations and the backstop's bindings first: once they
	// are gone the leader writes no binding again (it counts the
	// backstop lifted) and deletes its policies itself.
	first := []deletion{
		{"MutatingWebhookConfiguration", o.mutating, adm.MutatingWebhookConfigurations().Delete},
		{"ValidatingWebhookConfiguration", o.validating, adm.ValidatingWebhookConfigurations().Delete},
	}
	var last []deletion
	for _, n := range backstop.Names() {
		if n == backstop.RecordName {
			first = append(first, deletion{"MutatingAdmissionPolicyBinding", n, adm.MutatingAdmissionPolicyBindings().Delete})
			last = append(last, deletion{"MutatingAdmissionPolicy", n, adm.MutatingAdmissionPolicies().Delete})
			continue
		}
		first = append(first, deletion{"ValidatingAdmissionPolicyBinding", n, adm.ValidatingAdmissionPolicyBindings().Delete})
		last = append(last, deletion{"ValidatingAdmissionPolicy", n, adm.ValidatingAdmissionPolicies().Delete})
	}
	del := func(ds []deletion, quiet bool) int {
		for _, d := range ds {
			err := d.del(ctx, d.name, metav1.DeleteOptions{})
			switch {
			case apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err):
				if !quiet {
					fmt.Fprintf(stdout, "%s %s: already gone\n", d.kind, d.name)
				}
			case err != nil:
				return fail(exitcode.Unreadable, "delete %s %s: %v", d.kind, d.name, err)
			default:
				fmt.Fprintf(stdout, "%s %s: deleted\n", d.kind, d.name)
			}
		}
		return exitcode.OK
	}
	// The backstop's objects are many and most never exist (one policy
	// per action): only those deleted are named.
	if code := del(first[:2], false); code != exitcode.OK {
		return code
	}
	if code := del(first[2:], true); code != exitcode.OK {
		return code
	}
	select {
	case <-time.After(o.settle):
	case <-ctx.Done():
	}
	fmt.Fprintf(stdout, "waited %s for every apiserver to drop them\n", o.settle)
	return del(last, true)
}
