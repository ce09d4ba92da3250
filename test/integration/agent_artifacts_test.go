package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// agentBundle is what kubectl kustomize makes of an artifacts/agent directory, by kind.
type agentBundle struct {
	kinds    []string
	deploys  []appsv1.Deployment
	sas      []corev1.ServiceAccount
	secrets  []corev1.Secret
	roles    []rbacv1.ClusterRole
	bindings []rbacv1.ClusterRoleBinding
}

func buildAgentBundle(t *testing.T, kubectl, dir string) agentBundle {
	t.Helper()
	out, err := exec.Command(kubectl, "kustomize", dir).Output()
	if err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			t.Fatalf("kubectl kustomize %s: %v: %s", dir, err, exitErr.Stderr)
		}
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	var b agentBundle
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return b
		}
		if err != nil {
			t.Fatal(err)
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		b.kinds = append(b.kinds, meta.Kind)
		var into any
		switch meta.Kind {
		case "Namespace":
			into = &corev1.Namespace{}
		case "Deployment":
			b.deploys = append(b.deploys, appsv1.Deployment{})
			into = &b.deploys[len(b.deploys)-1]
		case "ServiceAccount":
			b.sas = append(b.sas, corev1.ServiceAccount{})
			into = &b.sas[len(b.sas)-1]
		case "Secret":
			b.secrets = append(b.secrets, corev1.Secret{})
			into = &b.secrets[len(b.secrets)-1]
		case "ClusterRole":
			b.roles = append(b.roles, rbacv1.ClusterRole{})
			into = &b.roles[len(b.roles)-1]
		case "ClusterRoleBinding":
			b.bindings = append(b.bindings, rbacv1.ClusterRoleBinding{})
			into = &b.bindings[len(b.bindings)-1]
		default:
			t.Fatalf("%s: unexpected kind %s", dir, meta.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, into); err != nil {
			t.Fatalf("%s: %s: %v", dir, meta.Kind, err)
		}
	}
}

