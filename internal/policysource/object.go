package policysource

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"clusterip-policy/pkg/apis/clusterippolicy/v1alpha1"
	"clusterip-policy/pkg/policy"
)

// GVR is the ClusterIPPolicy resource.
var GVR = schema.GroupVersionResource{Group: v1alpha1.Group, Version: v1alpha1.Version, Resource: v1alpha1.Resource}

// Observer is told what became of each generation of the object: u as last
// seen, the loader's answer for its generation, and the generation and
// digest of the policy in force here (inForce 0: none loaded). The
// ClusterIPPolicy status writer (internal/controllers/policystatus) is one;
// the leader writes the status.
type Observer interface {
	Observed(u *unstructured.Unstructured, loadErr error, inForce int64, digest string)
}

// ObjectSource feeds the policy store from the ClusterIPPolicy object named
// default and tells its Observer what became of each generation. It
// watches only that name (the CRD's schema refuses any other).
type ObjectSource struct {
	client   dynamic.Interface
	store    *Store
	observer Observer
	log      logr.Logger
	// inForce is the object generation of the policy in force; 0: none
	// (no object yet, or every one so far refused). Used only from the
	// informer's handler goroutine.
	inForce int64
	// seen is the UID and generation last loaded: a status write (ours or
	// another replica's) changes neither, and is not loaded, counted and
	// logged again.
	seen string
}

// NewObjectSource watches the object through client, publishes into store
// and reports to observer.
func NewObjectSource(client dynamic.Interface, store *Store, observer Observer, log logr.Logger) *ObjectSource {
	return &ObjectSource{client: client, store: store, observer: observer, log: log}
}

// Run watches the object until ctx ends. The informer relists and rewatches
// on its own, with backoff, so the loop is bounded by the apiserver's pace.
// A dynamic informer of its own, not one of the replica's typed factory
// (internal/sharedinformers): its client is the dynamic one, a typed
// factory tells its informers apart by Go type (every unstructured object
// is one), and nothing else reads the object: one watch either way.
func (c *ObjectSource) Run(ctx context.Context) error {
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(c.client, 0, "", func(o *metav1.ListOptions) {
		o.FieldSelector = "metadata.name=" + policy.ObjectName
	})
	inf := f.ForResource(GVR).Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.Observe(obj) },
		UpdateFunc: func(_, obj any) { c.Observe(obj) },
		DeleteFunc: func(any) {
			c.log.Error(errors.New("deleted"), "the ClusterIPPolicy "+policy.ObjectName+" was deleted; the last good policy stays in force until it is created again", "generationInForce", c.inForce)
		},
	}); err != nil {
		return err
	}
	f.Start(ctx.Done())
	<-ctx.Done()
	f.Shutdown()
	return nil
}

// Observe loads the object's spec through policy.ParseObjectSpec (the same
// messages), publishes it when it loads, and hands the outcome to the
// observer. Run's informer calls it for each added or updated object; the
// status writer's tests call it to give a replica a generation in force.
// Not safe for concurrent use.
func (c *ObjectSource) Observe(obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || u.GetName() != policy.ObjectName {
		return
	}
	var spec []byte
	if s, found, _ := unstructured.NestedFieldNoCopy(u.Object, "spec"); found {
		var err error
		if spec, err = json.Marshal(s); err != nil {
			spec = nil
		}
	}
	p, err := policy.ParseObjectSpec(spec)
	if seen := fmt.Sprintf("%s/%d", u.GetUID(), u.GetGeneration()); seen != c.seen {
		c.seen = seen
		if err != nil && c.store.Current() == nil {
			c.log.Error(err, "refused the ClusterIPPolicy; no policy is in force, so the webhook stays not ready until it is fixed", "generation", u.GetGeneration())
		}
		c.store.publish(p, err)
		if err == nil {
			c.inForce = u.GetGeneration()
		}
	}
	digest := ""
	if cur := c.store.Current(); cur != nil {
		digest = cur.Policy.Digest
	}
	c.observer.Observed(u, err, c.inForce, digest)
}
