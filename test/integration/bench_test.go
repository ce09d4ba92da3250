package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/embeddedetcd"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// BenchmarkList1000 lists 1,000 Mounts through the server (served from the watch cache, and
// with resourceVersion "" as a consistent read) and, as the baseline in the same run, reads
// the same keys straight from etcd. Run with:
//
//	go test ./test/integration -run '^$' -bench BenchmarkList1000 -benchtime 100x
func BenchmarkList1000(b *testing.B) {
	_, ctx := ktesting.NewTestContext(b)
	etcd, err := embeddedetcd.Start(ctx, embeddedetcd.Options{Directory: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(etcd.Close)
	s := framework.StartInProcess(b, "", func(o *options.Options) {
		apiOnly(o)
		o.Etcd.StorageConfig.Transport.ServerList = []string{etcd.ClientURL}
	})
	bg := context.Background()
	const n = 1000
	for i := range n {
		if _, err := s.Client.MountsV1alpha1().Mounts().Create(bg, urlMount(fmt.Sprintf("m-%04d", i)), metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	direct, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.ClientURL}, DialTimeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { direct.Close() })

	expect := func(b *testing.B, got int) {
		if got != n {
			b.Fatalf("listed %d, want %d", got, n)
		}
	}
	b.Run("etcd-direct", func(b *testing.B) {
		for b.Loop() {
			resp, err := direct.Get(bg, "/mount-apiserver/mounts.kcp.io/mounts/", clientv3.WithPrefix())
			if err != nil {
				b.Fatal(err)
			}
			expect(b, len(resp.Kvs))
		}
	})
	for name, rv := range map[string]string{"apiserver-cache": "0", "apiserver-consistent": ""} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				list, err := s.Client.MountsV1alpha1().Mounts().List(bg, metav1.ListOptions{ResourceVersion: rv})
				if err != nil {
					b.Fatal(err)
				}
				expect(b, len(list.Items))
			}
		})
	}
}
