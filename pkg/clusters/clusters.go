package clusters

import "context"

// Name is a logical cluster name.
type Name string

const (
	// DefaultCluster holds every Mount outside kcp mode. The underscore keeps it apart from
	// kcp's logical cluster names, which never contain one.
	DefaultCluster Name = "_default"
	// Wildcard names all clusters, for list and watch across clusters in kcp mode.
	Wildcard Name = "*"
)

type contextKey struct{}

// WithCluster returns a context that carries cluster.
func WithCluster(ctx context.Context, cluster Name) context.Context {
	return context.WithValue(ctx, contextKey{}, cluster)
}

// From returns the cluster of ctx, DefaultCluster when none was set.
func From(ctx context.Context) Name {
	if c, ok := ctx.Value(contextKey{}).(Name); ok && c != "" {
		return c
	}
	return DefaultCluster
}
