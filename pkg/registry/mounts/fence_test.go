package mounts_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	etcd3metrics "k8s.io/apiserver/pkg/storage/etcd3/metrics"
	etcd3testing "k8s.io/apiserver/pkg/storage/etcd3/testing"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/apiserver"
	mountsregistry "github.com/kcp-dev/mount-apiserver/pkg/registry/mounts"
)

// TestProxyReadsSeeEveryAcknowledgedWrite writes a Mount through the store over a real etcd
// with the watch cache, and connects to mounts/proxy right after each write returned: the
// proxy must get the Mount as written (created, switched to Impersonate, deleted), with the
// embedded etcd's cache reads (SoleWriter) as with quorum reads. It also counts the etcd reads
// of the connects: none with SoleWriter, one each without.
func TestProxyReadsSeeEveryAcknowledgedWrite(t *testing.T) {
	etcd3metrics.Register()
	for _, soleWriter := range []bool{true, false} {
		t.Run(map[bool]string{true: "sole writer, cache reads", false: "shared etcd, quorum reads"}[soleWriter], func(t *testing.T) {
			server, cfg := etcd3testing.NewUnsecuredEtcd3TestClientServer(t)
			t.Cleanup(func() { server.Terminate(t) })
			cfg.Codec = apiserver.Codecs.LegacyCodec(v1alpha1.SchemeGroupVersion)
			cfg.EventsHistoryWindow = storagebackend.DefaultEventsHistoryWindow
			var got *mounts.Mount
			storage, err := mountsregistry.NewStorage(apiserver.Scheme, cachedOptions{cfg}, mountsregistry.StorageOptions{
				Proxy: func(_ context.Context, m *mounts.Mount, _ string) (http.Handler, error) {
					got = m
					return http.NotFoundHandler(), nil
				},
				SoleWriter: soleWriter,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(storage.Mount.Destroy)
			ctx := genericapirequest.WithNamespace(context.Background(), "")
			deadline := time.Now().Add(30 * time.Second)
			for storage.Mount.ReadinessCheck() != nil {
				if time.Now().After(deadline) {
					t.Fatal("the watch cache never became ready")
				}
				time.Sleep(10 * time.Millisecond)
			}

			var etcdGets float64
			connect := func() error {
				got = nil
				before := etcdRequests(t, "get")
				_, err := storage.Proxy.Connect(ctx, "fenced", &mounts.MountProxyOptions{}, nil)
				etcdGets += etcdRequests(t, "get") - before
				return err
			}
			const rounds = 100
			for i := range rounds {
				created, err := storage.Mount.Create(ctx, &mounts.Mount{
					ObjectMeta: metav1.ObjectMeta{Name: "fenced"},
					Spec: mounts.MountSpec{
						Type:     mounts.MountTypeURL,
						Ref:      mounts.ObjectReference{APIVersion: "v1", Kind: "Secret", Namespace: "clusters", Name: "fenced"},
						Identity: mounts.MountIdentity{Mode: mounts.IdentityModeMountCredentials},
					},
				}, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if err := connect(); err != nil || got.UID != created.(*mounts.Mount).UID {
					t.Fatalf("round %d, right after create: %v, got %v", i, err, got)
				}

				_, _, err = storage.Mount.Update(ctx, "fenced", rest.DefaultUpdatedObjectInfo(nil, func(_ context.Context, _, oldObj runtime.Object) (runtime.Object, error) {
					m := oldObj.DeepCopyObject().(*mounts.Mount)
					m.Spec.Identity.Mode = mounts.IdentityModeImpersonate
					return m, nil
				}), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if err := connect(); err != nil || got.Spec.Identity.Mode != mounts.IdentityModeImpersonate {
					t.Fatalf("round %d, right after the switch to Impersonate: %v, got %v", i, err, got)
				}

				if _, _, err := storage.Mount.Delete(ctx, "fenced", rest.ValidateAllObjectFunc, &metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				if err := connect(); !apierrors.IsNotFound(err) {
					t.Fatalf("round %d, right after delete: %v, got %v", i, err, got)
				}
			}
			want := float64(0)
			if !soleWriter {
				want = 3 * rounds
			}
			if etcdGets != want {
				t.Errorf("the proxy's %d connects read etcd %v times, want %v", 3*rounds, etcdGets, want)
			}
		})
	}
}

// etcdRequests is the count of etcd requests of one operation on mounts so far.
func etcdRequests(t *testing.T, operation string) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "etcd_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["operation"] == operation && labels["resource"] == "mounts" {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestConnectOfAGoneCallerIsAnAPIError: a connect whose caller went away (an agent that gave up
// on its attach in a reconnect storm) fails with an API error, a timeout, not etcd's bare
// context error, which the server logs as a programmer's error ("Unhandled Error ... not an
// metav1.Status").
func TestConnectOfAGoneCallerIsAnAPIError(t *testing.T) {
	server, cfg := etcd3testing.NewUnsecuredEtcd3TestClientServer(t)
	t.Cleanup(func() { server.Terminate(t) })
	cfg.Codec = apiserver.Codecs.LegacyCodec(v1alpha1.SchemeGroupVersion)
	cfg.EventsHistoryWindow = storagebackend.DefaultEventsHistoryWindow
	storage, err := mountsregistry.NewStorage(apiserver.Scheme, cachedOptions{cfg}, mountsregistry.StorageOptions{
		Proxy:  func(context.Context, *mounts.Mount, string) (http.Handler, error) { return http.NotFoundHandler(), nil },
		Attach: func(context.Context, *mounts.Mount) (http.Handler, error) { return http.NotFoundHandler(), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(storage.Mount.Destroy)
	ctx, cancel := context.WithCancel(genericapirequest.WithNamespace(context.Background(), ""))
	cancel()
	for what, connect := range map[string]func() error{
		"proxy": func() error {
			_, err := storage.Proxy.Connect(ctx, "gone", &mounts.MountProxyOptions{}, nil)
			return err
		},
		"attach": func() error { _, err := storage.Attach.Connect(ctx, "gone", nil, nil); return err },
	} {
		err := connect()
		status, ok := err.(apierrors.APIStatus)
		if !ok || status.Status().Code != http.StatusGatewayTimeout {
			t.Errorf("%s of a caller gone: %#v, want a timeout Status", what, err)
		}
	}
}
