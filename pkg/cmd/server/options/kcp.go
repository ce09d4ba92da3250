package options

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	authenticatorunion "k8s.io/apiserver/pkg/authentication/request/union"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/authorization"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	"github.com/kcp-dev/mount-apiserver/pkg/kcp"
)

// KcpOptions say how the server meets kcp in kcp mode (--kcp-mode). See docs/kcp-mode.md and docs/kcp.md.
type KcpOptions struct {
	// ShardClientCAFile is the CA of the client certificate kcp's shards forward requests with
	// (kcp's --shard-client-cert-file).
	ShardClientCAFile string
	// ShardClientNames are the common names a shard's certificate may have; required with
	// ShardClientCAFile (a CA's every certificate is too many to believe X-Remote-* from).
	ShardClientNames []string
	// FrontProxyClientCAFile is the CA of the requestheader client certificate the kcp
	// front-proxy calls a mounted workspace's status.URL with, sending X-Remote-*.
	FrontProxyClientCAFile string
	// FrontProxyClientNames are the common names the front-proxy's certificate may have;
	// required with FrontProxyClientCAFile.
	FrontProxyClientNames []string
	// PrivilegedGroups are never accepted through X-Remote-Group, besides
	// kcp.AlwaysPrivilegedGroups: a forwarder that passes headers it did not set must not
	// make anyone an administrator here.
	PrivilegedGroups []string
	// Kubeconfig holds the provider's credentials for kcp; its server is kcp's base URL
	// (front-proxy), without /clusters/. Used to resolve workspaces, to proxy Workspace mounts
	// and for access reviews in workspaces.
	Kubeconfig string
	// APIExportURL is the APIExport's virtual workspace URL
	// (https://<shard>/services/apiexport/<export-cluster>/<export-name>). Secrets of URL
	// mounts are read through it (permission claim), and APIBindings of the export.
	APIExportURL string
	// APIExportCAFile verifies APIExportURL (a shard's virtual workspace, often behind
	// another CA than Kubeconfig's server); empty takes Kubeconfig's CA.
	APIExportCAFile string
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

// AddFlags adds the kcp flags to fs.
func (o *KcpOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.ShardClientCAFile, "kcp-shard-client-ca-file", o.ShardClientCAFile,
		"kcp mode: CA of the client certificate kcp shards forward APIExport requests with (kcp's --shard-client-cert-file). Requests with such a certificate were authorized by kcp; their X-Remote-* headers (kcp main) name the caller.")
	fs.StringSliceVar(&o.ShardClientNames, "kcp-shard-client-names", o.ShardClientNames,
		"kcp mode: common names allowed for the shard client certificate; required with --kcp-shard-client-ca-file.")
	fs.StringVar(&o.FrontProxyClientCAFile, "kcp-front-proxy-client-ca-file", o.FrontProxyClientCAFile,
		"kcp mode: CA of the requestheader client certificate the kcp front-proxy calls a mounted workspace's URL with; X-Remote-User, X-Remote-Group and X-Remote-Extra-* then name the caller.")
	fs.StringSliceVar(&o.FrontProxyClientNames, "kcp-front-proxy-client-names", o.FrontProxyClientNames,
		"kcp mode: common names allowed for the front-proxy's certificate; required with --kcp-front-proxy-client-ca-file. Name only a certificate that kcp presents for requests it authenticated itself (docs/kcp.md says which one, per kcp version).")
	fs.StringSliceVar(&o.PrivilegedGroups, "kcp-privileged-groups", o.PrivilegedGroups,
		"kcp mode: groups never accepted through X-Remote-Group (of the shard or the front-proxy), besides "+strings.Join(kcp.AlwaysPrivilegedGroups, " and ")+", which never are: an identity naming one is served without it.")
	fs.StringVar(&o.Kubeconfig, "kcp-kubeconfig", o.Kubeconfig,
		"kcp mode: kubeconfig of the provider's identity in kcp; its server is kcp's base URL (the front-proxy), without /clusters/. Resolves Workspace and Redirect mounts, proxies Workspace mounts and reviews access in workspaces.")
	fs.StringVar(&o.APIExportURL, "kcp-apiexport-url", o.APIExportURL,
		"kcp mode: URL of the APIExport's virtual workspace (https://<shard>/services/apiexport/<cluster>/<export>), reached with --kcp-kubeconfig's credentials: URL mounts' Secrets are read through its permission claim, and the export's APIBindings say which logical clusters still bind it.")
	fs.StringVar(&o.APIExportCAFile, "kcp-apiexport-ca-file", o.APIExportCAFile,
		"kcp mode: CA that verifies --kcp-apiexport-url (a shard's virtual workspace); empty takes the CA of --kcp-kubeconfig's server.")
	fs.DurationVar(&o.UnboundGCInterval, "kcp-unbound-gc-interval", o.UnboundGCInterval,
		"kcp mode: how often to delete the Mounts of logical clusters that no longer bind the APIExport (kcp runs no garbage collection for them). A cluster's Mounts go after two consecutive listings of --kcp-apiexport-url's APIBindings found it unbound; a failed listing deletes nothing. 0 disables it; it runs only with --kcp-apiexport-url.")
	fs.StringVar(&o.PathPrefix, "path-prefix", o.PathPrefix,
		"Also serve everything under this path (e.g. /services/mounts for a kcp front-proxy mapping, which forwards the full original path).")
}