// TestAgentArtifacts builds artifacts/agent and artifacts/agent/hub with the real kubectl,
// checks that their parts refer to each other, applies both to a real kube-apiserver with
// kubectl apply -k, and asks it (SubjectAccessReview) what the identities may do: the hub
// identity attaches to Mount "prod" and to no other, the agent's ServiceAccount impersonates
// users, groups, UIDs and extras and may do nothing else.
func TestAgentArtifacts(t *testing.T) {
	ctx := klog.NewContext(context.Background(), klog.Background())
	bin, err := framework.KubeBinDir()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(bin, "kubectl")
	dir := filepath.Join(framework.RepoRoot(), "artifacts", "agent")

	agent := buildAgentBundle(t, kubectl, dir)
	if len(agent.deploys) != 1 || len(agent.sas) != 1 || len(agent.secrets) != 1 {
		t.Fatalf("artifacts/agent: kinds %v, want one Deployment, ServiceAccount and Secret", agent.kinds)
	}
	d, sa, secret := agent.deploys[0], agent.sas[0], agent.secrets[0]
	spec := d.Spec.Template.Spec
	if spec.ServiceAccountName != sa.Name || d.Namespace != sa.Namespace {
		t.Errorf("Deployment %s/%s runs as %q, the ServiceAccount is %s/%s", d.Namespace, d.Name, spec.ServiceAccountName, sa.Namespace, sa.Name)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("Deployment: replicas %v, strategy %q; want 1 and Recreate (two agents of one Mount take the session from each other)", d.Spec.Replicas, d.Spec.Strategy.Type)
	}
	if len(spec.Volumes) != 1 || spec.Volumes[0].Secret == nil || spec.Volumes[0].Secret.SecretName != secret.Name {
		t.Errorf("Deployment volumes %+v do not mount the generated Secret %s", spec.Volumes, secret.Name)
	}
	if _, ok := secret.Data["kubeconfig"]; !ok {
		t.Errorf("Secret %s has keys %v, want kubeconfig", secret.Name, slices.Collect(maps.Keys(secret.Data)))
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"--hub-kubeconfig=/etc/mount-agent/hub/kubeconfig", "--mount=prod", "--health-bind-address=0.0.0.0:8080"} {
		if !strings.Contains(args, want) {
			t.Errorf("agent args %q lack %s", args, want)
		}
	}
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/etc/mount-agent/hub" {
		t.Errorf("volume mounts %+v", c.VolumeMounts)
	}
	if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem || c.ReadinessProbe == nil || c.LivenessProbe == nil {
		t.Errorf("container lacks a read-only root filesystem or its probes: %+v", c)
	}
	if len(agent.bindings) != 1 || len(agent.bindings[0].Subjects) != 1 ||
		agent.bindings[0].Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Name: sa.Name, Namespace: sa.Namespace}) {
		t.Errorf("impersonator binding %+v does not bind %s/%s", agent.bindings, sa.Namespace, sa.Name)
	}

	hub := buildAgentBundle(t, kubectl, filepath.Join(dir, "hub"))
	if len(hub.roles) != 1 || len(hub.bindings) != 1 || len(hub.sas) != 1 || len(hub.deploys) != 0 {
		t.Fatalf("artifacts/agent/hub: kinds %v, want a ServiceAccount, ClusterRole and binding", hub.kinds)
	}
	for _, r := range hub.roles[0].Rules {
		if !slices.Equal(r.Resources, []string{"mounts/attach"}) || !slices.Equal(r.ResourceNames, []string{"prod"}) {
			t.Errorf("hub rule %+v grants more than mounts/attach of prod", r)
		}
	}

	// Apply both, as an operator would, to a real kube-apiserver.
	kube, err := framework.StartKubeAPIServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kube.Stop)
	for _, d := range []string{dir, filepath.Join(dir, "hub")} {
		if out, err := exec.Command(kubectl, "--kubeconfig", kube.AdminKubeconfig, "apply", "-k", d).CombinedOutput(); err != nil {
			t.Fatalf("kubectl apply -k %s: %v: %s", d, err, out)
		}
	}
	may := func(user string, attrs authorizationv1.ResourceAttributes) bool {
		t.Helper()
		r, err := kube.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:serviceaccounts", "system:authenticated"}, ResourceAttributes: &attrs,
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r.Status.Allowed
	}
	hubSA := "system:serviceaccount:" + hub.sas[0].Namespace + ":" + hub.sas[0].Name
	attach := func(verb, name string) authorizationv1.ResourceAttributes {
		return authorizationv1.ResourceAttributes{Group: "mounts.kcp.io", Resource: "mounts", Subresource: "attach", Verb: verb, Name: name}
	}
	for _, verb := range []string{"get", "create"} {
		if !may(hubSA, attach(verb, "prod")) {
			t.Errorf("%s may not %s mounts/attach prod", hubSA, verb)
		}
		if may(hubSA, attach(verb, "other")) {
			t.Errorf("%s may %s mounts/attach of another mount", hubSA, verb)
		}
	}
	for _, attrs := range []authorizationv1.ResourceAttributes{
		{Group: "mounts.kcp.io", Resource: "mounts", Subresource: "proxy", Verb: "get", Name: "prod"},
		{Group: "mounts.kcp.io", Resource: "mounts", Verb: "get", Name: "prod"},
		{Group: "mounts.kcp.io", Resource: "mounts", Subresource: "attach", Verb: "list"},
	} {
		if may(hubSA, attrs) {
			t.Errorf("%s may %+v", hubSA, attrs)
		}
	}

	agentSA := "system:serviceaccount:" + sa.Namespace + ":" + sa.Name
	for _, attrs := range []authorizationv1.ResourceAttributes{
		{Resource: "users", Verb: "impersonate", Name: "alice"},
		{Resource: "groups", Verb: "impersonate", Name: "devs"},
		{Resource: "serviceaccounts", Verb: "impersonate", Namespace: "default", Name: "builder"},
		{Group: "authentication.k8s.io", Resource: "uids", Verb: "impersonate", Name: "u1"},
		{Group: "authentication.k8s.io", Resource: "userextras", Subresource: "authentication.kubernetes.io/credential-id", Verb: "impersonate", Name: "x"},
	} {
		if !may(agentSA, attrs) {
			t.Errorf("the agent's ServiceAccount may not %+v", attrs)
		}
	}
	for _, attrs := range []authorizationv1.ResourceAttributes{
		{Resource: "secrets", Verb: "get", Namespace: "kube-system"},
		{Resource: "pods", Verb: "list"},
	} {
		if may(agentSA, attrs) {
			t.Errorf("the agent's ServiceAccount may %+v itself", attrs)
		}
	}
}
