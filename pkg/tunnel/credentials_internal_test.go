package tunnel

import (
	"context"
	"errors"
	"net/url"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
)

func TestHostUnavailable(t *testing.T) {
	timeout := &url.Error{Op: "Post", URL: "https://host/apis/authentication.k8s.io/v1/tokenreviews", Err: context.DeadlineExceeded}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"refused token", errors.New("invalid bearer token"), false},
		{"the host's reason", errors.New("service account token has been invalidated"), false},
		{"timeout", timeout, true},
		{"union of a refusal and a timeout", utilerrors.NewAggregate([]error{errors.New("invalid bearer token"), timeout}), true},
		{"union of refusals", utilerrors.NewAggregate([]error{errors.New("invalid bearer token"), errors.New("token expired")}), false},
		{"overloaded", apierrors.NewTooManyRequests("slow down", 1), true},
		{"server error", apierrors.NewInternalError(errors.New("etcd")), true},
		{"forbidden", apierrors.NewForbidden(schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"}, "", errors.New("no")), false},
	} {
		if got := hostUnavailable(tc.err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
