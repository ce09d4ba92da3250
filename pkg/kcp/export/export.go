package export

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	apisv1alpha1 "github.com/kcp-dev/sdk/apis/apis/v1alpha1"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"
	cachev1alpha1 "github.com/kcp-dev/sdk/apis/cache/v1alpha1"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
)

// Names of the objects in artifacts/kcp. The hand-written YAML uses them too; Check holds
// the bundle to them.
const (
	// Group, Version and Resource of Mounts.
	Group    = v1alpha1.GroupName
	Version  = "v1alpha1"
	Resource = "mounts"

	// ExportName is the APIExport consumers bind.
	ExportName = "mounts.kcp.io"
	// EndpointsExportName is an APIExport nobody binds. The endpoint slice names it as its
	// export: kcp v0.32.3 keeps a slice's endpoints only while its export references the
	// slice and has no bindings (DESIGN.md section 1), which the bound export cannot be.
	EndpointsExportName = "mount-apiserver-endpoints"
	// EndpointSliceName is the CachedResourceEndpointSlice whose status.endpoints[].url is
	// this server's URL; both exports' virtual storage references it.
	EndpointSliceName = "mount-apiserver"
	// CachedResourceName is the CachedResource the slice must name to keep its endpoints.
	CachedResourceName = "mount-apiserver-anchor"
	// IdentityHash is the identityHash of the virtual storage. kcp v0.32.3 accepts any stable
	// string; this one is the SHA-256 of "mounts.kcp.io". Wildcard requests carry it
	// (/clusters/*/apis/mounts.kcp.io/v1alpha1/mounts:<hash>), so it must never change.
	IdentityHash = "7f0f25b40d779d96acf1c68a33500590618f011e45276cd5741924a7b5fcb618"
	// BindRoleName is the ClusterRole of the provider workspace that lets consumers bind.
	BindRoleName = "mounts-bind"
)

// ClaimedSecretVerbs are the verbs the export claims on core Secrets of consumer
// workspaces: the server reads the kubeconfig Secrets of URL mounts through the export's
// virtual workspace.
func ClaimedSecretVerbs() []string { return []string{"get", "list", "watch"} }

// APIResourceSchema returns the APIResourceSchema of Mounts, named by its content: kcp
// refuses changes to an APIResourceSchema, so a new schema needs a new name.
func APIResourceSchema(getDefs Definitions) (*apisv1alpha1.APIResourceSchema, error) {
	schema, err := StructuralSchema(getDefs, v1alpha1.Mount{}.OpenAPIModelName())
	if err != nil {
		return nil, fmt.Errorf("schema of Mount: %w", err)
	}
	version := apisv1alpha1.APIResourceVersion{
		Name:    Version,
		Served:  true,
		Storage: true,
		Subresources: apiextensionsv1.CustomResourceSubresources{
			Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
		},
		AdditionalPrinterColumns: printerColumns(),
	}
	if err := version.SetSchema(schema); err != nil {
		return nil, fmt.Errorf("schema of Mount: %w", err)
	}
	s := &apisv1alpha1.APIResourceSchema{
		TypeMeta: metav1.TypeMeta{APIVersion: apisv1alpha1.SchemeGroupVersion.String(), Kind: "APIResourceSchema"},
		Spec: apisv1alpha1.APIResourceSchemaSpec{
			Group: Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural:   Resource,
				Singular: "mount",
				Kind:     "Mount",
				ListKind: "MountList",
				// kcp serves discovery with the schema's names, not the server's: the server's
				// short name (pkg/registry/mounts) must be here for kubectl get mnt.
				ShortNames: []string{"mnt"},
			},
			Scope:    apiextensionsv1.ClusterScoped,
			Versions: []apisv1alpha1.APIResourceVersion{version},
		},
	}
	name, err := SchemaName(&s.Spec)
	if err != nil {
		return nil, err
	}
	s.Name = name
	return s, nil
}