// Validate checks the kcp options.
func (o *KcpOptions) Validate(kcpMode bool) []error {
	var errs []error
	if o.UnboundGCInterval < 0 {
		errs = append(errs, errors.New("--kcp-unbound-gc-interval must not be negative"))
	}
	set := o.ShardClientCAFile != "" || o.FrontProxyClientCAFile != "" || o.Kubeconfig != "" || o.APIExportURL != "" || len(o.PrivilegedGroups) > 0
	if set && !kcpMode {
		errs = append(errs, errors.New("--kcp-shard-client-ca-file, --kcp-front-proxy-client-ca-file, --kcp-kubeconfig, --kcp-apiexport-url and --kcp-privileged-groups need --kcp-mode"))
	}
	if len(o.ShardClientNames) > 0 && o.ShardClientCAFile == "" {
		errs = append(errs, errors.New("--kcp-shard-client-names needs --kcp-shard-client-ca-file"))
	}
	if len(o.FrontProxyClientNames) > 0 && o.FrontProxyClientCAFile == "" {
		errs = append(errs, errors.New("--kcp-front-proxy-client-names needs --kcp-front-proxy-client-ca-file"))
	}
	// Every certificate of a CA would be believed about whom it forwards (X-Remote-*): name
	// the ones of kcp's components that authenticated the caller themselves.
	if o.ShardClientCAFile != "" && len(o.ShardClientNames) == 0 {
		errs = append(errs, errors.New("--kcp-shard-client-ca-file needs --kcp-shard-client-names: the common names of kcp's shard client certificates (kcp's --shard-client-cert-file)"))
	}
	if o.FrontProxyClientCAFile != "" && len(o.FrontProxyClientNames) == 0 {
		errs = append(errs, errors.New("--kcp-front-proxy-client-ca-file needs --kcp-front-proxy-client-names: the common names of the certificates kcp's front-proxy presents for requests it authenticated itself"))
	}
	if o.APIExportCAFile != "" && o.APIExportURL == "" {
		errs = append(errs, errors.New("--kcp-apiexport-ca-file needs --kcp-apiexport-url"))
	}
	if o.APIExportURL != "" {
		if u, err := url.Parse(o.APIExportURL); err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.User != nil || strings.Contains(u.Path, "/clusters/") {
			errs = append(errs, fmt.Errorf("--kcp-apiexport-url %q must be an https URL of the APIExport's virtual workspace, without /clusters/, query or credentials", o.APIExportURL))
		}
		if o.Kubeconfig == "" {
			errs = append(errs, errors.New("--kcp-apiexport-url needs --kcp-kubeconfig for the credentials to reach it"))
		}
	}
	if p := o.PathPrefix; p != "" && (!strings.HasPrefix(p, "/") || strings.Contains(p, "..") || strings.ContainsAny(p, "?#%") || p == "/") {
		errs = append(errs, fmt.Errorf("--path-prefix %q must be an absolute path such as /services/mounts", p))
	}
	return errs
}

