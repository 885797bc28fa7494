package admission

import (
	"bytes"
	"clusterip-policy/internal/admission/admissiontest"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// Fixed bounds the fuzz target holds every answer to, whatever the input.
const (
	// fuzzMaxResponse bounds a response apart from the request UID that
	// controller-runtime copies into it (and that the endpoint's own
	// maxResponseBytes cap bounds in turn).
	fuzzMaxResponse = 8 << 10
	// fuzzMaxAuditLine bounds one decision log line: every field is clipped
	// (policy.MaxEchoBytes, policy.MaxListed, policy.MaxMessageBytes), and
	// JSON escaping may grow a clipped value up to six times.
	fuzzMaxAuditLine = 64 << 10
)

// FuzzAdmissionEndpoint sends arbitrary bytes as an AdmissionReview
// through the endpoint serve registers, at either stage, and checks:
//   - the answer is an AdmissionReview of bounded size, and at most one
//     decision log line of bounded size is written;
//   - an allowed Service, with the returned JSON patch applied the way the
//     apiserver applies it, holds no new address outside 10.96.0.0/16's
//     usable addresses, and none reserved for another Service (10.96.0.10
//     for kube-system/kube-dns, 10.96.0.1 for default/kubernetes); at the
//     mutating stage none in the dynamic band either.
//
// Seeds: the recorded reviews and the hostile cases of the handler tests.
// `go test -run '^$' -fuzz FuzzAdmissionEndpoint -fuzztime 60s ./internal/admission`
func FuzzAdmissionEndpoint(f *testing.F) {
	recorded, err := filepath.Glob(filepath.Join("testdata", "admissionreviews", "*.json"))
	if err != nil || len(recorded) == 0 {
		f.Fatalf("no recorded reviews: %v", err)
	}
	for _, path := range recorded {
		raw, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw, strings.Contains(path, "mutate-"))
	}
	static := "mutate-003-create-wh-static.json"
	for _, seed := range [][]byte{
		loadReview(f, static, withSpec("clusterIPs", repeated("10.96.200.5", 500))),
		loadReview(f, static, withSpec("clusterIP", "10.96.200.5"), withSpec("clusterIPs", []string{"10.96.0.20"})),
		loadReview(f, static, withSpec("clusterIP", "None"), withSpec("clusterIPs", []string{"None", "10.96.200.5"})),
		loadReview(f, static, withSpec("clusterIPs", []string{"10.96.0.20", "10.96.0.21"})),
		loadReview(f, static, withSpec("clusterIPs", []string{"10.96.0.20"}), withSpec("ipFamilies", []string{"IPv6"})),
		loadReview(f, static, withSpec("clusterIP", "10.96.0.10")),
		loadReview(f, "mutate-001-create-wh-auto.json", named("kube-system", "kube-dns"), withSpec("ipFamilies", []string{"IPv4", "IPv4"})),
		loadReview(f, "mutate-001-create-wh-auto.json", named("kube-system", "kube-dns")),
		setRequest(f, loadReview(f, static), func(req map[string]any) { req["operation"] = "PATCH" }),
		setRequest(f, loadReview(f, static), func(req map[string]any) { req["operation"] = "UPDATE"; req["oldObject"] = req["object"] }),
		[]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`),
		[]byte("{not json"),
	} {
		f.Add(seed, true)
		f.Add(seed, false)
	}

	r := newTestReviewer(f, testPolicy, true)
	f.Fuzz(func(t *testing.T, body []byte, mutate bool) {
		checkEndpoint(t, r, body, mutate)
	})
}

// FuzzAdmissionFields builds well-formed reviews from fuzzed fields, so
// that the fuzzer explores the decisions rather than JSON syntax: the
// operation, the Service's name, type, clusterIP, clusterIPs, ipFamilies
// and ipFamilyPolicy, and the stored object's type and clusterIPs (lists
// are comma-separated). Same checks as FuzzAdmissionEndpoint.
// `go test -run '^$' -fuzz FuzzAdmissionFields -fuzztime 60s ./internal/admission`
func FuzzAdmissionFields(f *testing.F) {
	f.Add(uint8(0), "web", uint8(0), "10.96.0.20", "", "", "", uint8(0), "", false, true)
	f.Add(uint8(0), "kube-dns", uint8(0), "", "", "IPv4,IPv6", "RequireDualStack", uint8(0), "", false, true)
	f.Add(uint8(0), "kube-dns", uint8(0), "", "", "", "", uint8(0), "", true, false)
	f.Add(uint8(0), "web", uint8(0), "10.96.200.5", "10.96.200.5,10.96.200.5,10.96.200.5", "", "", uint8(0), "", false, true)
	f.Add(uint8(0), "web", uint8(0), "None", "None,10.96.0.10", "", "", uint8(0), "", false, true)
	f.Add(uint8(1), "web", uint8(0), "", "10.96.0.20", "", "", uint8(0), "10.96.0.20", false, true)
	f.Add(uint8(1), "kube-dns", uint8(0), "", "", "", "", uint8(3), "", false, true)
	f.Add(uint8(1), "web", uint8(0), "10.96.0.0", "10.96.0.0", "IPv4", "SingleStack", uint8(0), "", true, false)
	f.Add(uint8(2), "web", uint8(3), "10.200.0.1", "", "", "", uint8(0), "", false, false)
	r := newTestReviewer(f, testPolicy, true)
	ops := []string{"CREATE", "UPDATE", "DELETE", "CONNECT", "PATCH", ""}
	types := []string{"ClusterIP", "NodePort", "LoadBalancer", "ExternalName", ""}
	list := func(s string) []string {
		if s == "" {
			return nil
		}
		return strings.Split(s, ",")
	}
	f.Fuzz(func(t *testing.T, op uint8, name string, typ uint8, clusterIP, clusterIPs, families, familyPolicy string, oldType uint8, oldIPs string, dryRun, mutate bool) {
		spec := map[string]any{"type": types[int(typ)%len(types)], "clusterIP": clusterIP, "clusterIPs": list(clusterIPs), "ipFamilies": list(families)}
		if familyPolicy != "" {
			spec["ipFamilyPolicy"] = familyPolicy
		}
		namespace := "default"
		if name == "kube-dns" {
			namespace = "kube-system"
		}
		req := map[string]any{
			"uid": "fuzz", "kind": map[string]any{"group": "", "version": "v1", "kind": "Service"},
			"resource": map[string]any{"group": "", "version": "v1", "resource": "services"},
			"name":     name, "namespace": namespace, "operation": ops[int(op)%len(ops)], "dryRun": dryRun,
			"userInfo": map[string]any{"username": "fuzz"},
			"object":   map[string]any{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": name, "namespace": namespace}, "spec": spec},
		}
		if req["operation"] == "UPDATE" {
			oldIPList := list(oldIPs)
			oldClusterIP := ""
			if len(oldIPList) > 0 {
				oldClusterIP = oldIPList[0]
			}
			req["oldObject"] = map[string]any{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": name, "namespace": namespace},
				"spec": map[string]any{"type": types[int(oldType)%len(types)], "clusterIP": oldClusterIP, "clusterIPs": oldIPList}}
		}
		body, err := json.Marshal(map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
		if err != nil {
			t.Skip("not encodable:", err)
		}
		checkEndpoint(t, r, body, mutate)
	})
}

// checkEndpoint sends body to the stage's endpoint and checks the bounds
// and, for an allowed Service, the addresses it ends with.
func checkEndpoint(t *testing.T, r testReviewer, body []byte, mutate bool) {
	t.Helper()
	r.decisionLogBuf.Reset()
	h := r.recorded(validatingHandler{r.reviewer})
	if mutate {
		h = r.recorded(mutatingHandler{r.reviewer})
	}
	// Through the registered endpoint: the hard cap holds.
	raw := admissiontest.Serve(t, admissionEndpoint(h), body)
	if len(raw) > maxResponseBytes {
		t.Fatalf("endpoint response is %d bytes, over the %d cap", len(raw), maxResponseBytes)
	}
	// Through controller-runtime alone: the handler's own answer is
	// bounded, apart from the UID controller-runtime copies into it.
	r.decisionLogBuf.Reset()
	raw = admissiontest.Serve(t, &webhook.Admission{Handler: h}, body)
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(raw, &review); err != nil || review.Response == nil {
		t.Fatalf("not an AdmissionReview (%v): %.300s", err, raw)
	}
	resp := review.Response
	if n := len(raw) - len(resp.UID); n > fuzzMaxResponse {
		t.Fatalf("response is %d bytes besides its uid: %.300s", n, raw)
	}
	if audit := r.decisionLogBuf.Bytes(); bytes.Count(audit, []byte("\n")) > 1 || len(audit) > fuzzMaxAuditLine {
		t.Fatalf("audit output is %d bytes in %d lines: %.300s", len(audit), bytes.Count(audit, []byte("\n")), audit)
	}
	if resp.Allowed {
		checkAllowedService(t, body, resp, mutate)
	}
}

// checkAllowedService applies the response's patch to the request's object
// and checks the IPs it ends with against the test policy.
func checkAllowedService(t *testing.T, body []byte, resp *admissionv1.AdmissionResponse, mutate bool) {
	t.Helper()
	var review admissionv1.AdmissionReview
	if json.Unmarshal(body, &review) != nil || review.Request == nil {
		return // the endpoint decoded it differently; what it allowed carries no object we can read
	}
	req := review.Request
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		if len(resp.Patch) > 0 {
			t.Fatalf("%s patched: %s", req.Operation, resp.Patch)
		}
		return
	}
	obj := req.Object.Raw
	if len(resp.Patch) > 0 {
		patch, err := jsonpatch.DecodePatch(resp.Patch)
		if err != nil {
			t.Fatalf("patch %s does not decode: %v", resp.Patch, err)
		}
		if obj, err = patch.Apply(obj); err != nil {
			t.Fatalf("patch %s does not apply: %v", resp.Patch, err)
		}
	}
	var svc, old corev1.Service
	if json.Unmarshal(obj, &svc) != nil {
		return // not a Service object: the handler refused to decode it or never read it
	}
	if req.Operation == admissionv1.Update && len(req.OldObject.Raw) > 0 {
		_ = json.Unmarshal(req.OldObject.Raw, &old)
	}
	if !apiserverWouldStore(&svc) {
		if len(resp.Patch) > 0 {
			t.Fatalf("patched into a Service the apiserver refuses: %s -> clusterIP %q clusterIPs %q ipFamilies %q", resp.Patch, svc.Spec.ClusterIP, svc.Spec.ClusterIPs, svc.Spec.IPFamilies)
		}
		return
	}
	ns, name := svc.Namespace, svc.Name
	if ns == "" {
		ns = req.Namespace
	}
	if name == "" {
		name = req.Name
	}
	reservedFor := map[string]string{"10.96.0.10": "kube-system/kube-dns", "10.96.0.1": "default/kubernetes"}
	usable := netip.MustParsePrefix("10.96.0.0/16")
	dynamicFrom := netip.MustParseAddr("10.96.1.1")
	dryRun := req.DryRun != nil && *req.DryRun
	for _, raw := range serviceIPs(&svc) {
		if old.Spec.Type != corev1.ServiceTypeExternalName && slices.Contains(serviceIPs(&old), raw) {
			continue // held before this request
		}
		ip, err := netip.ParseAddr(raw)
		switch {
		case err != nil || ip.Zone() != "" || ip.Is4In6():
			t.Fatalf("allowed %s/%s with %q, not a plain IP", ns, name, raw)
		case !mutate && dryRun && ip == usable.Addr():
			// the placeholder a dry-run create shows the validating stage
		case !usable.Contains(ip) || ip == usable.Addr() || ip == netip.MustParseAddr("10.96.255.255"):
			t.Fatalf("allowed %s/%s with %s, outside the usable addresses of %s", ns, name, ip, usable)
		case reservedFor[ip.String()] != "" && reservedFor[ip.String()] != ns+"/"+name:
			t.Fatalf("allowed %s/%s with %s, reserved for %s", ns, name, ip, reservedFor[ip.String()])
		case mutate && ip.Compare(dynamicFrom) >= 0 && reservedFor[ip.String()] == "":
			t.Fatalf("allowed %s/%s to ask for %s, in the dynamic band", ns, name, ip)
		}
	}
}

// serviceIPs are the addresses a Service holds: clusterIPs, else clusterIP.
func serviceIPs(svc *corev1.Service) []string {
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	var out []string
	for _, ip := range ips {
		if ip != corev1.ClusterIPNone {
			out = append(out, ip)
		}
	}
	return out
}

// apiserverWouldStore is the part of the apiserver's validation the
// invariant depends on: an object it refuses never holds an address, so
// what the webhook allowed there does not matter (as long as the webhook
// did not patch it into that state).
func apiserverWouldStore(svc *corev1.Service) bool {
	s := svc.Spec
	switch {
	case s.Type == corev1.ServiceTypeExternalName:
		return s.ClusterIP == "" && len(s.ClusterIPs) == 0
	case len(s.ClusterIPs) > 2 || len(s.IPFamilies) > 2:
		return false
	case s.ClusterIP != "" && len(s.ClusterIPs) > 0 && s.ClusterIPs[0] != s.ClusterIP:
		return false
	case slices.Contains(s.ClusterIPs, corev1.ClusterIPNone) && len(s.ClusterIPs) > 1:
		return false
	case s.ClusterIP == corev1.ClusterIPNone || slices.Contains(s.ClusterIPs, corev1.ClusterIPNone):
		return false // headless: holds no address
	}
	return true
}
