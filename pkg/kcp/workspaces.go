package kcp

import (
	"context"

	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
)

// Workspace is what a Workspace or Redirect mount needs of its target workspace.
type Workspace struct {
	// Path is the workspace path as spec.ref.name gives it, e.g. root:org:team.
	Path string
	// Cluster is its logical cluster.
	Cluster clusters.Name
	// URL is the workspace's URL as kcp publishes it (Workspace spec.URL),
	// e.g. https://<front-proxy>/clusters/root:org:team.
	URL string
	// Ready is true when the workspace is ready to serve.
	Ready bool
	// Message says why it is not ready.
	Message string
}

// WorkspaceResolver resolves workspace paths through kcp. A workspace that does not exist is
// an apierrors NotFound (Forbidden when kcp hides it from the resolver's identity), a path
// that is not a workspace path a BadRequest. KcpWorkspaceResolver implements it.
type WorkspaceResolver interface {
	ResolveWorkspace(ctx context.Context, path string) (Workspace, error)
}

// BindingSource says which logical clusters bind the APIExport.
type BindingSource interface {
	// BoundClusters returns the logical clusters with an APIBinding to the export.
	BoundClusters(ctx context.Context) (map[clusters.Name]bool, error)
}
