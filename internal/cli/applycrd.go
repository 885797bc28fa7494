package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"

	"clusterip-policy/internal/crdapply"
	"clusterip-policy/internal/exitcode"
	"clusterip-policy/internal/version"
)

const applyCRDLong = `Server-side applies the ClusterIPPolicy CRD this binary carries (the
chart's crds/ of the same release) to the cluster, as field manager
clusterip-policy-apply-crd, and waits until the apiserver serves it. The
chart runs it as a pre-upgrade hook, so that helm upgrade brings the CRD
before it applies a policy that uses a new field (helm itself installs crds/
on the first install only).

It never replaces a CRD a newer release applied (the annotation
clusterip-policy.io/applied-by-version), and never creates one: helm install
and kubectl apply -k do. Needs get and patch on
customresourcedefinitions/clusterippolicies.clusterip-policy.io.

Exit status: 0 applied, or kept because a newer release applied it; 2 a
flag or an argument cannot be used, or no kubeconfig; 3 the CRD could not
be read or applied (missing, unreachable, not allowed), or is not served
within --timeout.`

func newApplyCRDCommand(streams IOStreams) *cobra.Command {
	var kube kubeFlags
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:               "apply-crd [--kubeconfig FILE] [--timeout 1m]",
		Short:             "bring the cluster's ClusterIPPolicy CRD up to this release's (the chart's pre-upgrade hook)",
		Long:              applyCRDLong,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(c *cobra.Command, args []string) error {
			return exitcode.Err(runApplyCRD(c.Context(), kube, timeout, args, streams.Out, streams.ErrOut))
		},
	}
	fs := cmd.Flags()
	kube.addFlags(fs)
	fs.Lookup("kubeconfig").Usage = "Kubeconfig of the cluster. Empty: $KUBECONFIG, else ~/.kube/config, as kubectl does; inside a pod without either, its service account."
	fs.DurationVar(&timeout, "timeout", time.Minute, "Time allowed for the apply and for the apiserver to serve the CRD (1s-10m).")
	kube.complete(cmd)
	return cmd
}

func runApplyCRD(ctx context.Context, kube kubeFlags, timeout time.Duration, args []string, stdout, stderr io.Writer) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "apply-crd: "+format+"\n", a...)
		return code
	}
	switch {
	case len(args) > 0:
		return fail(exitcode.BadData, "unexpected argument %q: apply-crd applies the CRD it carries and takes no file", args[0])
	case timeout < time.Second || timeout > 10*time.Minute:
		return fail(exitcode.BadData, "--timeout %s: use 1s to 10m", timeout)
	case kube.namespace != "":
		return fail(exitcode.BadData, "--namespace %q: the CRD is cluster-scoped; drop -n", kube.namespace)
	}
	cfg, err := auditRESTConfig(kube)
	if err != nil {
		return fail(exitcode.BadData, "%v", err)
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fail(exitcode.BadData, "%v", err)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	res, err := crdapply.Apply(ctx, client, version.Version())
	if err != nil {
		return fail(exitcode.Unreadable, "%v", err)
	}
	if !res.Applied {
		fmt.Fprintf(stdout, "kept the CRD %s: %s\n", crdapply.Name, res.Reason)
		return exitcode.OK
	}
	from := res.Live
	if from == "" {
		from = "no version recorded (helm install's crds/ or kubectl apply)"
	}
	fmt.Fprintf(stdout, "applied the CRD %s of %s (it was %s); served after %s\n", crdapply.Name, version.Version(), from, time.Since(start).Round(time.Millisecond))
	return exitcode.OK
}
