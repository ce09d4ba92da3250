package options

import (
	"errors"
	"time"

	"github.com/spf13/pflag"
)

// KcpOptions say how the server meets kcp in kcp mode (--kcp-mode). See README, "Run it with kcp".
type KcpOptions struct {
	// ShardClientCAFile is the CA of the client certificate kcp's shards forward requests with
	// (kcp's --shard-client-cert-file).
	ShardClientCAFile string
	// ShardClientNames are the common names a shard's certificate may have; empty allows any
	// certificate of the CA.
	ShardClientNames []string
	// FrontProxyClientCAFile is the CA of the requestheader client certificate the kcp
	// front-proxy calls a mounted workspace's status.URL with, sending X-Remote-*.
	FrontProxyClientCAFile string
	// FrontProxyClientNames are the common names the front-proxy's certificate may have.
	FrontProxyClientNames []string
	// Kubeconfig holds the provider's credentials for kcp; its server is kcp's base URL
	// (front-proxy), without /clusters/. Used to resolve workspaces, to proxy Workspace mounts
	// and for access reviews in workspaces.
	Kubeconfig string
	// APIExportURL is the APIExport's virtual workspace URL
	// (https://<shard>/services/apiexport/<export-cluster>/<export-name>). Secrets of URL
	// mounts are read through it (permission claim), and APIBindings of the export.
	APIExportURL string
	// PathPrefix is a path under which the whole server is also served, e.g. /services/mounts
	// for a kcp front-proxy mapping, which forwards the full original path.
	PathPrefix string
	// UnboundGCInterval is how often the Mounts of logical clusters that no longer bind the
	// APIExport are looked for (and, seen twice in a row, deleted); 0 disables it. It runs
	// only with APIExportURL.
	UnboundGCInterval time.Duration
}

// NewKcpOptions returns the defaults of the kcp options.
func NewKcpOptions() KcpOptions {
	return KcpOptions{UnboundGCInterval: time.Minute}
}

// Validate checks the kcp options.
func (o KcpOptions) Validate() []error {
	var errs []error
	if o.UnboundGCInterval < 0 {
		errs = append(errs, errors.New("--kcp-unbound-gc-interval must not be negative"))
	}
	if o.APIExportURL != "" && o.Kubeconfig == "" {
		errs = append(errs, errors.New("--kcp-apiexport-url is reached with the credentials of --kcp-kubeconfig: set it"))
	}
	return errs
}

// AddFlags adds the kcp flags to fs.
func (o *KcpOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.ShardClientCAFile, "kcp-shard-client-ca-file", o.ShardClientCAFile,
		"kcp mode: CA of the client certificate kcp shards forward APIExport requests with (kcp's --shard-client-cert-file). Requests with such a certificate were authorized by kcp; their X-Remote-* headers (kcp main) name the caller.")
	fs.StringSliceVar(&o.ShardClientNames, "kcp-shard-client-names", o.ShardClientNames,
		"kcp mode: common names allowed for the shard client certificate; empty allows any certificate of --kcp-shard-client-ca-file.")
	fs.StringVar(&o.FrontProxyClientCAFile, "kcp-front-proxy-client-ca-file", o.FrontProxyClientCAFile,
		"kcp mode: CA of the requestheader client certificate the kcp front-proxy calls a mounted workspace's URL with; X-Remote-User, X-Remote-Group and X-Remote-Extra-* then name the caller.")
	fs.StringSliceVar(&o.FrontProxyClientNames, "kcp-front-proxy-client-names", o.FrontProxyClientNames,
		"kcp mode: common names allowed for the front-proxy's certificate; empty allows any certificate of --kcp-front-proxy-client-ca-file.")
	fs.StringVar(&o.Kubeconfig, "kcp-kubeconfig", o.Kubeconfig,
		"kcp mode: kubeconfig of the provider's identity in kcp; its server is kcp's base URL (the front-proxy), without /clusters/. Resolves Workspace and Redirect mounts, proxies Workspace mounts and reviews access in workspaces.")
	fs.StringVar(&o.APIExportURL, "kcp-apiexport-url", o.APIExportURL,
		"kcp mode: URL of the APIExport's virtual workspace (https://<shard>/services/apiexport/<cluster>/<export>), reached with --kcp-kubeconfig's credentials: URL mounts' Secrets are read through its permission claim, and the export's APIBindings say which logical clusters still bind it.")
	fs.DurationVar(&o.UnboundGCInterval, "kcp-unbound-gc-interval", o.UnboundGCInterval,
		"kcp mode: how often to delete the Mounts of logical clusters that no longer bind the APIExport (kcp runs no garbage collection for them). A cluster's Mounts go after two consecutive listings of --kcp-apiexport-url's APIBindings found it unbound; a failed listing deletes nothing. 0 disables it; it runs only with --kcp-apiexport-url.")
	fs.StringVar(&o.PathPrefix, "path-prefix", o.PathPrefix,
		"Also serve everything under this path (e.g. /services/mounts for a kcp front-proxy mapping, which forwards the full original path).")
}
