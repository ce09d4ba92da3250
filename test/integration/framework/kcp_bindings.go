package framework

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	apisv1alpha1 "github.com/kcp-dev/sdk/apis/apis/v1alpha1"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// SetBindingListing changes how the export's APIBindings are listed from now on.
func (k *Kcp) SetBindingListing(l KcpBindingListing) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.bindingListing = l
}

// BindingListings returns how many listings of the export's APIBindings were begun (a first
// page requested) and how many failed so far.
func (k *Kcp) BindingListings() (begun, failed int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.listingsBegun, k.listingsFailed
}

// serveBindings lists the export's APIBindings across workspaces, in the order of their
// logical clusters, one page per request as kcp pages lists: at most limit items and a
// continue token naming where the next page starts.
func (k *Kcp) serveBindings(w http.ResponseWriter, req *http.Request) {
	query := req.URL.Query()
	if query.Get("watch") != "" {
		kcpStatus(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "the harness lists APIBindings and does not watch them")
		return
	}
	limit := 0
	if l := query.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			kcpStatus(w, http.StatusBadRequest, "BadRequest", fmt.Sprintf("invalid limit %q", l))
			return
		}
		limit = n
	}
	after := ""
	if c := query.Get("continue"); c != "" {
		raw, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil || len(raw) == 0 {
			kcpStatus(w, http.StatusBadRequest, "BadRequest", "continue key is not valid")
			return
		}
		after = string(raw)
	}

	k.mu.Lock()
	defer k.mu.Unlock()
	if after == "" {
		k.listingsBegun++
	}
	var bound []string
	for key, ws := range k.workspaces {
		if key == ws.Cluster && ws.Bound && ws.Cluster > after {
			bound = append(bound, ws.Cluster)
		}
	}
	slices.Sort(bound)
	if page := k.bindingListing.PageSize; page > 0 && (limit == 0 || page < limit) {
		limit = page
	}
	list := apisv1alpha2.APIBindingList{TypeMeta: metav1.TypeMeta{Kind: "APIBindingList", APIVersion: "apis.kcp.io/v1alpha2"}, ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
	if limit > 0 && len(bound) > limit {
		bound = bound[:limit]
		list.Continue = base64.RawURLEncoding.EncodeToString([]byte(bound[limit-1]))
	}
	if list.Continue == "" && k.bindingListing.FailEvery > 0 && k.listingsBegun%k.bindingListing.FailEvery == 0 {
		k.listingsFailed++
		kcpStatus(w, http.StatusInternalServerError, "InternalError", "etcdserver: request timed out")
		return
	}
	for _, cluster := range bound {
		list.Items = append(list.Items, apisv1alpha2.APIBinding{
			TypeMeta: metav1.TypeMeta{Kind: "APIBinding", APIVersion: "apis.kcp.io/v1alpha2"},
			ObjectMeta: metav1.ObjectMeta{
				Name: "mounts", UID: types.UID("binding-of-" + cluster), ResourceVersion: "1",
				Annotations: map[string]string{"kcp.io/cluster": cluster},
				// kcp filters the export's view of APIBindings by this label.
				Labels: map[string]string{apisv1alpha1.InternalAPIBindingExportLabelKey: "export-label-hash"},
			},
			Spec:   apisv1alpha2.APIBindingSpec{Reference: apisv1alpha2.BindingReference{Export: &apisv1alpha2.ExportBindingReference{Path: KcpExportPath, Name: KcpExportName}}},
			Status: apisv1alpha2.APIBindingStatus{Phase: apisv1alpha2.APIBindingPhaseBound},
		})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(list)
}

// schemaNames are the names an APIResourceSchema gives its resource, which kcp serves in
// discovery.
type schemaNames struct {
	Plural     string   `json:"plural"`
	Singular   string   `json:"singular"`
	Kind       string   `json:"kind"`
	ListKind   string   `json:"listKind"`
	ShortNames []string `json:"shortNames"`
	Categories []string `json:"categories"`
}

// SetSchemaNames makes the harness serve the resource with the names of an
// APIResourceSchema whose spec.names is namesYAML, as if the export named it.
func (k *Kcp) SetSchemaNames(namesYAML string) error {
	var n schemaNames
	if err := yaml.UnmarshalStrict([]byte(namesYAML), &n); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.schemaNames = &n
	return nil
}

// schema returns the names of the export's APIResourceSchema: those set, those of the
// APIResourceSchema the export names in its workspace (Options.Kinds), or those of the
// generated artifacts/kcp/apiresourceschema-mounts.yaml.
func (k *Kcp) schema(ctx context.Context) (*schemaNames, error) {
	k.mu.Lock()
	set := k.schemaNames
	k.mu.Unlock()
	if set != nil {
		return set, nil
	}
	if k.kinds != nil {
		if export := k.exportWorkspace(); export != nil && export.Kube != nil {
			return k.kinds.exportedSchema(ctx, export.Kube)
		}
	}
	data, err := os.ReadFile(filepath.Join(RepoRoot(), "artifacts", "kcp", "apiresourceschema-mounts.yaml"))
	if err != nil {
		return nil, err
	}
	var ars struct {
		Spec struct {
			Names schemaNames `json:"names"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &ars); err != nil {
		return nil, err
	}
	return &ars.Spec.Names, nil
}

var kubeCodecs = func() serializer.CodecFactory {
	scheme := runtime.NewScheme()
	_ = authorizationv1.AddToScheme(scheme)
	return serializer.NewCodecFactory(scheme)
}()

// decodeKube decodes a request body of a Kubernetes client (JSON or protobuf) into into.
func decodeKube(body []byte, contentType string, into runtime.Object) error {
	if strings.Contains(contentType, "json") || bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")) {
		return json.Unmarshal(body, into)
	}
	_, _, err := kubeCodecs.UniversalDeserializer().Decode(body, nil, into)
	return err
}
