// Package bench is the side-by-side end-to-end benchmark of Service
// creates on a real etcd + kube-apiserver on loopback (test/e2e/framework),
// under admission configurations that take turns in every round, so
// that noise on the machine hits all of them alike (BENCH_CONFIGS picks
// them; the first four are the default):
//
//   - none: no webhook configurations and no admission policy;
//   - nop:  test/nopwebhook (allows everything, same server and TLS as ours)
//     registered with the webhook configurations of
//     manifests/base/webhook-configurations.yaml, only clientConfig changed;
//   - ours: bin/clusterip-policy with a policy, its view synced, registered the same
//     way (extra `clusterip-policy serve` flags from Options.WebhookArgs);
//   - vap:  a ValidatingAdmissionPolicy with a CEL check comparable to a
//     minimal policy (vap.go says what it checks);
//   - backstop: the backstop the leader writes for the same policy
//     (pkg/backstop, backstop.go), no webhook registered;
//   - ours-other-mutator: ours beside another mutating webhook for Service
//     creates, registered after ours;
//   - floor-static, floor-single: the nop's Service webhooks, never
//     called, with the static conditions plus one that is false, or the
//     false one alone: the least two skipped webhooks cost the apiserver.
//
// BENCH_PROFILE names configurations during whose runs the apiserver's CPU
// profile is taken (profile.go), to see where its admission time goes.
//
// Every switch goes through a verified "none" (no webhook called, the vap
// not in force) and then waits until the apiserver applies the new
// configuration, so a measurement never sees a half-switched state.
//
// Workloads: dynamic creates (no clusterIP) at 1 and 8 clients, and a mixed
// one (10% static requests in the static band, a few reservation owners),
// at each number of existing Services. Each run reports creates/s, client
// latency p50/p90/p99, the kube-apiserver's CPU per create and the
// webhook's CPU per call (from /proc/PID/stat), the apiserver's own
// apiserver_admission_webhook_admission_duration_seconds per webhook and
// the number of webhook calls (apiserver_admission_webhook_request_total).
//
// `make bench-e2e` runs it (test/bench/bench_test.go, TestBenchE2E); the
// smoke variant TestBenchSmoke runs in `make test`.
package bench
