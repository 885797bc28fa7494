package cli

import (
	"fmt"
	"maps"
	"slices"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// kubeFlags are kubectl's flags for reaching a cluster (--kubeconfig,
// --context, --cluster, --user, --server, the credentials and --as,
// --as-group, --as-uid), spelt and applied as kubectl spells and applies
// them: client-go's clientcmd binds them, as it does for
// k8s.io/cli-runtime's ConfigFlags (which this does not import: its
// package brings the resource builder and kustomize, and took the binary
// from 35 to 84 MB stripped).
type kubeFlags struct {
	kubeconfig string
	overrides  clientcmd.ConfigOverrides
	// namespace is kubectl's -n, hidden: taken only to be refused with
	// the reason (see check).
	namespace string
}

func (k *kubeFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "Kubeconfig of the cluster to audit. Empty: $KUBECONFIG, else ~/.kube/config, as kubectl does; inside a pod without either, its service account.")
	names := clientcmd.RecommendedConfigOverrideFlags("")
	names.CurrentContext.Description = "Kubeconfig context to use. Empty: the current context."
	// Not these of kubectl's: the commands read every namespace and bound
	// the whole read with their own --timeout; basic auth is hidden in
	// kubectl too.
	names.ContextOverrideFlags.Namespace = clientcmd.FlagInfo{}
	names.Timeout = clientcmd.FlagInfo{}
	names.AuthOverrideFlags.Username, names.AuthOverrideFlags.Password = clientcmd.FlagInfo{}, clientcmd.FlagInfo{}
	clientcmd.BindOverrideFlags(&k.overrides, fs, names)
	fs.StringVarP(&k.namespace, clientcmd.FlagNamespace, "n", "", "Not taken: the command reads every namespace.")
	_ = fs.MarkHidden(clientcmd.FlagNamespace)
}

// check refuses what kubectl's hands type but the command cannot do.
func (k *kubeFlags) check() error {
	if k.namespace != "" {
		return fmt.Errorf("--namespace %q: audit reads the Services of every namespace (addresses are cluster-wide); drop -n", k.namespace)
	}
	return nil
}

// loader is the kubeconfig as kubectl loads it: --kubeconfig, else
// $KUBECONFIG, else ~/.kube/config, the flags over it, and the pod's
// service account when there is none.
func (k *kubeFlags) loader() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &k.overrides)
}

// complete offers the kubeconfig's names for --context, --cluster and
// --user, and files for --kubeconfig and the certificate flags.
func (k *kubeFlags) complete(cmd *cobra.Command) {
	for flag, names := range map[string]func(clientcmdapi.Config) []string{
		clientcmd.FlagContext:     func(c clientcmdapi.Config) []string { return slices.Sorted(maps.Keys(c.Contexts)) },
		clientcmd.FlagClusterName: func(c clientcmdapi.Config) []string { return slices.Sorted(maps.Keys(c.Clusters)) },
		clientcmd.FlagAuthInfoName: func(c clientcmdapi.Config) []string {
			return slices.Sorted(maps.Keys(c.AuthInfos))
		},
	} {
		_ = cmd.RegisterFlagCompletionFunc(flag, func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
			raw, err := k.loader().RawConfig()
			if err != nil {
				return nil, cobra.ShellCompDirectiveError
			}
			return names(raw), cobra.ShellCompDirectiveNoFileComp
		})
	}
	for _, f := range []string{"kubeconfig", clientcmd.FlagCAFile, clientcmd.FlagCertFile, clientcmd.FlagKeyFile} {
		_ = cmd.MarkFlagFilename(f)
	}
}
