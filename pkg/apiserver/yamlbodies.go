package apiserver

import (
	"bytes"
	"fmt"
	"io"
	"mime"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"github.com/kcp-dev/mount-apiserver/pkg/yamlbound"
)

// boundYAMLBodies wraps a handler chain builder so that a write whose YAML body (application/
// yaml, or an apply patch) would expand through its aliases beyond the server's request body
// bound is refused with 400 before anything decodes it. The apiserver's YAML serializer, and
// the caBundle check, convert a YAML body whole to JSON: a string of 100 KiB aliased a
// thousand times, 105 KB of YAML, was 307 MiB of allocations for one Mount, and 3 MiB of
// them would be gigabytes. JSON, CBOR and protobuf bodies pass untouched.
func boundYAMLBodies(build func(http.Handler, *genericapiserver.Config) http.Handler) func(http.Handler, *genericapiserver.Config) http.Handler {
	return func(apiHandler http.Handler, c *genericapiserver.Config) http.Handler {
		maxBytes := c.MaxRequestBodyBytes
		return build(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Body == nil || maxBytes <= 0 || !isYAML(r.Header.Get("Content-Type")) {
				apiHandler.ServeHTTP(w, r)
				return
			}
			info, ok := genericapirequest.RequestInfoFrom(r.Context())
			if !ok || !info.IsResourceRequest || (info.Verb != "create" && info.Verb != "update" && info.Verb != "patch") {
				apiHandler.ServeHTTP(w, r)
				return
			}
			// The handler reads the body again; one that is too large it refuses itself.
			body, err := io.ReadAll(io.LimitReader(r.Body, maxBytes+1))
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
			if err != nil || int64(len(body)) > maxBytes {
				apiHandler.ServeHTTP(w, r)
				return
			}
			if err := yamlbound.Check(body, int(maxBytes)); err != nil {
				gv := schema.GroupVersion{Group: info.APIGroup, Version: info.APIVersion}
				responsewriters.ErrorNegotiated(apierrors.NewBadRequest(fmt.Sprintf("the request body: %v, the bound of a request body", err)), Codecs, gv, w, r)
				return
			}
			apiHandler.ServeHTTP(w, r)
		}), c)
	}
}

// isYAML reports whether a Content-Type is one of the YAML media types the server decodes.
func isYAML(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/yaml" || mt == string(types.ApplyYAMLPatchType))
}
