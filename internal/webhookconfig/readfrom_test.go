package webhookconfig

import (
	"context"
	"errors"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"clusterip-policy/internal/names"
)

// With ReadFrom, an Update whose edit changes nothing in the watched copy
// makes no request; one that would change it, or a watched read that
// fails, reads and writes through the API as before; the watched object
// (a lister's, shared) is never changed.
func TestReadFromSkipsTheRequestsWhileTheWatchShowsNothingToDo(t *testing.T) {
	ctx := context.Background()
	stored := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "clusterip-policy", Annotations: map[string]string{"k": "old"}},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: names.ValidatingServiceWebhook}},
	}
	client := fake.NewClientset(stored.DeepCopy())
	setK := func(v string) Edit {
		return func(meta *metav1.ObjectMeta, _ []Entry) (bool, error) {
			if meta.Annotations["k"] == v {
				return false, nil
			}
			meta.Annotations["k"] = v
			return true, nil
		}
	}
	cfg := Validating(client, Names{Mutating: "clusterip-policy", Validating: "clusterip-policy"})
	seen := stored.DeepCopy()
	watched := cfg.ReadFrom(func() (*admissionregistrationv1.ValidatingWebhookConfiguration, error) { return seen, nil })

	requests := func() int { n := len(client.Actions()); client.ClearActions(); return n }
	if wrote, err := Update(ctx, watched, setK("old")); err != nil || wrote {
		t.Fatalf("an edit with nothing to do: wrote %v, %v", wrote, err)
	}
	if n := requests(); n != 0 {
		t.Errorf("an edit with nothing to do in the watched copy made %d requests, want 0", n)
	}
	if wrote, err := Update(ctx, watched, setK("new")); err != nil || !wrote {
		t.Fatalf("an edit that changes the object: wrote %v, %v", wrote, err)
	}
	if n := requests(); n != 2 {
		t.Errorf("an edit that changes the object made %d requests, want a GET and an update", n)
	}
	if seen.Annotations["k"] != "old" {
		t.Errorf("the watched copy was changed: %v", seen.Annotations)
	}
	// The watch is behind (it still shows "old"): the fresh read decides.
	if wrote, err := Update(ctx, watched, setK("new")); err != nil || wrote {
		t.Fatalf("a stale watch, the stored object as wanted: wrote %v, %v", wrote, err)
	}
	if n := requests(); n != 1 {
		t.Errorf("a stale watch made %d requests, want the one GET", n)
	}
	failing := cfg.ReadFrom(func() (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
		return nil, errors.New("not listed yet")
	})
	if wrote, err := Update(ctx, failing, setK("newer")); err != nil || !wrote {
		t.Fatalf("a watch not listed yet: wrote %v, %v", wrote, err)
	}
	if n := requests(); n != 2 {
		t.Errorf("a watch not listed yet made %d requests, want a GET and an update", n)
	}
}
