package tunnel

import "testing"

// A pod's attach through a mount's proxy is no agent's attach: LimitAttaching must not count it.
func TestIsAgentAttach(t *testing.T) {
	for path, want := range map[string]bool{
		"/apis/mounts.kcp.io/v1alpha1/mounts/prod/attach":                                  true,
		"/clusters/abc/apis/mounts.kcp.io/v1alpha1/mounts/prod/attach":                     true,
		"/apis/mounts.kcp.io/v1alpha1/mounts/prod/proxy/api/v1/namespaces/d/pods/p/attach": false,
		"/apis/mounts.kcp.io/v1alpha1/mounts/prod/proxy/api/v1/namespaces/mounts/x/attach": false,
		"/api/v1/namespaces/d/pods/p/attach":                                               false,
	} {
		if got := isAgentAttach(path); got != want {
			t.Errorf("%s: %v, want %v", path, got, want)
		}
	}
}
