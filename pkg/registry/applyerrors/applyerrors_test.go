package applyerrors

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/rest"
)

func TestWrap(t *testing.T) {
	typo := errors.New("failed to create typed patch object (/typo; mounts.kcp.io/v1alpha1, Kind=Mount): .spec.identty: field not declared in schema")
	other := errors.New("failed to create typed live object")
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "mounts.kcp.io", Resource: "mounts"}, "x", errors.New("changed"))
	for _, c := range []struct {
		err        error
		badRequest bool
	}{{typo, true}, {other, false}, {conflict, false}} {
		info := Wrap(rest.DefaultUpdatedObjectInfo(nil, func(context.Context, runtime.Object, runtime.Object) (runtime.Object, error) { return nil, c.err }))
		_, err := info.UpdatedObject(context.Background(), nil)
		if apierrors.IsBadRequest(err) != c.badRequest || err.Error() != c.err.Error() && !c.badRequest {
			t.Errorf("%v: %v", c.err, err)
		}
	}
}
