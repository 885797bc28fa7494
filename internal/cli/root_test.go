package cli

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"clusterip-policy/internal/exitcode"
)

// Every command of the tree, the ones added later too, refuses a flag it
// does not have with exit 2, naming the flag and where its help is, and
// prints nothing on stdout.
func TestEveryCommandRefusesAnUnknownFlagNamingIt(t *testing.T) {
	root := NewRoot(Name, IOStreams{}, nil)
	names := Commands(root)
	if len(names) < 5 {
		t.Fatalf("the tree lists %v", names)
	}
	for _, name := range names {
		args := append(strings.Fields(name), "--no-such-flag")
		code, out, stderr := runCLI("", args...)
		last := args[len(args)-2]
		want := last + ": unknown flag: --no-such-flag\nRun 'clusterip-policy " + name + " --help' for its flags.\n"
		if code != exitcode.BadData || out != "" || stderr != want {
			t.Errorf("%s --no-such-flag: exit %d, stdout %q, stderr %q; want 2, nothing, %q", name, code, out, stderr, want)
		}
	}
}

// An application command's --help goes to stderr, as before cobra (its
// stdout is for what it produces); `help COMMAND` asks for it, on stdout.
// Both exit 0 and print the same text.
func TestHelpOfACommand(t *testing.T) {
	for _, name := range []string{"review", "audit", "bands", "suggest", "apply-crd", "unregister", "cleanup", "version"} {
		code, out, asFlag := runCLI("", name, "--help")
		if code != exitcode.OK || out != "" || !strings.HasPrefix(asFlag, "Usage: clusterip-policy "+name+" ") || !strings.Contains(asFlag, "Exit status: 0") {
			t.Errorf("%s --help: exit %d, stdout %q, stderr %q", name, code, out, asFlag)
		}
		code, asCommand, stderr := runCLI("", "help", name)
		if code != exitcode.OK || stderr != "" || asCommand != asFlag {
			t.Errorf("help %s: exit %d, stderr %q, stdout\n%s\nwant what --help printed", name, code, stderr, asCommand)
		}
	}
	// -help, as Go's flag package spells it, as before cobra.
	if code, out, stderr := runCLI("", "bands", "-help"); code != exitcode.OK || out != "" || !strings.HasPrefix(stderr, "Usage: clusterip-policy bands ") {
		t.Errorf("bands -help: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, _, stderr := runCLI("", "help", "revue")
	if code != exitcode.BadData || !strings.Contains(stderr, `help: no command "revue"; the commands are review, audit, bands, suggest, apply-crd, unregister, cleanup, version, completion, help`) {
		t.Errorf("help revue: exit %d, stderr %q", code, stderr)
	}
}

func TestAnUnknownCommandIsRefusedWithTheList(t *testing.T) {
	code, out, stderr := runCLI("", "revew", "x.yaml")
	if code != exitcode.BadData || out != "" || !strings.HasPrefix(stderr, "unknown command \"revew\"; did you mean review?\n\n") || !strings.Contains(stderr, "  clusterip-policy review [flags] FILE... ") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}

// The root's list is made from the tree: each command's line shows its
// arguments, not the flags its Use spells out.
func TestTheRootListsTheTree(t *testing.T) {
	code, out, _ := runCLI("", "help")
	want := `clusterip-policy keeps Kubernetes Service ClusterIPs where policy says.

Usage:
  clusterip-policy review [flags] FILE...  evaluate Service manifests offline, as if created
  clusterip-policy audit [flags]           report existing Services that break the policy (read-only)
  clusterip-policy bands [flags] [CIDR...] print each range's static and dynamic band, or (--usage) how full they are
  clusterip-policy suggest [flags]         print free addresses the policy lets a Service of a namespace name
  clusterip-policy apply-crd [flags]       bring the cluster's ClusterIPPolicy CRD up to this release's (the chart's pre-upgrade hook)
  clusterip-policy unregister [flags]      delete the webhook configurations before the webhook goes (the chart's pre-delete hook)
  clusterip-policy cleanup [flags]         delete the holds, the Lease and the Secrets the webhook wrote, once its pods are gone (the chart's post-delete hook)
  clusterip-policy version [flags]         print version information
  clusterip-policy completion SHELL        print the shell completion script (bash, zsh, fish or powershell)
  clusterip-policy help [COMMAND]          print this list, or a command's help

Run 'clusterip-policy COMMAND --help' for a command's flags.
`
	if code != exitcode.OK || out != want {
		t.Errorf("exit %d:\n%s\nwant\n%s", code, out, want)
	}
}

// Called as kubectl finds its plugins, the binary's help and messages say
// `kubectl clusterip-policy`.
func TestThePluginNameShowsInTheHelp(t *testing.T) {
	if got := DisplayName("/usr/local/bin/" + PluginName); got != "kubectl clusterip-policy" {
		t.Fatalf("DisplayName(%s) = %q", PluginName, got)
	}
	if got := DisplayName("./clusterip-policy-v1.2.3-linux-amd64"); got != Name {
		t.Fatalf("DisplayName of the release file = %q, want %s", got, Name)
	}
	var out, errb strings.Builder
	code := Run(NewRoot(DisplayName(PluginName), IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errb}, nil), []string{"bands", "--nope"})
	if code != exitcode.BadData || !strings.Contains(errb.String(), "Run 'kubectl clusterip-policy bands --help'") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
	out.Reset()
	// No command, as a plugin: the list (serve, the binary's default, is
	// not what kubectl users run).
	code = Run(NewRoot(DisplayName(PluginName), IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errb}, nil), nil)
	if code != exitcode.OK || !strings.HasPrefix(out.String(), "kubectl clusterip-policy keeps") || !strings.Contains(out.String(), "\n  kubectl clusterip-policy review [flags] FILE...") {
		t.Errorf("help as a plugin:\n%s", out.String())
	}
}

