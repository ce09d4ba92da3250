package proxy

import (
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

func TestTransportsRebuildOnlyOnChange(t *testing.T) {
	tr := NewTransports(TransportOptions{}, nil)
	builds := 0
	build := func() (*rest.Config, []byte, error) {
		builds++
		return &rest.Config{Host: "https://127.0.0.1:6443", BearerToken: "t"}, nil, nil
	}
	first, err := tr.Get("uid-1", "m", "rv1", 1, 0, build)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := tr.Get("uid-1", "m", "rv1", 1, 0, build)
	if again != first || builds != 1 {
		t.Errorf("same secret and generation rebuilt the target (%d builds)", builds)
	}
	if first.ConnectTimeout != 10*time.Second {
		t.Errorf("default connect timeout %v", first.ConnectTimeout)
	}
	rotated, _ := tr.Get("uid-1", "m", "rv2", 1, 0, build)
	changed, _ := tr.Get("uid-1", "m", "rv2", 2, 3*time.Second, build)
	if rotated == first || changed == rotated || builds != 3 || changed.ConnectTimeout != 3*time.Second {
		t.Errorf("secret rotation or spec change did not rebuild (%d builds)", builds)
	}
	tr.Forget("uid-1")
	if tr.Len() != 0 {
		t.Errorf("Forget left %d targets", tr.Len())
	}
}
