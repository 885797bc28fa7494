package admission

import (
	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// requestLogConstructor is controller-runtime's DefaultLogConstructor (the
// same keys: object, namespace, name, resource, user, requestID) with the
// values attached only when a line is written. controller-runtime builds
// this logger twice for every review, and zap encodes the values of
// WithValues at once (about a tenth of the webhook's CPU under load);
// yet it writes with it only at V(5) and on a panic, so at the default
// level the values were encoded for nothing.
func requestLogConstructor(base logr.Logger, req *admission.Request) logr.Logger {
	if req == nil {
		return base
	}
	return base.WithSink(&deferredValuesSink{sink: base.GetSink(), req: req})
}

// deferredValuesSink holds a request's log values until a line is written.
type deferredValuesSink struct {
	sink  logr.LogSink
	req   *admission.Request
	extra []any // from WithValues on this logger
}

var _ logr.LogSink = &deferredValuesSink{}

func (d *deferredValuesSink) values() []any {
	r := d.req
	return append([]any{"object", klog.KRef(r.Namespace, r.Name),
		"namespace", r.Namespace, "name", r.Name,
		"resource", r.Resource, "user", r.UserInfo.Username,
		"requestID", r.UID,
	}, d.extra...)
}

// Init does nothing: the wrapped sink was initialised with its logger, and
// initialising it again would change it for every logger that shares it.
func (d *deferredValuesSink) Init(logr.RuntimeInfo) {}

func (d *deferredValuesSink) Enabled(level int) bool { return d.sink.Enabled(level) }

func (d *deferredValuesSink) Info(level int, msg string, keysAndValues ...any) {
	d.sink.WithValues(d.values()...).Info(level, msg, keysAndValues...)
}

func (d *deferredValuesSink) Error(err error, msg string, keysAndValues ...any) {
	d.sink.WithValues(d.values()...).Error(err, msg, keysAndValues...)
}

func (d *deferredValuesSink) WithValues(keysAndValues ...any) logr.LogSink {
	extra := append(append([]any(nil), d.extra...), keysAndValues...)
	return &deferredValuesSink{sink: d.sink, req: d.req, extra: extra}
}

func (d *deferredValuesSink) WithName(name string) logr.LogSink {
	return &deferredValuesSink{sink: d.sink.WithName(name), req: d.req, extra: d.extra}
}
