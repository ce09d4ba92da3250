package kcp

import (
	"fmt"
	"strings"
	"sync"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/lru"

	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
)

// maxClusterClients bounds the clients kept for logical clusters; one more is cheap to build
// (client-go shares the TLS transport of equal configurations).
const maxClusterClients = 1024

// ClusterClients builds clients of one logical cluster at a time below a base URL: kcp's
// front-proxy (https://kcp/clusters/<lc>) or an APIExport's virtual workspace
// (https://shard/services/apiexport/<ws>/<export>/clusters/<lc>).
type ClusterClients struct {
	base *rest.Config
	mu   sync.Mutex
	lru  *lru.Cache
}

// NewClusterClients returns clients below base, whose Host carries no /clusters/.
func NewClusterClients(base *rest.Config) (*ClusterClients, error) {
	if strings.Contains(base.Host, "/clusters/") {
		return nil, fmt.Errorf("server %q names a logical cluster; give kcp's base URL, without /clusters/", base.Host)
	}
	return &ClusterClients{base: base, lru: lru.New(maxClusterClients)}, nil
}

// Config returns the client configuration of cluster.
func (c *ClusterClients) Config(cluster clusters.Name) *rest.Config {
	cfg := rest.CopyConfig(c.base)
	cfg.Host = strings.TrimSuffix(cfg.Host, "/") + "/clusters/" + string(cluster)
	return cfg
}

// Client returns the clientset of cluster.
func (c *ClusterClients) Client(cluster clusters.Name) (kubernetes.Interface, error) {
	if cluster == "" || cluster == clusters.DefaultCluster {
		return nil, fmt.Errorf("no logical cluster")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if client, ok := c.lru.Get(cluster); ok {
		return client.(kubernetes.Interface), nil
	}
	client, err := kubernetes.NewForConfig(c.Config(cluster))
	if err != nil {
		return nil, fmt.Errorf("client of logical cluster %s: %w", cluster, err)
	}
	c.lru.Add(cluster, client)
	return client, nil
}
