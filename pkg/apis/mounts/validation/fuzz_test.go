package validation

import (
	"encoding/json"
	"testing"
)

// FuzzValidateMount feeds arbitrary JSON-decoded specs and statuses to the validators: whatever
// arrives, they return errors and never panic.
func FuzzValidateMount(f *testing.F) {
	f.Add([]byte(`{"Type":"URL","Ref":{"APIVersion":"v1","Kind":"Secret","Namespace":"a","Name":"b"},"Identity":{"Mode":"Impersonate"}}`), []byte(`{"Phase":"Ready","URL":"https://x/"}`))
	f.Add([]byte(`{"Type":"Workspace","Ref":{"Kind":"Workspace","Name":"root:a"},"CABundle":"LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="}`), []byte(`{"URL":"http://[::1"}`))
	f.Add([]byte(`{"Timeouts":{"ConnectSeconds":-5},"Identity":{"Mode":"MountCredentials","UserPrefix":"system"}}`), []byte(`{"Conditions":[{"type":""}]}`))
	f.Fuzz(func(t *testing.T, spec, status []byte) {
		m := validURLMount()
		if json.Unmarshal(spec, &m.Spec) != nil {
			return
		}
		_ = json.Unmarshal(status, &m.Status)
		_ = ValidateMount(m)
		_ = ValidateMountUpdate(m, validURLMount())
		_ = ValidateMountStatusUpdate(m, validURLMount())
	})
}