func TestCompletion(t *testing.T) {
	for shell, first := range map[string]string{"bash": "# bash completion V2 for clusterip-policy", "zsh": "#compdef clusterip-policy", "fish": "# fish completion for clusterip-policy", "powershell": "# powershell completion for clusterip-policy"} {
		code, out, stderr := runCLI("", "completion", shell)
		if code != exitcode.OK || stderr != "" || !strings.HasPrefix(out, first) {
			t.Errorf("completion %s: exit %d, stderr %q, stdout begins %q", shell, code, stderr, out[:min(len(out), 60)])
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"completion", "tcsh"}, "completion: no shell \"tcsh\"; use bash, zsh, fish or powershell\n"},
		{[]string{"completion"}, "completion: name the shell: bash, zsh, fish or powershell\n"},
	} {
		if code, out, stderr := runCLI("", tc.args...); code != exitcode.BadData || out != "" || stderr != tc.want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, code, out, stderr, tc.want)
		}
	}
	// What the shell asks while the user types.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"__complete", "review", "-o", ""}, "text\njson\nyaml\n:4\n"},
		{[]string{"__complete", "re"}, "review\tevaluate Service manifests offline, as if created\n:4\n"},
		{[]string{"__complete", "bands", ""}, ":4\n"},
	} {
		if code, out, _ := runCLI("", tc.args...); code != exitcode.OK || out != tc.want {
			t.Errorf("%v: exit %d, stdout %q; want %q", tc.args, code, out, tc.want)
		}
	}
}

// audit takes kubectl's flags for the cluster and applies them as kubectl
// does: --context picks the context (its names are offered for
// completion), --server overrides its server, --as impersonates.
func TestAuditTakesKubectlsClusterFlags(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Impersonate-User")+" "+strings.Join(r.Header.Values("Impersonate-Group"), ","))
		mu.Unlock()
		http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"forbidden"}`, http.StatusForbidden)
	}))
	defer api.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters:
- name: refused
  cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}
- name: test
  cluster: {server: "`+api.URL+`", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: not-a-real-token}
contexts:
- name: refused
  context: {cluster: refused, user: u}
- name: test
  context: {cluster: test, user: u}
current-context: refused
`), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"audit", "--kubeconfig", kubeconfig, "--timeout", "5s"}
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
		seen   string
	}{
		{"the current context", nil, exitcode.Unreadable, "127.0.0.1:1", ""},
		{"--context", []string{"--context", "test"}, exitcode.Unreadable, "forbidden", " "},
		{"--server over the context's", []string{"--server", api.URL}, exitcode.Unreadable, "forbidden", " "},
		{"--as and --as-group", []string{"--context", "test", "--as", "alice", "--as-group", "auditors"}, exitcode.Unreadable, "forbidden", "alice auditors"},
		{"a context that does not exist", []string{"--context", "nope"}, exitcode.BadData, `context "nope" does not exist; check --context against the kubeconfig's contexts`, ""},
		{"kubectl's -n", []string{"-n", "kube-system"}, exitcode.BadData, `--namespace "kube-system": audit reads the Services of every namespace (addresses are cluster-wide); drop -n`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			seen = nil
			mu.Unlock()
			code, out, stderr := runCLI("", append(base, tc.args...)...)
			if code != tc.code || out != "" || !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %d and %q", code, out, stderr, tc.code, tc.stderr)
			}
			mu.Lock()
			defer mu.Unlock()
			if tc.seen != "" && (len(seen) == 0 || seen[0] != tc.seen) {
				t.Errorf("the apiserver saw impersonation %q, want %q", seen, tc.seen)
			}
			if tc.seen == "" && len(seen) > 0 {
				t.Errorf("the apiserver was called (%q), want the other one or none", seen)
			}
		})
	}
	code, out, _ := runCLI("", "__complete", "audit", "--kubeconfig", kubeconfig, "--context", "")
	if code != exitcode.OK || out != "refused\ntest\n:4\n" {
		t.Errorf("completing --context: exit %d, %q", code, out)
	}
}
