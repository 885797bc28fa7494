package judged

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"clusterip-policy/internal/sharedinformers"
	"clusterip-policy/test/fixtures"
)

func TestLabelsFollowTheNamespaces(t *testing.T) {
	client := fake.NewClientset(namespaceObj("payments", map[string]string{"team": "payments"}))
	replica := sharedinformers.New(client, sharedinformers.Configurations{})
	l, err := NewLabels(replica)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Of("payments"); ok {
		t.Fatal("labels known before the namespaces were listed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	go func() { _ = replica.Run(ctx) }()
	fixtures.Eventually(t, "the labels of payments listed", 30*time.Second, func() bool { got, ok := l.Of("payments"); return ok && got["team"] == "payments" })
	if _, ok := l.Of("nowhere"); ok {
		t.Fatal("a namespace that does not exist has no labels")
	}
	ns, err := client.CoreV1().Namespaces().Get(ctx, "payments", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels = map[string]string{"team": "web"}
	if _, err := client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	fixtures.Eventually(t, "the changed label watched", 30*time.Second, func() bool { got, _ := l.Of("payments"); return got["team"] == "web" })
	cancel()
	<-done
	if _, ok := l.Of("payments"); ok {
		t.Fatal("labels still answered after Run ended")
	}
}
