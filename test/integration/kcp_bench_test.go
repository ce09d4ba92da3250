package integration

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// BenchmarkKcpPath compares, in one run, Mounts read through the kcp harness (kcp's shard:
// token authentication, RBAC by an access review in the workspace, a TLS hop with the
// shard's certificate) with the same reads straight from mount-apiserver, and the harness's
// own hop on a core resource of the workspace against its kube-apiserver directly. Wildcard
// discovery, which kcp fetches on every uncached discovery, is measured against the
// default cluster's. Run with:
//
//	go test ./test/integration -run '^$' -bench BenchmarkKcpPath -benchtime 300x
func BenchmarkKcpPath(b *testing.B) {
	e := startKcpEnv(b, kcpEnvOptions{modify: apiOnly})
	ctx := context.Background()
	const n = 100
	direct := rest.CopyConfig(e.server.Config)
	direct.Host += "/clusters/" + kcpClusterA
	directClient, err := clientset.NewForConfig(direct)
	if err != nil {
		b.Fatal(err)
	}
	viaKcp, err := clientset.NewForConfig(e.kcp.Config("alice-token", "root:ws-a"))
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		m := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("m-%03d", i)}, Spec: v1alpha1.MountSpec{Type: v1alpha1.MountTypeWorkspace, Ref: v1alpha1.ObjectReference{Name: "root:ws-b"}}}
		if _, err := directClient.MountsV1alpha1().Mounts().Create(ctx, m, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	kubeDirect, err := kubernetes.NewForConfig(e.a.AdminConfig)
	if err != nil {
		b.Fatal(err)
	}
	kubeViaKcp, err := kubernetes.NewForConfig(e.kcp.Config("alice-token", "root:ws-a"))
	if err != nil {
		b.Fatal(err)
	}
	grant(b, e.a, "alice", "ns-reader", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}})

	// The shard's own requests, straight to mount-apiserver: its kcp-mode authentication and
	// authorization without the harness's hop.
	shardCert, shardKey, err := e.kcp.ShardCA.IssuePEM(&x509.Certificate{Subject: pkix.Name{CommonName: framework.KcpShardClientName}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		b.Fatal(err)
	}
	shard := &rest.Config{Host: e.server.URL + "/clusters/" + kcpClusterA, TLSClientConfig: rest.TLSClientConfig{CAData: e.server.CAData, CertData: shardCert, KeyData: shardKey}, QPS: 1000, Burst: 2000}
	shardClient, err := clientset.NewForConfig(shard)
	if err != nil {
		b.Fatal(err)
	}

	for _, c := range []struct {
		name string
		do   func() error
	}{
		{"get/direct", func() error {
			_, err := directClient.MountsV1alpha1().Mounts().Get(ctx, "m-042", metav1.GetOptions{})
			return err
		}},
		{"get/shard-certificate", func() error {
			_, err := shardClient.MountsV1alpha1().Mounts().Get(ctx, "m-042", metav1.GetOptions{})
			return err
		}},
		{"get/kcp", func() error {
			_, err := viaKcp.MountsV1alpha1().Mounts().Get(ctx, "m-042", metav1.GetOptions{})
			return err
		}},
		{"list100/direct", func() error {
			_, err := directClient.MountsV1alpha1().Mounts().List(ctx, metav1.ListOptions{})
			return err
		}},
		{"list100/kcp", func() error { _, err := viaKcp.MountsV1alpha1().Mounts().List(ctx, metav1.ListOptions{}); return err }},
		{"harness-hop/namespace-direct", func() error {
			_, err := kubeDirect.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
			return err
		}},
		{"harness-hop/namespace-kcp", func() error {
			_, err := kubeViaKcp.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
			return err
		}},
		// What the harness does for every Mount request before forwarding it, as kcp does.
		{"harness-hop/access-review", func() error {
			_, err := kubeDirect.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: "alice", ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Group: "mounts.kcp.io", Resource: "mounts", Name: "m-042"},
			}}, metav1.CreateOptions{})
			return err
		}},
		{"discovery/default-cluster", func() error {
			return e.server.Client.Discovery().RESTClient().Get().AbsPath("/apis/mounts.kcp.io/v1alpha1").Do(ctx).Error()
		}},
		{"discovery/wildcard", func() error {
			return e.server.Client.Discovery().RESTClient().Get().AbsPath("/clusters/*/apis/mounts.kcp.io/v1alpha1").Do(ctx).Error()
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := c.do(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
