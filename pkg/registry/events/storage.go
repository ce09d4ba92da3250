package events

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/klog/v2"
)

// Options bound the Events kept.
type Options struct {
	// TTL is how long an Event is kept after its last change (an etcd lease, which etcd may
	// keep up to a minute longer).
	TTL time.Duration
	// MaxCount bounds the Events kept: a create that finds as many removes the oldest tenth.
	MaxCount int
}

// REST is the storage of core v1 Events.
type REST struct {
	*genericregistry.Store
	maxCount int
	// trimming serialises this replica's removals of the oldest Events.
	trimming sync.Mutex
}

var (
	_ rest.StandardStorage    = &REST{}
	_ rest.ShortNamesProvider = &REST{}
)

// NewREST returns the storage of Events over the getter's etcd.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, opts Options) (*REST, error) {
	if opts.TTL < time.Second || opts.MaxCount < 1 {
		return nil, fmt.Errorf("events need a TTL of at least 1s and a count of at least 1, not %s and %d", opts.TTL, opts.MaxCount)
	}
	s := strategy{ObjectTyper: scheme, NameGenerator: names.SimpleNameGenerator}
	ttl := uint64(opts.TTL.Seconds())
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &corev1.Event{} },
		NewListFunc:               func() runtime.Object { return &corev1.EventList{} },
		PredicateFunc:             Match,
		DefaultQualifiedResource:  corev1.Resource("events"),
		SingularQualifiedResource: corev1.Resource("event"),
		TTLFunc: func(runtime.Object, uint64, bool) (uint64, error) {
			return ttl, nil
		},

		CreateStrategy: s,
		UpdateStrategy: s,
		DeleteStrategy: s,

		TableConvertor: tableConvertor{},
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: GetAttrs}); err != nil {
		return nil, fmt.Errorf("completing storage of events: %w", err)
	}
	return &REST{Store: store, maxCount: opts.MaxCount}, nil
}

// ShortNames implements rest.ShortNamesProvider, as Kubernetes' "ev".
func (r *REST) ShortNames() []string { return []string{"ev"} }

// Create implements rest.Creater, keeping at most maxCount Events.
func (r *REST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	if err := r.makeRoom(ctx); err != nil {
		// Events are best effort; a full store must not refuse the newest.
		klog.FromContext(ctx).V(2).Info("Could not remove the oldest Events", "err", err)
	}
	return r.Store.Create(ctx, obj, createValidation, options)
}

// makeRoom removes the oldest tenth of the Events when there are maxCount of them. Counting
// is cheap (etcd counts keys); listing and removing happen once every maxCount/10 creates.
func (r *REST) makeRoom(ctx context.Context) error {
	stats, err := r.Storage.Stats(ctx)
	if err != nil {
		return fmt.Errorf("counting events: %w", err)
	}
	if stats.ObjectCount < int64(r.maxCount) {
		return nil
	}
	r.trimming.Lock()
	defer r.trimming.Unlock()
	all := genericapirequest.WithNamespace(ctx, metav1.NamespaceAll)
	listed, err := r.Store.List(all, &metainternalversion.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing events: %w", err)
	}
	items := listed.(*corev1.EventList).Items
	excess := len(items) - r.maxCount + 1 + r.maxCount/10
	if excess <= 0 {
		return nil
	}
	slices.SortFunc(items, func(a, b corev1.Event) int { return lastSeen(&a).Compare(lastSeen(&b)) })
	for i := range items[:min(excess, len(items))] {
		e := &items[i]
		precondition := &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &e.UID}}
		if _, _, err := r.Store.Delete(genericapirequest.WithNamespace(ctx, e.Namespace), e.Name, rest.ValidateAllObjectFunc, precondition); err != nil && !isGone(err) {
			return fmt.Errorf("removing event %s/%s: %w", e.Namespace, e.Name, err)
		}
	}
	return nil
}

// lastSeen is when an Event last happened, whichever API wrote it.
func lastSeen(e *corev1.Event) time.Time {
	t := e.CreationTimestamp.Time
	for _, c := range []time.Time{e.LastTimestamp.Time, e.EventTime.Time} {
		if c.After(t) {
			t = c
		}
	}
	if e.Series != nil && e.Series.LastObservedTime.After(t) {
		t = e.Series.LastObservedTime.Time
	}
	return t
}

// isGone: another replica (or the TTL) removed the Event first, or it was recreated.
func isGone(err error) bool { return apierrors.IsNotFound(err) || apierrors.IsConflict(err) }
