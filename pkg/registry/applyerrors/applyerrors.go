package applyerrors

import (
	"context"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
)

// patchPrefix starts the field manager's error for an apply patch that does not fit the
// schema (k8s.io/apimachinery/pkg/util/managedfields/internal, structuredmerge.go: a plain
// fmt.Errorf, so only its text tells it apart).
const patchPrefix = "failed to create typed patch object"

// Wrap returns objInfo whose UpdatedObject answers a patch that does not fit the schema with
// BadRequest; every other error stays as it was.
func Wrap(objInfo rest.UpdatedObjectInfo) rest.UpdatedObjectInfo {
	return updatedObjectInfo{objInfo}
}

type updatedObjectInfo struct{ rest.UpdatedObjectInfo }

func (u updatedObjectInfo) UpdatedObject(ctx context.Context, oldObj runtime.Object) (runtime.Object, error) {
	obj, err := u.UpdatedObjectInfo.UpdatedObject(ctx, oldObj)
	if err != nil {
		if _, isStatus := err.(apierrors.APIStatus); !isStatus && strings.HasPrefix(err.Error(), patchPrefix) {
			return obj, apierrors.NewBadRequest(err.Error())
		}
	}
	return obj, err
}