// SchemaName is v<first 10 hex digits of the SHA-256 of the spec's JSON>.mounts.mounts.kcp.io.
// The JSON is canonical (keys sorted, no spaces), so the spec read back from YAML gives the
// same name as the spec generated.
func SchemaName(spec *apisv1alpha1.APIResourceSchemaSpec) (string, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return "", fmt.Errorf("hashing the APIResourceSchema: %w", err)
	}
	var canonical any
	if err := json.Unmarshal(raw, &canonical); err != nil {
		return "", fmt.Errorf("hashing the APIResourceSchema: %w", err)
	}
	if raw, err = json.Marshal(canonical); err != nil {
		return "", fmt.Errorf("hashing the APIResourceSchema: %w", err)
	}
	sum := sha256.Sum256(raw)
	return "v" + hex.EncodeToString(sum[:])[:10] + "." + spec.Names.Plural + "." + spec.Group, nil
}

// printerColumns follow the server's table (pkg/registry/mounts): kcp forwards kubectl's
// Accept header, so kubectl prints the server's table; these columns are what the schema
// says to tools that read it instead. Target shows the name only, which JSONPath can express,
// and Reason the whole reason (the server's table shortens one beyond 32 characters).
func printerColumns() []apiextensionsv1.CustomResourceColumnDefinition {
	return []apiextensionsv1.CustomResourceColumnDefinition{
		{Name: "Type", Type: "string", JSONPath: ".spec.type", Description: "How the mount reaches its target: URL, Workspace or Redirect."},
		{Name: "Phase", Type: "string", JSONPath: ".status.phase", Description: "Initializing, Connecting, Ready or Unknown."},
		{Name: "Ready", Type: "string", JSONPath: `.status.conditions[?(@.type=="Ready")].status`, Description: "Status of the Ready condition."},
		{Name: "Reason", Type: "string", JSONPath: `.status.conditions[?(@.type=="Ready")].reason`, Description: "Reason of the Ready condition."},
		{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp", Description: "Time since the mount was created."},
		{Name: "URL", Type: "string", Priority: 1, JSONPath: ".status.URL", Description: "The URL at which the mount's proxy is served."},
		{Name: "Target", Type: "string", Priority: 1, JSONPath: ".spec.ref.name", Description: "Name of the object that backs the mount."},
		{Name: "Agent", Type: "string", Priority: 1, JSONPath: `.status.conditions[?(@.type=="AgentConnected")].reason`, Description: "Reason of the AgentConnected condition of a tunnel mount: Attached or Detached."},
		{Name: "Identity", Type: "string", Priority: 1, JSONPath: ".spec.identity.mode", Description: "Identity mode of proxied requests."},
	}
}

// APIExports returns the export consumers bind and the never-bound export the endpoint
// slice names, both serving schemaName from this server through the slice.
func APIExports(schemaName string) []*apisv1alpha2.APIExport {
	resource := func() []apisv1alpha2.ResourceSchema {
		return []apisv1alpha2.ResourceSchema{{
			Group:  Group,
			Name:   Resource,
			Schema: schemaName,
			Storage: apisv1alpha2.ResourceSchemaStorage{
				Virtual: &apisv1alpha2.ResourceSchemaStorageVirtual{
					Reference: corev1.TypedLocalObjectReference{
						APIGroup: ptr.To(cachev1alpha1.SchemeGroupVersion.Group),
						Kind:     "CachedResourceEndpointSlice",
						Name:     EndpointSliceName,
					},
					IdentityHash: IdentityHash,
				},
			},
		}}
	}
	typeMeta := metav1.TypeMeta{APIVersion: apisv1alpha2.SchemeGroupVersion.String(), Kind: "APIExport"}
	return []*apisv1alpha2.APIExport{
		{
			TypeMeta:   typeMeta,
			ObjectMeta: metav1.ObjectMeta{Name: ExportName},
			Spec: apisv1alpha2.APIExportSpec{
				Resources: resource(),
				PermissionClaims: []apisv1alpha2.PermissionClaim{{
					GroupResource: apisv1alpha2.GroupResource{Group: "", Resource: "secrets"},
					Verbs:         ClaimedSecretVerbs(),
				}},
			},
		},
		{
			TypeMeta:   typeMeta,
			ObjectMeta: metav1.ObjectMeta{Name: EndpointsExportName},
			Spec:       apisv1alpha2.APIExportSpec{Resources: resource()},
		},
	}
}
