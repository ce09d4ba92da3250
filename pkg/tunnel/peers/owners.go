package peers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
)

// Labels and annotations of the ownership Leases.
const (
	// LabelSession marks the Leases of tunnel sessions, so replicas watch only those.
	LabelSession = "mounts.kcp.io/tunnel-session"
	// AnnotationPeerURL is the owner's peer URL.
	AnnotationPeerURL = "mounts.kcp.io/tunnel-peer-url"
	// AnnotationSessionKey is the session key the Lease name was hashed from; a lookup checks it.
	AnnotationSessionKey = "mounts.kcp.io/tunnel-session-key"
	// AnnotationSessionID tells apart the sessions of one key on one replica: an ended session
	// never releases or renews the Lease of the newer one.
	AnnotationSessionID = "mounts.kcp.io/tunnel-session-id"
)

// Defaults of OwnersConfig.
const (
	DefaultLeaseDuration = 60 * time.Second
	DefaultRenewPeriod   = 20 * time.Second
	// releaseTimeout bounds the delete of a Lease after its session ended.
	releaseTimeout = 5 * time.Second
	// reportAfterClaim is when a new session is reported again after its Lease was written:
	// enough for the other replicas' watches to have it.
	reportAfterClaim = time.Second
)

// LeaseName is the name of the Lease of a session key: a hash, since keys hold characters
// (and may have lengths) that names may not.
func LeaseName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "mount-tunnel-" + hex.EncodeToString(sum[:16])
}

// OwnersConfig configures Owners.
type OwnersConfig struct {
	// Client is the host cluster's client; the Leases live there.
	Client kubernetes.Interface
	// Namespace holds the Leases (the server's own, as for its leader election).
	Namespace string
	// Identity names this replica (holderIdentity); unique per process.
	Identity string
	// PeerURL is where other replicas reach this one.
	PeerURL string
	// LeaseDuration is how long a Lease counts without renewal; RenewPeriod how often the
	// owner renews it. Zero takes the defaults.
	LeaseDuration time.Duration
	RenewPeriod   time.Duration
	// RenewalsPerSecond, if positive, bounds this replica's renewals of all its sessions'
	// Leases together: with more sessions than RenewPeriod allows at that rate, each is
	// renewed less often, and written with a duration that outlasts its next renewal.
	RenewalsPerSecond float64
	// Clock, nil for the real one.
	Clock clock.PassiveClock
}

// Owners records which replica holds the session of each key, in Leases of the host.
type Owners struct {
	cfg OwnersConfig
	// held counts the sessions whose Leases this replica holds (renewal budget).
	held     atomic.Int64
	clock    clock.PassiveClock
	factory  informers.SharedInformerFactory
	lister   coordinationlisters.LeaseNamespaceLister
	informer cache.SharedIndexInformer
}

// Peer is the replica that holds a session.
type Peer struct {
	Identity string
	URL      string
}

// NewOwners returns the ownership records; Run starts watching them.
func NewOwners(cfg OwnersConfig) (*Owners, error) {
	if cfg.Client == nil || cfg.Namespace == "" || cfg.Identity == "" {
		return nil, errors.New("ownership of tunnel sessions needs a host client, a namespace and an identity")
	}
	if _, err := ParsePeerURL(cfg.PeerURL); err != nil {
		return nil, fmt.Errorf("peer URL: %w", err)
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.RenewPeriod <= 0 {
		cfg.RenewPeriod = DefaultRenewPeriod
	}
	if cfg.RenewPeriod >= cfg.LeaseDuration {
		return nil, fmt.Errorf("the renew period %s must be shorter than the lease duration %s", cfg.RenewPeriod, cfg.LeaseDuration)
	}
	o := &Owners{cfg: cfg, clock: cfg.Clock}
	if o.clock == nil {
		o.clock = clock.RealClock{}
	}
	o.factory = informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0,
		informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = LabelSession + "=true" }),
		informers.WithTransform(func(obj any) (any, error) {
			if m, err := meta.Accessor(obj); err == nil {
				m.SetManagedFields(nil)
			}
			return obj, nil
		}))
	leases := o.factory.Coordination().V1().Leases()
	o.informer = leases.Informer()
	o.lister = leases.Lister().Leases(cfg.Namespace)
	return o, nil
}

