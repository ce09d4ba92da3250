package options

import (
	"testing"

	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

func TestListFromCacheSnapshotIsOffByDefault(t *testing.T) {
	if utilfeature.DefaultFeatureGate.Enabled(features.ListFromCacheSnapshot) {
		t.Error("ListFromCacheSnapshot is on; this server defaults it off to keep the watch cache's memory down")
	}
}

func TestCBORServingIsOffByDefault(t *testing.T) {
	if utilfeature.DefaultFeatureGate.Enabled(features.CBORServingAndStorage) {
		t.Error("CBORServingAndStorage is on; this server serves CBOR only with --feature-gates=CBORServingAndStorage=true")
	}
}
