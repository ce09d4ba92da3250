package apiserver

import "testing"

func TestCABundleNotBase64In(t *testing.T) {
	const pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	for _, c := range []struct {
		name, contentType, body string
		bad                     bool
		mount                   string
	}{
		{"JSON create, PEM", "application/json", `{"metadata":{"name":"m"},"spec":{"caBundle":"` + "-----BEGIN CERTIFICATE-----\\nMIIB" + `"}}`, true, "m"},
		{"JSON create, base64 with line breaks", "application/json", `{"spec":{"caBundle":"TUlJ\nQg=="}}`, false, ""},
		{"YAML apply, PEM", "application/apply-patch+yaml", "metadata:\n  name: m\nspec:\n  caBundle: |\n    -----BEGIN CERTIFICATE-----\n    MIIB\n    -----END CERTIFICATE-----\n", true, "m"},
		{"merge patch without caBundle", "application/merge-patch+json", `{"spec":{"timeouts":{}}}`, false, ""},
		{"caBundle null", "application/merge-patch+json", `{"spec":{"caBundle":null}}`, false, ""},
		{"JSON patch of the field", "application/json-patch+json", `[{"op":"test","path":"/spec/caBundle","value":"x y"},{"op":"replace","path":"/spec/caBundle","value":"x y"}]`, true, ""},
		{"JSON patch of spec", "application/json-patch+json", `[{"op":"add","path":"/spec","value":{"caBundle":"x y"}}]`, true, ""},
		{"JSON patch, test only", "application/json-patch+json", `[{"op":"test","path":"/spec/caBundle","value":"x y"}]`, false, ""},
		{"protobuf", "application/vnd.kubernetes.protobuf", "\x00", false, ""},
		{"malformed JSON", "application/json", `{"spec":`, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, mount, bad := caBundleNotBase64In(c.contentType, []byte(c.body))
			if bad != c.bad || mount != c.mount {
				t.Errorf("got %v %q, want %v %q", bad, mount, c.bad, c.mount)
			}
		})
	}
	if got := excerpt(pem); got != "-----BEGIN CERTIFICATE-----..." {
		t.Errorf("excerpt: %q", got)
	}
}