// Identity is this replica's holder identity.
func (o *Owners) Identity() string { return o.cfg.Identity }

// Run watches the Leases and deletes long expired ones (of replicas that died holding them)
// until ctx ends.
func (o *Owners) Run(ctx context.Context) {
	o.factory.Start(ctx.Done())
	defer o.factory.Shutdown()
	t := time.NewTicker(o.cfg.LeaseDuration)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			o.sweep(ctx)
		}
	}
}

// HasSynced says whether the Leases were listed once.
func (o *Owners) HasSynced() bool { return o.informer.HasSynced() }

// Owner returns the replica that holds the session of key, if another replica holds a Lease
// for it that has not expired. A Lease naming this replica's own peer URL under another
// identity was written by an earlier process at this address, which is dead: a replica
// restarted with its sessions' Leases unexpired would otherwise hop to itself, two TLS
// handshakes and a review of its own credentials for a 503, for every request and probe of
// a mount whose agent has not attached again (the hops' client side alone was 7.6 % of the
// replica's CPU samples in the first minute of a storm of 10,000).
func (o *Owners) Owner(key string) (Peer, bool) {
	lease, err := o.lister.Get(LeaseName(key))
	if err != nil {
		return Peer{}, false
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	if holder == "" || holder == o.cfg.Identity || lease.Annotations[AnnotationSessionKey] != key || o.expired(lease, 0) {
		return Peer{}, false
	}
	u := lease.Annotations[AnnotationPeerURL]
	if u == o.cfg.PeerURL {
		return Peer{}, false
	}
	if _, err := ParsePeerURL(u); err != nil {
		return Peer{}, false
	}
	return Peer{Identity: holder, URL: u}, true
}

// Hold records that this replica holds the session of key, taking the Lease over from any
// other holder (the newest session wins, as on one replica), and renews it until release is
// called or ctx ends; then it deletes the Lease unless a newer session took it meanwhile.
// release does not wait for the delete. renewed, if not nil, is called after each renewal.
func (o *Owners) Hold(ctx context.Context, key string, renewed func()) (release func()) {
	ctx, cancel := context.WithCancel(ctx)
	o.hold(ctx, key, uuid.NewString(), renewed)
	return cancel
}

// renewPeriod is how often each of held sessions' Leases is renewed: RenewPeriod, or longer
// when the sessions would renew faster than RenewalsPerSecond together.
func (cfg OwnersConfig) renewPeriod(held int64) time.Duration {
	p := cfg.RenewPeriod
	if cfg.RenewalsPerSecond > 0 {
		if spread := time.Duration(float64(held) / cfg.RenewalsPerSecond * float64(time.Second)); spread > p {
			p = spread
		}
	}
	return p
}

// leaseDuration is the duration a Lease renewed every period is written with: as long past
// its renewal as LeaseDuration is past RenewPeriod, so that it never expires between two.
func (cfg OwnersConfig) leaseDuration(period time.Duration) time.Duration {
	if period <= cfg.RenewPeriod {
		return cfg.LeaseDuration
	}
	return time.Duration(float64(period) * float64(cfg.LeaseDuration) / float64(cfg.RenewPeriod)).Truncate(time.Second)
}

// renewedWithin is when a Lease written with duration must be renewed: at the same share of
// its duration as RenewPeriod is of LeaseDuration.
func (cfg OwnersConfig) renewedWithin(duration time.Duration) time.Duration {
	return time.Duration(float64(duration) * float64(cfg.RenewPeriod) / float64(cfg.LeaseDuration))
}

// hold starts the claim and renewals of key's Lease for session id, and its release when ctx
// ends. They run on a timer, not in a goroutine of the session's: 10,000 sessions, renewed
// every few minutes each, held 10,000 goroutines asleep.
func (o *Owners) hold(ctx context.Context, key, id string, renewed func()) {
	logger := klog.FromContext(ctx).WithValues("sessionKey", key, "lease", LeaseName(key))
	h := &holding{o: o, ctx: klog.NewContext(ctx, logger), key: key, id: id, renewed: renewed, written: o.cfg.LeaseDuration}
	o.held.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.timer = time.AfterFunc(0, h.tick)
	context.AfterFunc(ctx, h.end)
}

// holding is one session's Lease. mu is held by a tick for its write and by the end, so the
// release never runs beside a renewal.
type holding struct {
	o       *Owners
	ctx     context.Context
	key, id string
	renewed func()
	mu      sync.Mutex
	timer   *time.Timer
	ended   bool
	claimed bool
	written time.Duration
}

// next is when the Lease is renewed again: at the period, but no later than the share of the
// duration last written that the period is of a Lease (a budget that lengthened the period
// since must not let the Lease lapse first); up to a tenth later, so that the sessions of a
// reconnect storm do not renew in step and the budget holds on average. A Lease lasts three
// periods.
func (h *holding) next() time.Duration {
	p := min(h.o.cfg.renewPeriod(h.o.held.Load()), h.o.cfg.renewedWithin(h.written))
	return p + time.Duration(rand.Int64N(int64(p)/10+1))
}

// tick claims the Lease, or renews it once claimed. The claim is retried on every tick until
// it succeeds: until then the session is served only by this replica.
func (h *holding) tick() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return
	}
	o, ctx, logger := h.o, h.ctx, klog.FromContext(h.ctx)
	duration := o.cfg.leaseDuration(o.cfg.renewPeriod(o.held.Load()))
	if !h.claimed {
		if err := o.write(ctx, h.key, h.id, true, duration); err != nil {
			if ctx.Err() == nil {
				logger.Error(err, "Cannot record this replica as the owner of a tunnel session; other replicas cannot reach it yet")
			}
		} else {
			h.claimed, h.written = true, duration
			logger.V(2).Info("Recorded this replica as the owner of a tunnel session")
			if h.renewed != nil {
				// Others have seen the Lease by then: a report they contradicted before it
				// existed is made again.
				time.AfterFunc(reportAfterClaim, func() {
					if ctx.Err() == nil {
						h.renewed()
					}
				})
			}
		}
	} else if err := o.write(ctx, h.key, h.id, false, duration); err == nil {
		h.written = duration
		if h.renewed != nil {
			h.renewed()
		}
	} else if errors.Is(err, errSuperseded) {
		logger.V(2).Info("A newer session of the tunnel is held elsewhere; not renewing")
	} else if ctx.Err() == nil {
		logger.Error(err, "Cannot renew the ownership of a tunnel session")
	}
	h.timer.Reset(h.next())
}

