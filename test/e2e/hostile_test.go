//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"clusterip-policy/test/fixtures"
)

// A Service whose clusterIPs repeat one dynamic-band address 50,000 times
// (a 0.7 MB body; the apiserver accepts up to 3 MiB) reaches the mutating
// webhook before the apiserver's own validation. Through the real
// apiserver it gets one short denial naming the limit, the webhook writes
// one short audit line for it, and its memory stays flat over 20 of them.
func TestFiftyThousandClusterIPsGetOneShortDenial(t *testing.T) {
	c := shared(t)
	cs := c.Client(0)
	ctx := testContext(t, 2*time.Minute)
	ns := namespace(t, c, "hostile")
	w := c.Webhooks[0]

	ips := make([]string, 50000)
	for i := range ips {
		ips[i] = "10.96.200.5"
	}
	svc := fixtures.Service(ns, "flood", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = ips[0], ips })
	before := vmRSS(t, w.Pid())
	for i := range 20 {
		_, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
		if err == nil {
			t.Fatalf("create %d was allowed", i)
		}
		want := `admission webhook "` + mutating + `" denied the request: spec.clusterIPs: Too many: 50000: must have at most 2 items (one per IP family)`
		if !apierrors.IsInvalid(err) || !strings.HasPrefix(err.Error(), want) || len(err.Error()) > 1024 {
			t.Fatalf("create %d: %d-byte error %.400q (reason %q), want an Invalid one starting %q", i, len(err.Error()), err.Error(), apierrors.ReasonForError(err), want)
		}
	}
	after := vmRSS(t, w.Pid())
	t.Logf("webhook VmRSS %d KiB before, %d KiB after 20 requests of 50,000 clusterIPs", before, after)
	if after-before > 32<<10 {
		t.Errorf("webhook VmRSS grew by %d KiB over 20 hostile requests, want under 32 MiB", after-before)
	}

	f, err := os.Open(w.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	lines := 0
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `"admission decision"`) || !strings.Contains(line, `"namespace":"`+ns+`"`) {
			continue
		}
		lines++
		if len(line) > 4096 || !strings.Contains(line, `"requestedIPs":["10.96.200.5","10.96.200.5","... (49998 more)"]`) {
			t.Fatalf("audit line of %d bytes: %.600s", len(line), line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if lines != 20 {
		t.Fatalf("%d audit lines for the namespace, want 20", lines)
	}
}

// vmRSS reads a process's resident memory in KiB.
func vmRSS(t *testing.T, pid int) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}
