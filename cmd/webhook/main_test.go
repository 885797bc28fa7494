package main

import (
	"bytes"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"clusterip-policy/internal/cli"
	"clusterip-policy/internal/exitcode"
)

// runCLI runs the command line args as main does, through the one command
// tree.
func runCLI(stdin string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(cli.Name, args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, _ := runCLI("", args...)
		if code != exitcode.OK || !strings.HasPrefix(out, "clusterip-policy webhook dev (commit unknown") {
			t.Fatalf("%v: exit %d %q", args, code, out)
		}
	}
}

// --help alone lists the commands, not the flags of serve.
func TestHelpAloneListsTheCommands(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, out, errOut := runCLI("", args...)
		if code != exitcode.OK {
			t.Fatalf("%v: exit %d, stderr %s", args, code, errOut)
		}
		for _, c := range []string{"serve", "review", "audit", "bands", "version"} {
			if !strings.Contains(out, "clusterip-policy "+c) && !strings.Contains(out, "clusterip-policy ["+c+"]") {
				t.Fatalf("%v printed no line for %s:\n%s", args, c, out)
			}
		}
	}
}

// The command tree is the one list of commands: docs/architecture.md names
// them, so a command added to the tree alone fails here (and docs/cli.md,
// made from the tree, fails docs.TestCLIPageMatchesHelp until regenerated).
func TestTheCommandTreeIsTheDocumentedOne(t *testing.T) {
	var tree []string
	for _, name := range cli.Commands(newRoot(cli.Name, strings.NewReader(""), io.Discard, io.Discard)) {
		// cobra's own: completion (and its shells) and help.
		if !strings.HasPrefix(name, "completion") && name != "help" {
			tree = append(tree, name)
		}
	}
	doc, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)is one binary with \w+ commands \(([^)]*)\)`).FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/architecture.md no longer says \"is one binary with N commands (`serve`, ...)\"; keep a list of the commands there for this test")
	}
	var documented []string
	for _, n := range regexp.MustCompile("`([a-z-]+)`").FindAllSubmatch(m[1], -1) {
		documented = append(documented, string(n[1]))
	}
	if strings.Join(tree, ",") != strings.Join(documented, ",") {
		t.Errorf("the command tree (internal/cli.NewRoot, main's serve) has %v; docs/architecture.md lists %v: add the command to both, in the same order", tree, documented)
	}
	// The README's "The command line" names each command.
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(readme), "## The command line\n")
	section, _, _ = strings.Cut(section, "\n## ")
	for _, name := range tree {
		if !strings.Contains(section, "`"+name+"`") {
			t.Errorf("README.md's \"The command line\" does not name the command %s (as `%s`): name every command of the tree there", name, name)
		}
	}
}

// serve is main's: the command flags alone go to, with its flags
// (--log-level among them) checked before anything starts; without any
// argument the binary prints its help.
func TestServeIsTheDefaultCommand(t *testing.T) {
	for _, args := range [][]string{{"serve", "--log-level", "verbose"}, {"--log-level", "verbose"}} {
		code, out, stderr := runCLI("", args...)
		want := "serve: invalid argument \"verbose\" for \"--log-level\" flag: \"verbose\" is not a log level; use debug, info or error\nRun 'clusterip-policy serve --help' for its flags.\n"
		if code != exitcode.BadData || out != "" || stderr != want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", args, code, out, stderr, want)
		}
	}
	// The bare binary prints the help (as the kubectl plugin does), not
	// serve's refusal of its missing --policy.
	code, out, stderr := runCLI("")
	if code != exitcode.OK || strings.Contains(stderr, "--policy is required") || !strings.Contains(out+stderr, "serve") || !strings.Contains(out+stderr, "review") {
		t.Errorf("no arguments: exit %d, stdout %q, stderr %q; want the help listing the commands", code, out, stderr)
	}
	code, _, stderr = runCLI("", "serve", "--help")
	if code != exitcode.OK || !strings.HasPrefix(stderr, "Usage: clusterip-policy serve [flags]\n") || !strings.Contains(stderr, "      --leader-election-identity string ") {
		t.Errorf("serve --help: exit %d, stderr %q", code, stderr)
	}
}
