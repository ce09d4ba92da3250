package options

import (
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// Defaults of upstream feature gates that differ for this server; --feature-gates still
// overrides them. CBORServingAndStorage keeps its upstream default (off): it is alpha, and
// with it the server parses request bodies of untrusted callers with an alpha CBOR decoder.
// --feature-gates=CBORServingAndStorage=true turns CBOR serving on (docs/mount.md).
func init() {
	// ListFromCacheSnapshot keeps a copy-on-write B-tree snapshot of the watch cache per write
	// until etcd's next compaction (up to 10 minutes): about 30% of the live heap right after
	// 10,000 mounts were created. It serves paginated LISTs from the cache; here their later
	// pages come from etcd, as before Kubernetes 1.34.
	utilruntime.Must(utilfeature.DefaultMutableFeatureGate.OverrideDefault(features.ListFromCacheSnapshot, false))
}