// applyKcp makes the server meet kcp: the shard's and the front-proxy's certificates
// authenticate, logical clusters are authorized by kcp, and URL mounts' Secrets in logical
// clusters come from the consumer workspaces through the APIExport's virtual workspace. It
// returns the clients of Secrets per cluster and the authorizer of Secret access, extended
// from the given ones of the default cluster.
func (o CompletedOptions) applyKcp(generic *genericapiserver.Config, secrets kubernetes.Interface, secretsAuthz authorizer.Authorizer) (func(clusters.Name) (kubernetes.Interface, error), authorizer.Authorizer, error) {
	defaultOnly := func(cluster clusters.Name) (kubernetes.Interface, error) {
		if cluster != clusters.DefaultCluster {
			return nil, fmt.Errorf("Secrets of logical clusters are read through the APIExport's virtual workspace, and this server has no --kcp-apiexport-url")
		}
		return secrets, nil
	}
	if !o.KcpMode {
		return defaultOnly, secretsAuthz, nil
	}
	k := o.Kcp
	var authenticators []authenticator.Request
	var cas []dynamiccertificates.CAContentProvider
	for _, c := range []struct {
		file, purpose string
		names         []string
		build         func(x509request.VerifyOptionFunc, headerrequest.StringSliceProvider, []string) authenticator.Request
	}{
		{k.ShardClientCAFile, "kcp-shard-client-ca", k.ShardClientNames, kcp.ShardAuthenticator},
		{k.FrontProxyClientCAFile, "kcp-front-proxy-client-ca", k.FrontProxyClientNames, kcp.FrontProxyAuthenticator},
	} {
		if c.file == "" {
			continue
		}
		pem, err := os.ReadFile(c.file)
		if err != nil {
			return nil, nil, fmt.Errorf("reading %s: %w", c.file, err)
		}
		ca, err := dynamiccertificates.NewStaticCAContent(c.purpose, pem)
		if err != nil {
			return nil, nil, fmt.Errorf("loading %s: %w", c.file, err)
		}
		cas = append(cas, ca)
		authenticators = append(authenticators, c.build(ca.VerifyOptions, headerrequest.StaticStringSlice(c.names), k.PrivilegedGroups))
	}
	if generic.SecureServing.ClientCA != nil {
		cas = append(cas, generic.SecureServing.ClientCA)
	}
	if len(cas) > 0 {
		generic.SecureServing.ClientCA = dynamiccertificates.NewUnionCAContentProvider(cas...)
	}
	if generic.Authentication.Authenticator != nil {
		authenticators = append(authenticators, kcp.NotAuthorizedByKcp(generic.Authentication.Authenticator))
	}
	generic.Authentication.Authenticator = authenticatorunion.New(authenticators...)

	authz := kcp.ClusterAuthorizer{
		Delegate:    generic.Authorization.Authorizer,
		AdminGroups: []string{user.SystemPrivilegedGroup, authorization.AdminsGroup},
	}
	var kcpConfig *rest.Config
	if k.Kubeconfig != "" {
		var err error
		if kcpConfig, err = o.kcpConfig(); err != nil {
			return nil, nil, err
		}
		kcpClients, err := kcp.NewClusterClients(kcpConfig)
		if err != nil {
			return nil, nil, fmt.Errorf("--kcp-kubeconfig: %w", err)
		}
		authz.Reviews = kcp.NewWorkspaceReviews(kcpClients)
	}
	generic.Authorization.Authorizer = authz
	clusterSecretsAuthz := kcp.ByCluster{Default: secretsAuthz}
	if authz.Reviews != nil {
		clusterSecretsAuthz.Clusters = authz.Reviews
	}

	if k.APIExportURL == "" {
		return defaultOnly, clusterSecretsAuthz, nil
	}
	vw, err := o.apiExportConfig(kcpConfig)
	if err != nil {
		return nil, nil, err
	}
	vwClients, err := kcp.NewClusterClients(vw)
	if err != nil {
		return nil, nil, fmt.Errorf("--kcp-apiexport-url: %w", err)
	}
	return func(cluster clusters.Name) (kubernetes.Interface, error) {
		if cluster == clusters.DefaultCluster {
			return secrets, nil
		}
		return vwClients.Client(cluster)
	}, clusterSecretsAuthz, nil
}

// apiExportConfig is the client configuration of --kcp-apiexport-url: --kcp-kubeconfig's
// credentials, verified with --kcp-apiexport-ca-file when set.
func (o CompletedOptions) apiExportConfig(kcpConfig *rest.Config) (*rest.Config, error) {
	vw := rest.CopyConfig(kcpConfig)
	vw.Host = strings.TrimSuffix(o.Kcp.APIExportURL, "/")
	if file := o.Kcp.APIExportCAFile; file != "" {
		if _, err := os.ReadFile(file); err != nil {
			return nil, fmt.Errorf("--kcp-apiexport-ca-file: %w", err)
		}
		vw.CAFile, vw.CAData = file, nil
		vw.Insecure = false
	}
	return vw, nil
}
