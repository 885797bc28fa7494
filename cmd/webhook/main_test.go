package main

import (
	"bytes"
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
