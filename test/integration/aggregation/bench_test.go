package aggregation

import (
	"context"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
)

// BenchmarkGetMount compares GET of one Mount directly at mount-apiserver (client certificate
// of the host's CA, delegated authentication) with the same GET through the kube-apiserver
// aggregator, in the same run. It reports p50 and p99 per sub-benchmark; compare the ratios:
//
//	go test ./test/integration/aggregation -run '^$' -bench BenchmarkGetMount -benchtime 2000x
func BenchmarkGetMount(b *testing.B) {
	ctx := context.Background()
	host, err := clientset.NewForConfig(kube.AdminConfig)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := host.MountsV1alpha1().Mounts().Create(ctx, mount("bench"), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = host.MountsV1alpha1().Mounts().Delete(ctx, "bench", metav1.DeleteOptions{}) })

	for _, tc := range []struct {
		name string
		cfg  *rest.Config
	}{
		{"direct", agg.DirectConfig(kube.AdminConfig)},
		{"through-host", kube.AdminConfig},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c, err := clientset.NewForConfig(tc.cfg)
			if err != nil {
				b.Fatal(err)
			}
			mounts := c.MountsV1alpha1().Mounts()
			// Warm up connections and caches outside the measurement.
			for range 20 {
				if _, err := mounts.Get(ctx, "bench", metav1.GetOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			var samples []time.Duration
			for b.Loop() {
				start := time.Now()
				if _, err := mounts.Get(ctx, "bench", metav1.GetOptions{}); err != nil {
					b.Fatal(err)
				}
				samples = append(samples, time.Since(start))
			}
			slices.Sort(samples)
			b.ReportMetric(float64(samples[len(samples)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(samples[len(samples)*99/100].Microseconds()), "p99-µs")
		})
	}
}
