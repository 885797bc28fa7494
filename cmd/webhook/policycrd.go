package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"clusterip-policy/pkg/policy"
)

// The --policy-source values.
const (
	policySourceFile = "file"
	policySourceCRD  = "crd"
)

var policyGVR = schema.GroupVersionResource{Group: policy.ObjectGroup, Version: policy.ObjectVersion, Resource: policy.ObjectResource}

// crdPolicy feeds the policy store from the ClusterIPPolicy object named
// default and writes what became of each generation into its status. It
// watches only that name (the CRD's schema refuses any other).
type crdPolicy struct {
	client dynamic.Interface
	store  *policyStore
	log    logr.Logger
	// inForce is the object generation of the policy in force; 0: none
	// (no object yet, or every one so far refused). Used only from the
	// informer's handler goroutine.
	inForce int64
	// seen is the UID and generation last loaded: a status write (ours or
	// another replica's) changes neither, and is not loaded, counted and
	// logged again.
	seen string
}

// run watches the object until ctx ends. The informer relists and rewatches
// on its own, with backoff, so the loop is bounded by the apiserver's pace.
func (c *crdPolicy) run(ctx context.Context) error {
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(c.client, 0, "", func(o *metav1.ListOptions) {
		o.FieldSelector = "metadata.name=" + policy.ObjectName
	})
	inf := f.ForResource(policyGVR).Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.observe(ctx, obj) },
		UpdateFunc: func(_, obj any) { c.observe(ctx, obj) },
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

// observe loads the object's spec through the file loader (the same
// messages), publishes it when it loads, and writes the status.
func (c *crdPolicy) observe(ctx context.Context, obj any) {
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
	c.writeStatus(ctx, u, p, err)
}

// writeStatus updates the status unless it already says the same, so the
// update event it causes does not write again. A conflict means a newer
// object is on its way to observe; it writes then. Every replica writes:
// what it writes depends on the object alone, so they agree and do not undo
// each other's writes. A replica that never loaded a good generation (it
// started while the object was refused) keeps the generation in force that
// the status already names, the one the other replicas enforce.
func (c *crdPolicy) writeStatus(ctx context.Context, u *unstructured.Unstructured, p *policy.Policy, loadErr error) {
	var old struct {
		ObservedGeneration int64              `json:"observedGeneration"`
		GenerationInForce  int64              `json:"generationInForce"`
		PolicyDigest       string             `json:"policyDigest"`
		Conditions         []metav1.Condition `json:"conditions"`
	}
	if s, found, _ := unstructured.NestedMap(u.Object, "status"); found {
		if b, err := json.Marshal(s); err == nil {
			_ = json.Unmarshal(b, &old) // a malformed status is rewritten whole
		}
	}
	gen, inForce, digest := u.GetGeneration(), c.inForce, old.PolicyDigest
	if inForce == 0 {
		inForce = old.GenerationInForce
	}
	cond := metav1.Condition{Type: "Ready", ObservedGeneration: gen}
	switch {
	case loadErr == nil:
		digest = p.Digest
		cond.Status, cond.Reason = metav1.ConditionTrue, "Loaded"
		cond.Message = fmt.Sprintf("generation %d is in force (policy digest %s)", gen, p.Digest)
	case inForce > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, "Refused"
		cond.Message = fmt.Sprintf("generation %d refused: %s; generation %d stays in force", gen, policy.Clip(loadErr.Error(), policy.MaxMessageBytes), inForce)
	default:
		cond.Status, cond.Reason = metav1.ConditionFalse, "Refused"
		cond.Message = fmt.Sprintf("generation %d refused: %s; no generation of this object has loaded, so the webhook is not ready", gen, policy.Clip(loadErr.Error(), policy.MaxMessageBytes))
	}
	prev := meta.FindStatusCondition(old.Conditions, "Ready")
	if old.ObservedGeneration == gen && old.GenerationInForce == inForce && old.PolicyDigest == digest &&
		prev != nil && prev.Status == cond.Status && prev.Reason == cond.Reason && prev.Message == cond.Message && prev.ObservedGeneration == cond.ObservedGeneration {
		return
	}
	conds := old.Conditions
	meta.SetStatusCondition(&conds, cond) // keeps lastTransitionTime while the status stays
	status := map[string]any{
		"observedGeneration": gen,
		"generationInForce":  inForce,
		"policyDigest":       digest,
		"conditions":         conds,
	}
	b, err := json.Marshal(status)
	if err != nil {
		c.log.Error(err, "cannot render the ClusterIPPolicy status")
		return
	}
	var st map[string]any
	_ = json.Unmarshal(b, &st)
	next := u.DeepCopy()
	next.Object["status"] = st
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.client.Resource(policyGVR).UpdateStatus(wctx, next, metav1.UpdateOptions{FieldManager: "clusterip-policy-webhook"}); err != nil {
		if apierrors.IsConflict(err) {
			c.log.V(1).Info("the ClusterIPPolicy changed while its status was written; the newer one will be written", "generation", u.GetGeneration())
			return
		}
		c.log.Error(err, "cannot write the ClusterIPPolicy status; the policy itself is in force regardless", "generation", u.GetGeneration())
	}
}
