package proxy

import (
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

func TestTransportsShareAndRebuild(t *testing.T) {
	tr := NewTransports(TransportOptions{}, nil)
	builds := 0
	build := func() (*rest.Config, error) {
		builds++
		return &rest.Config{Host: "https://127.0.0.1:6443", BearerToken: "t"}, nil
	}
	key := TargetKey{SecretNamespace: "ns", SecretName: "s", SecretResourceVersion: "1"}
	first, err := tr.Get("uid-1", "m1", key, build)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := tr.Get("uid-1", "m1", key, build)
	shared, _ := tr.Get("uid-2", "m2", key, build)
	if again != first || shared != first || builds != 1 {
		t.Errorf("same key built %d targets; mounts of one Secret must share one", builds)
	}
	if first.ConnectTimeout != 10*time.Second {
		t.Errorf("default connect timeout %v", first.ConnectTimeout)
	}

	rotated := key
	rotated.SecretResourceVersion = "2"
	second, _ := tr.Get("uid-1", "m1", rotated, build)
	if second == first || builds != 2 || tr.Len() != 2 {
		t.Errorf("rotation: %d builds, %d targets", builds, tr.Len())
	}
	// uid-2 still uses the old target; once it moves too, the old one is closed and gone.
	tr.Get("uid-2", "m2", rotated, build)
	if tr.Len() != 1 {
		t.Errorf("old target kept after its last user left: %d targets", tr.Len())
	}
	withTimeout := rotated
	withTimeout.ConnectTimeout = 3 * time.Second
	third, _ := tr.Get("uid-2", "m2", withTimeout, build)
	if third.ConnectTimeout != 3*time.Second || builds != 3 {
		t.Errorf("connect timeout change: %v, %d builds", third.ConnectTimeout, builds)
	}
	tr.Forget("uid-1")
	tr.Forget("uid-2")
	if tr.Len() != 0 {
		t.Errorf("Forget left %d targets", tr.Len())
	}
}
