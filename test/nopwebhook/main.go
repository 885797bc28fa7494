// Command nopwebhook is the yardstick for the webhook's cost: an admission
// webhook that allows every request unchanged, served by the same
// controller-runtime webhook server with the same TLS settings as
// cmd/webhook (TLS 1.2+, HTTP/1.1 only) and the same paths, so that a
// benchmark registering it exactly like ours measures what any Go webhook
// call costs, and the difference to ours is what our policy work costs.
//
// It is a benchmark fixture, never deployed.
//
//	go run ./test/nopwebhook --cert-dir DIR --port 9443
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"clusterip-policy/manifests"
)

func main() {
	host := flag.String("bind-address", "127.0.0.1", "address to listen on")
	port := flag.Int("port", 9443, "HTTPS port")
	certDir := flag.String("cert-dir", "", "directory holding tls.crt and tls.key")
	flag.Parse()
	if *certDir == "" {
		fmt.Fprintln(os.Stderr, "nopwebhook: --cert-dir is required (a directory with tls.crt and tls.key)")
		os.Exit(2)
	}
	tlsOpts := func(cfg *tls.Config) {
		cfg.MinVersion = tls.VersionTLS12
		cfg.NextProtos = []string{"http/1.1"}
	}
	server := webhook.NewServer(webhook.Options{Host: *host, Port: *port, CertDir: *certDir, TLSOpts: []func(*tls.Config){tlsOpts}})
	allow := &webhook.Admission{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		return admission.Allowed("")
	})}
	for _, path := range []string{manifests.MutatePath, manifests.ValidatePath, manifests.ValidateServiceCIDRPath} {
		server.Register(path, allow)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := server.Start(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "nopwebhook:", err)
		os.Exit(1)
	}
}
