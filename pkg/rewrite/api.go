package rewrite

import (
	"fmt"
	"io"
	"mime"
	"strings"
)

// UnsupportedMediaTypeError says that a body of a renamed resource is not JSON (or YAML for
// apply): protobuf and CBOR cannot be rewritten. Answer 415 with its message.
type UnsupportedMediaTypeError struct {
	ContentType string
}

func (e *UnsupportedMediaTypeError) Error() string {
	return fmt.Sprintf("content type %q cannot be rewritten by this mount's renames: send JSON (application/json, or application/apply-patch+yaml for apply)", e.ContentType)
}

// mediaType returns the lower-cased media type of a Content-Type header ("" when empty).
func mediaType(contentType string) string {
	if contentType == "" {
		return ""
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return strings.ToLower(strings.TrimSpace(strings.SplitN(contentType, ";", 2)[0]))
	}
	return mt
}

// isJSON reports whether a media type is JSON (plain, patches, or a +json suffix).
func isJSON(mt string) bool {
	return mt == "" || mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// Response returns the response body rewritten target -> presented. Lists and Tables are
// rewritten item by item and watch streams frame by frame, so memory stays bounded; errors in
// the stream surface as read errors. Bodies that are not JSON pass as they are; discovery and
// OpenAPI documents are recognized as JSON by their content (kube-apiserver serves the
// OpenAPI v3 index as text/plain).
func (q Request) Response(contentType string, in io.Reader) io.Reader {
	if !q.Class.Rewrites() {
		return in
	}
	if q.Class == Discovery || q.Class == OpenAPI {
		return q.response(in)
	}
	if !isJSON(mediaType(contentType)) {
		return in
	}
	return q.response(in)
}
