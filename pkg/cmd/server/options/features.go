package options

import (
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// Defaults of upstream feature gates that differ for this server; --feature-gates still
// overrides them.
func init() {
	// ListFromCacheSnapshot keeps a copy-on-write B-tree snapshot of the watch cache per write
	// until etcd's next compaction (up to 10 minutes): about 30% of the live heap right after
	// 10,000 mounts were created. It serves paginated LISTs from the cache; here their later
	// pages come from etcd, as before Kubernetes 1.34.
	utilruntime.Must(utilfeature.DefaultMutableFeatureGate.OverrideDefault(features.ListFromCacheSnapshot, false))
	// CBORServingAndStorage (alpha) is the only switch k8s.io/apiserver has for serving
	// application/cbor: with it, API groups get a CBOR serializer and negotiation offers it.
	// Decoding a LIST of 10,000 Mounts from CBOR costs a client-go client a fraction of JSON's.
	// Despite its name it does not change what is stored: the storage codec is the JSON one
	// chosen in NewOptions, and pkg/storagevalue compresses those bytes. Clients asking for
	// JSON get JSON as before.
	utilruntime.Must(utilfeature.DefaultMutableFeatureGate.OverrideDefault(features.CBORServingAndStorage, true))
}