// end stops the renewals once the session has ended, after a write in progress, and releases
// the Lease.
func (h *holding) end() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ended = true
	h.timer.Stop()
	h.o.release(h.ctx, h.key, h.id)
	h.o.held.Add(-1)
}

var errSuperseded = errors.New("a newer session holds the lease")

// write claims (takeover) or renews the Lease of key for session id. A renewal leaves alone a
// Lease that another live session holds; it takes back one that was released or expired.
func (o *Owners) write(ctx context.Context, key, id string, takeover bool, duration time.Duration) error {
	leases := o.cfg.Client.CoordinationV1().Leases(o.cfg.Namespace)
	name := LeaseName(key)
	// Writes start from the cache, and a conflict (or a Lease created meanwhile) reads the
	// host; claims read the host until the cache has listed the Leases once. Claims read
	// from the host cost each attach of a reconnect storm a GET more.
	fresh := takeover && !o.informer.HasSynced()
	for attempt := 0; attempt < 2; attempt++ {
		var lease *coordinationv1.Lease
		var err error
		if fresh {
			lease, err = leases.Get(ctx, name, metav1.GetOptions{})
		} else if lease, err = o.lister.Get(name); err == nil {
			lease = lease.DeepCopy()
		}
		now := metav1.NewMicroTime(o.clock.Now())
		switch {
		case apierrors.IsNotFound(err):
			_, err = leases.Create(ctx, o.newLease(name, key, id, now, duration), metav1.CreateOptions{})
		case err != nil:
			return fmt.Errorf("reading Lease %s/%s: %w", o.cfg.Namespace, name, err)
		default:
			holder := ptr.Deref(lease.Spec.HolderIdentity, "")
			mine := holder == o.cfg.Identity && lease.Annotations[AnnotationSessionID] == id
			if !takeover && !mine && holder != "" && !o.expired(lease, 0) {
				return errSuperseded
			}
			if !mine {
				lease.Spec.AcquireTime = &now
				lease.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
			}
			o.fill(lease, key, id, now, duration)
			_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		}
		if err == nil {
			return nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("writing Lease %s/%s: %w", o.cfg.Namespace, name, err)
		}
		fresh = true
	}
	return fmt.Errorf("writing Lease %s/%s: conflicting writers", o.cfg.Namespace, name)
}

