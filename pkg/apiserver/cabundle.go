package apiserver

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericapiserver "k8s.io/apiserver/pkg/server"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
)

// caBundlePath is the only []byte field of a Mount, which JSON and YAML carry as base64.
var caBundlePath = field.NewPath("spec", "caBundle")

// caBundleNotBase64 is the message of the error for a caBundle that is no base64.
const caBundleNotBase64 = "must be base64 of the PEM bundle in YAML and JSON (e.g. the output of `base64 -w0 ca.crt`), not the PEM text itself"

// checkCABundleEncoding wraps a handler chain builder so that writes of Mounts whose
// spec.caBundle is no base64 (most often the PEM text pasted as it is) fail with an Invalid
// error on spec.caBundle. The decoders fail on it before any validation and name no field:
// "illegal base64 data at input byte 0" in a 400 for create and update, in a 422 on the field
// "patch" for patches, and in a 500 for server-side apply.
func checkCABundleEncoding(build func(http.Handler, *genericapiserver.Config) http.Handler) func(http.Handler, *genericapiserver.Config) http.Handler {
	return func(apiHandler http.Handler, c *genericapiserver.Config) http.Handler {
		maxBytes := c.MaxRequestBodyBytes
		return build(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			info, ok := genericapirequest.RequestInfoFrom(r.Context())
			if !ok || r.Body == nil || !info.IsResourceRequest || info.APIGroup != mounts.GroupName || info.Resource != "mounts" ||
				(info.Subresource != "" && info.Subresource != "status") || (info.Verb != "create" && info.Verb != "update" && info.Verb != "patch") {
				apiHandler.ServeHTTP(w, r)
				return
			}
			// The handler reads the body again; one that is too large it refuses itself.
			limited := r.Body
			if maxBytes > 0 {
				limited = io.NopCloser(io.LimitReader(r.Body, maxBytes+1))
			}
			body, err := io.ReadAll(limited)
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
			if err != nil || (maxBytes > 0 && int64(len(body)) > maxBytes) {
				apiHandler.ServeHTTP(w, r)
				return
			}
			if bad, name, ok := caBundleNotBase64In(r.Header.Get("Content-Type"), body); ok {
				if name == "" {
					name = info.Name
				}
				err := apierrors.NewInvalid(v1alpha1.SchemeGroupVersion.WithKind("Mount").GroupKind(), name,
					field.ErrorList{field.Invalid(caBundlePath, excerpt(bad), caBundleNotBase64)})
				responsewriters.ErrorNegotiated(err, Codecs, v1alpha1.SchemeGroupVersion, w, r)
				return
			}
			apiHandler.ServeHTTP(w, r)
		}), c)
	}
}

// excerpt is the first line of a rejected caBundle, enough to recognize a PEM header by.
func excerpt(s string) string {
	const limit = 40
	line, _, more := strings.Cut(s, "\n")
	if len(line) > limit {
		line, more = line[:limit], true
	}
	if more {
		line += "..."
	}
	return line
}

// caBundleBody is what the caBundle check reads of a Mount or a patch of one.
type caBundleBody struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		CABundle any `json:"caBundle"`
	} `json:"spec"`
}

// caBundleNotBase64In returns a spec.caBundle that a request body of the content type sets to
// a string that is no base64, the Mount's name if the body has one, and whether it found such
// a caBundle. Bodies it cannot read (protobuf, CBOR, malformed ones) it leaves to the decoders.
func caBundleNotBase64In(contentType string, body []byte) (string, string, bool) {
	mediaType, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return "", "", false
	}
	var values []any
	var name string
	switch mediaType {
	case "application/json", "application/yaml", string(types.MergePatchType), string(types.StrategicMergePatchType), string(types.ApplyYAMLPatchType):
		// JSON as the handler's decoder reads it (case-sensitive keys, the last of duplicates),
		// decoding only the two fields: every Mount status write passes here, and reading its
		// body as YAML (a superset of JSON) was a sixth of what a replica allocated in a
		// reconnect storm. Only a YAML body that is no JSON is read as YAML.
		var obj caBundleBody
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(body, &obj); err != nil {
			if mediaType != "application/yaml" && mediaType != string(types.ApplyYAMLPatchType) {
				return "", "", false
			}
			obj = caBundleBody{} // nothing of what the JSON decoder read before it failed
			if yaml.Unmarshal(body, &obj) != nil {
				return "", "", false
			}
		}
		values, name = []any{obj.Spec.CABundle}, obj.Metadata.Name
	case string(types.JSONPatchType):
		var ops []struct {
			Op    string `json:"op"`
			Path  string `json:"path"`
			Value any    `json:"value"`
		}
		if json.Unmarshal(body, &ops) != nil {
			return "", "", false
		}
		for _, op := range ops {
			switch {
			case op.Op != "add" && op.Op != "replace":
			case op.Path == "/spec/caBundle":
				values = append(values, op.Value)
			case op.Path == "/spec":
				if spec, ok := op.Value.(map[string]any); ok {
					values = append(values, spec["caBundle"])
				}
			}
		}
	}
	for _, v := range values {
		// As encoding/json decodes []byte: standard base64, line breaks ignored.
		if s, ok := v.(string); ok {
			if _, err := base64.StdEncoding.DecodeString(s); err != nil {
				return s, name, true
			}
		}
	}
	return "", "", false
}
