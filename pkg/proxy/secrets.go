package proxy

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	"github.com/kcp-dev/mount-apiserver/pkg/logging"
)

// SecretSource returns the Secrets that Mounts reference.
type SecretSource interface {
	GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
}

// DefaultSecretIdleTimeout is how long a Secret stays watched after its last read. The status
// controller reads the Secret of every mount at each probe (every 30 s by default), so only
// Secrets no Mount uses any more, or that only another replica's controller reads, go idle.
const DefaultSecretIdleTimeout = 10 * time.Minute

// WatchedSecrets reads Secrets from a cluster through one single-object informer per
// referenced Secret: a rotated Secret is seen at once, reads cost no round trip, and no other
// Secret of the cluster is ever cached in this process. A Secret not read for the idle timeout
// is no longer watched; reading it again watches it again.
type WatchedSecrets struct {
	clientFor func(clusters.Name) (kubernetes.Interface, error)
	ctx       context.Context
	syncWait  time.Duration
	idle      time.Duration

	mu        sync.Mutex
	watchers  map[secretKey]*secretWatcher
	listeners []func(namespace, name string)
}

// secretKey names a Secret in a logical cluster (DefaultCluster outside kcp mode).
type secretKey struct {
	cluster clusters.Name
	types.NamespacedName
}

type secretWatcher struct {
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc
	lastRead time.Time // guarded by WatchedSecrets.mu
}

// NewWatchedSecrets returns a source whose informers run until ctx ends, or until their
// Secret was not read for idle (0: until ctx ends).
func NewWatchedSecrets(ctx context.Context, client kubernetes.Interface, idle time.Duration) *WatchedSecrets {
	return NewClusterWatchedSecrets(ctx, func(clusters.Name) (kubernetes.Interface, error) { return client, nil }, idle)
}

// NewClusterWatchedSecrets returns a source that reads each Secret from the client of the
// logical cluster in the reading context (clusters.From): in kcp mode, the consumer
// workspace's Secrets through the APIExport's virtual workspace.
func NewClusterWatchedSecrets(ctx context.Context, clientFor func(clusters.Name) (kubernetes.Interface, error), idle time.Duration) *WatchedSecrets {
	s := &WatchedSecrets{clientFor: clientFor, ctx: ctx, syncWait: 5 * time.Second, idle: idle, watchers: map[secretKey]*secretWatcher{}}
	if idle > 0 {
		go wait.UntilWithContext(ctx, s.stopIdle, idle/2)
	}
	return s
}

// Watched returns how many Secrets are watched.
func (s *WatchedSecrets) Watched() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.watchers)
}

// stopIdle stops the watches of Secrets not read for the idle timeout.
func (s *WatchedSecrets) stopIdle(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for key, w := range s.watchers {
		if now.Sub(w.lastRead) >= s.idle {
			w.cancel()
			delete(s.watchers, key)
			klog.FromContext(ctx).V(2).Info("Stopped watching an idle Secret", "secret", key)
		}
	}
}

// OnChange registers f to be called when a watched Secret is added, changed or deleted.
func (s *WatchedSecrets) OnChange(f func(namespace, name string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listeners = append(s.listeners, f)
}

func (s *WatchedSecrets) notify(namespace, name string) {
	s.mu.Lock()
	listeners := append([]func(string, string){}, s.listeners...)
	s.mu.Unlock()
	for _, f := range listeners {
		f(namespace, name)
	}
}

// GetSecret returns the Secret, starting to watch it on first use.
func (s *WatchedSecrets) GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	cluster := clusters.From(ctx)
	if cluster == clusters.Wildcard {
		return nil, fmt.Errorf("reading Secret %s/%s: no logical cluster in the request", namespace, name)
	}
	w, err := s.watcher(secretKey{cluster, types.NamespacedName{Namespace: namespace, Name: name}})
	if err != nil {
		return nil, err
	}
	if !w.informer.HasSynced() {
		syncCtx, cancel := context.WithTimeout(ctx, s.syncWait)
		defer cancel()
		if !cache.WaitForCacheSync(syncCtx.Done(), w.informer.HasSynced) {
			return nil, fmt.Errorf("cannot read Secret %s/%s from the cluster that holds it (is the server allowed to get, list and watch it?)", namespace, name)
		}
	}
	obj, exists, err := w.informer.GetStore().GetByKey(namespace + "/" + name)
	if err != nil {
		return nil, fmt.Errorf("reading Secret %s/%s: %w", namespace, name, err)
	}
	if !exists {
		return nil, apierrors.NewNotFound(corev1.Resource("secrets"), namespace+"/"+name)
	}
	return obj.(*corev1.Secret), nil
}

// watcher returns the Secret's watcher, started on first use, and marks it read.
func (s *WatchedSecrets) watcher(key secretKey) (*secretWatcher, error) {
	namespace, name := key.Namespace, key.Name
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.watchers[key]; ok {
		w.lastRead = time.Now()
		return w, nil
	}
	client, err := s.clientFor(key.cluster)
	if err != nil {
		return nil, fmt.Errorf("reading Secret %s/%s of logical cluster %s: %w", namespace, name, key.cluster, err)
	}
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			return client.CoreV1().Secrets(namespace).List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			return client.CoreV1().Secrets(namespace).Watch(ctx, opts)
		},
	}
	informer := cache.NewSharedIndexInformer(lw, &corev1.Secret{}, 0, cache.Indexers{})
	notify := func(any) { s.notify(namespace, name) }
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, obj any) { notify(obj) },
		DeleteFunc: notify,
	})
	// The informer's LISTs would log the Secret's body at -v=8 and above. Watches stream
	// without one, but a reflector LISTs whenever the cluster does not stream initial events.
	ctx, cancel := context.WithCancel(logging.WithoutBodies(s.ctx))
	go informer.RunWithContext(ctx)
	w := &secretWatcher{informer: informer, cancel: cancel, lastRead: time.Now()}
	s.watchers[key] = w
	return w, nil
}