func (o *Owners) newLease(name, key, id string, now metav1.MicroTime, duration time.Duration) *coordinationv1.Lease {
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: o.cfg.Namespace}}
	lease.Spec.AcquireTime = &now
	o.fill(lease, key, id, now, duration)
	return lease
}

func (o *Owners) fill(lease *coordinationv1.Lease, key, id string, now metav1.MicroTime, duration time.Duration) {
	if lease.Labels == nil {
		lease.Labels = map[string]string{}
	}
	lease.Labels[LabelSession] = "true"
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[AnnotationPeerURL] = o.cfg.PeerURL
	lease.Annotations[AnnotationSessionKey] = key
	lease.Annotations[AnnotationSessionID] = id
	lease.Spec.HolderIdentity = ptr.To(o.cfg.Identity)
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(duration / time.Second))
	lease.Spec.RenewTime = &now
}

// release deletes the Lease of key if session id still holds it. ctx has ended: the delete
// gets a context of its own.
func (o *Owners) release(ctx context.Context, key, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	leases := o.cfg.Client.CoordinationV1().Leases(o.cfg.Namespace)
	lease, err := leases.Get(ctx, LeaseName(key), metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			klog.FromContext(ctx).Error(err, "Cannot release the ownership of a tunnel session; it expires on its own")
		}
		return
	}
	if ptr.Deref(lease.Spec.HolderIdentity, "") != o.cfg.Identity || lease.Annotations[AnnotationSessionID] != id {
		return
	}
	if err := leases.Delete(ctx, lease.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &lease.UID, ResourceVersion: &lease.ResourceVersion}}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		klog.FromContext(ctx).Error(err, "Cannot release the ownership of a tunnel session; it expires on its own")
		return
	}
	klog.FromContext(ctx).V(2).Info("Released the ownership of a tunnel session")
}

// expired says whether the Lease was last renewed more than its duration (plus grace) ago.
func (o *Owners) expired(lease *coordinationv1.Lease, grace time.Duration) bool {
	if lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
		return true
	}
	d := time.Duration(*lease.Spec.LeaseDurationSeconds)*time.Second + grace
	return o.clock.Since(lease.Spec.RenewTime.Time) > d
}

// sweep deletes the Leases expired for another lease duration: their owner died holding them
// or the mount is gone. Every replica sweeps; the preconditions make it safe.
func (o *Owners) sweep(ctx context.Context) {
	leases, err := o.lister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, lease := range leases {
		if !o.expired(lease, o.cfg.LeaseDuration) {
			continue
		}
		err := o.cfg.Client.CoordinationV1().Leases(o.cfg.Namespace).Delete(ctx, lease.Name,
			metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &lease.UID, ResourceVersion: &lease.ResourceVersion}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			klog.FromContext(ctx).V(2).Info("Cannot delete an expired tunnel session Lease", "lease", lease.Name, "err", err)
		}
	}
}

// Follow returns a watcher for tunnel.Sessions.Watch that holds the Lease of each session
// this replica holds, from its start until it ends or a newer session of its key replaces it.
// renewed, if not nil, gets the session's start event again after each renewal: what reports
// the session (the AgentConnected condition) says so again, in case another replica that had
// not seen the session yet said otherwise.
func (o *Owners) Follow(ctx context.Context, renewed func(tunnel.Event)) func(tunnel.Event) {
	var mu sync.Mutex
	held := map[string]func(){}
	return func(e tunnel.Event) {
		key := e.Mount.Key()
		mu.Lock()
		defer mu.Unlock()
		if release, ok := held[key]; ok {
			release()
			delete(held, key)
		}
		if e.Connected {
			var again func()
			if renewed != nil {
				again = func() { renewed(e) }
			}
			held[key] = o.Hold(ctx, key, again)
		}
	}
}
