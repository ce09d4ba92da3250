package kcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
)

// APIExportBindings is a BindingSource over kcp: it lists the APIBindings of the export
// through the APIExport's virtual workspace, across all logical clusters.
//
// kcp's APIExport virtual workspace (pkg/virtual/apiexport) serves apibindings read-only in
// every export's view, filtered by kcp to the bindings of that export (label
// internal.apis.kcp.io/export), in apis.kcp.io/v1alpha2 and v1alpha1 (kcp before v1alpha2
// served v1alpha1 only). This source reads v1alpha2, the version of kcp v0.32.
type APIExportBindings struct {
	client *http.Client
	// list is <APIExport URL>/clusters/*/apis/apis.kcp.io/v1alpha2/apibindings.
	list *url.URL
	// export is the export's name, the last segment of its virtual workspace URL.
	export string
	// PageSize bounds the bindings of one list response.
	PageSize int
	// Timeout bounds each page's request.
	Timeout time.Duration
}

var _ BindingSource = &APIExportBindings{}

// NewAPIExportBindings returns the source of the export whose virtual workspace is at
// apiExportURL (https://<shard>/services/apiexport/<cluster>/<export>), reached with the
// credentials of cfg (--kcp-kubeconfig); cfg's host is not used.
func NewAPIExportBindings(cfg *rest.Config, apiExportURL string) (*APIExportBindings, error) {
	u, err := url.Parse(apiExportURL)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" {
		return nil, fmt.Errorf("APIExport URL %q must be an absolute https URL without query", apiExportURL)
	}
	base := strings.TrimSuffix(u.Path, "/")
	export := base[strings.LastIndex(base, "/")+1:]
	if export == "" {
		return nil, fmt.Errorf("APIExport URL %q does not end in the export's name", apiExportURL)
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the client of the APIExport's virtual workspace: %w", err)
	}
	list := *u
	list.Path = base + "/clusters/" + string(clusters.Wildcard) + "/apis/" + apisv1alpha2.SchemeGroupVersion.Group + "/" + apisv1alpha2.SchemeGroupVersion.Version + "/apibindings"
	return &APIExportBindings{client: client, list: &list, export: export, PageSize: 500, Timeout: 30 * time.Second}, nil
}

// BoundClusters returns the logical clusters with a binding to the export that is not being
// deleted. Any failure, of any page, fails the whole listing: a partial one would make bound
// clusters look unbound.
func (b *APIExportBindings) BoundClusters(ctx context.Context) (map[clusters.Name]bool, error) {
	bound := map[clusters.Name]bool{}
	continueToken := ""
	for {
		list, err := b.page(ctx, continueToken)
		if err != nil {
			return nil, err
		}
		for i := range list.Items {
			binding := &list.Items[i]
			cluster := ClusterOf(binding)
			if cluster == clusters.DefaultCluster {
				return nil, fmt.Errorf("APIBinding %q carries no %s annotation; the listing is not one of kcp's", binding.Name, ClusterAnnotation)
			}
			if Binds(binding, b.export) {
				bound[cluster] = true
			}
		}
		if continueToken = list.Continue; continueToken == "" {
			return bound, nil
		}
	}
}

// Binds reports whether binding binds the export of that name and is not being deleted.
func Binds(binding *apisv1alpha2.APIBinding, export string) bool {
	ref := binding.Spec.Reference.Export
	return ref != nil && ref.Name == export && binding.DeletionTimestamp == nil
}

// maxListBytes bounds one page of the listing (500 bindings are well below 10 MB).
const maxListBytes = 64 << 20

func (b *APIExportBindings) page(ctx context.Context, continueToken string) (*apisv1alpha2.APIBindingList, error) {
	ctx, cancel := context.WithTimeout(ctx, b.Timeout)
	defer cancel()
	u := *b.list
	q := url.Values{}
	if b.PageSize > 0 {
		q.Set("limit", fmt.Sprint(b.PageSize))
	}
	if continueToken != "" {
		q.Set("continue", continueToken)
	}
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := b.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("listing APIBindings at %s: %w", b.list.Redacted(), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxListBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading APIBindings from %s: %w", b.list.Redacted(), err)
	}
	if len(body) > maxListBytes {
		return nil, fmt.Errorf("APIBindings from %s: a page of more than %d bytes", b.list.Redacted(), maxListBytes)
	}
	if resp.StatusCode != http.StatusOK {
		status := &metav1.Status{}
		if json.Unmarshal(body, status) == nil && status.Kind == "Status" {
			return nil, fmt.Errorf("listing APIBindings at %s: %w", b.list.Redacted(), &apierrors.StatusError{ErrStatus: *status})
		}
		return nil, fmt.Errorf("listing APIBindings at %s: %s", b.list.Redacted(), resp.Status)
	}
	list := &apisv1alpha2.APIBindingList{}
	if err := json.Unmarshal(body, list); err != nil {
		return nil, fmt.Errorf("decoding APIBindings from %s: %w", b.list.Redacted(), err)
	}
	if list.Kind != "APIBindingList" || list.APIVersion != apisv1alpha2.SchemeGroupVersion.String() {
		return nil, errors.New("the answer of " + b.list.Redacted() + " is no apis.kcp.io/v1alpha2 APIBindingList")
	}
	return list, nil
}
