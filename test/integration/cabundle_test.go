package integration

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// mountYAML is a URL mount with the given caBundle line(s), indented under spec.
func mountYAML(name, caBundle string) string {
	return fmt.Sprintf(`apiVersion: mounts.kcp.io/v1alpha1
kind: Mount
metadata:
  name: %s
spec:
  ref:
    namespace: clusters
    name: %s-kubeconfig
  caBundle: %s
`, name, name, caBundle)
}

// TestCABundleEncoding writes Mounts whose spec.caBundle is the PEM text pasted as it is, as
// users do, through every way of writing: each is refused as invalid on spec.caBundle, with
// how to encode it. The base64 of the same PEM is taken.
func TestCABundleEncoding(t *testing.T) {
	s := framework.StartInProcess(t, "", apiOnly)
	ctx := context.Background()
	kubectl := realKubectl(t)
	pem := s.CAData
	pasted := "|\n    " + strings.ReplaceAll(strings.TrimSpace(string(pem)), "\n", "\n    ")

	// The API's documentation says so.
	out, err := exec.Command(kubectl, "--kubeconfig", s.Kubeconfig, "explain", "mount.spec.caBundle").CombinedOutput()
	if err != nil || !strings.Contains(strings.Join(strings.Fields(string(out)), " "), "In YAML and JSON it is base64 of the PEM text") {
		t.Errorf("kubectl explain mount.spec.caBundle: %v\n%s", err, out)
	}

	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	pastedFile := write("pasted", mountYAML("pasted", pasted))
	for _, args := range [][]string{{"create", "-f", pastedFile}, {"apply", "-f", pastedFile}, {"apply", "--server-side", "-f", pastedFile}} {
		out, err := exec.Command(kubectl, append([]string{"--kubeconfig", s.Kubeconfig}, args...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), `The Mount "pasted" is invalid: spec.caBundle: Invalid value: "-----BEGIN CERTIFICATE-----...": must be base64 of the PEM bundle`) {
			t.Errorf("kubectl %s with the PEM pasted: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	encoded := base64.StdEncoding.EncodeToString(pem)
	out, err = exec.Command(kubectl, "--kubeconfig", s.Kubeconfig, "apply", "-f", write("encoded", mountYAML("encoded", encoded))).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply with the PEM in base64: %v\n%s", err, out)
	}
	m, err := s.Client.MountsV1alpha1().Mounts().Get(ctx, "encoded", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.Spec.CABundle, pem) {
		t.Errorf("stored caBundle %q, want the PEM", m.Spec.CABundle)
	}

	quoted := fmt.Sprintf("%q", pem)
	for patchType, patch := range map[types.PatchType]string{
		types.MergePatchType:          `{"spec":{"caBundle":` + quoted + `}}`,
		types.StrategicMergePatchType: `{"spec":{"caBundle":` + quoted + `}}`,
		types.JSONPatchType:           `[{"op":"replace","path":"/spec/caBundle","value":` + quoted + `}]`,
		types.ApplyYAMLPatchType:      mountYAML("encoded", pasted),
	} {
		req := s.Client.MountsV1alpha1().RESTClient().Patch(patchType).Resource("mounts").Name("encoded").Body([]byte(patch))
		if patchType == types.ApplyYAMLPatchType {
			req = req.Param("fieldManager", "test")
		}
		err := req.Do(ctx).Error()
		var status apierrors.APIStatus
		if !errors.As(err, &status) || status.Status().Code != http.StatusUnprocessableEntity || status.Status().Details == nil ||
			len(status.Status().Details.Causes) != 1 || status.Status().Details.Causes[0].Field != "spec.caBundle" {
			t.Errorf("%s patch with the PEM pasted: got %v, want a 422 on spec.caBundle", patchType, err)
		}
	}
	if m, err := s.Client.MountsV1alpha1().Mounts().Get(ctx, "encoded", metav1.GetOptions{}); err != nil || !bytes.Equal(m.Spec.CABundle, pem) {
		t.Errorf("after the refused patches: %v, caBundle %q", err, m.Spec.CABundle)
	}
}
