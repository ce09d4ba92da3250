package install

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/apitesting/roundtrip"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/fuzzer"
)

// TestRoundTrip fuzzes every type of the group through JSON, YAML and CBOR in every version and
// back, so conversion and (de)serialization lose nothing.
func TestRoundTrip(t *testing.T) {
	roundtrip.RoundTripTestForAPIGroup(t, Install, fuzzer.Funcs)
}
