package options

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	netutils "k8s.io/utils/net"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/apiserver"
)

// Defaults of the standalone mode.
const (
	DefaultRootDirectory = ".mount-apiserver"
	DefaultSecurePort    = 6443
	DefaultEtcdPrefix    = "/mount-apiserver"

	// AdminKubeconfigFile is written below the root directory in standalone mode.
	AdminKubeconfigFile = "admin.kubeconfig"
	pkiDir              = "pki"
	etcdDir             = "etcd"
)

// Options are the command-line options of mount-apiserver.
type Options struct {
	// RootDirectory holds the embedded etcd's data, the generated PKI and the admin kubeconfig.
	RootDirectory string
	// EmbeddedEtcdQuotaBackendBytes limits the embedded etcd's size; 0 takes etcd's default.
	EmbeddedEtcdQuotaBackendBytes int64

	ServerRun     *genericoptions.ServerRunOptions
	SecureServing *genericoptions.SecureServingOptionsWithLoopback
	Etcd          *genericoptions.EtcdOptions
	Audit         *genericoptions.AuditOptions
	Features      *genericoptions.FeatureOptions
	Logs          *logs.Options
}

// NewOptions returns the options of the standalone default: embedded etcd in
// .mount-apiserver, serving on 127.0.0.1:6443.
func NewOptions() *Options {
	o := &Options{
		RootDirectory: DefaultRootDirectory,
		ServerRun:     genericoptions.NewServerRunOptions(),
		SecureServing: genericoptions.NewSecureServingOptions().WithLoopback(),
		Etcd: genericoptions.NewEtcdOptions(storagebackend.NewDefaultConfig(DefaultEtcdPrefix,
			apiserver.Codecs.LegacyCodec(v1alpha1.SchemeGroupVersion))),
		Audit:    genericoptions.NewAuditOptions(),
		Features: genericoptions.NewFeatureOptions(),
		Logs:     logs.NewOptions(),
	}
	o.SecureServing.BindAddress = netutils.ParseIPSloppy("127.0.0.1")
	o.SecureServing.BindPort = DefaultSecurePort
	o.SecureServing.ServerCert.PairName = "serving"
	// Priority and fairness keeps its configuration in a Kubernetes API, which standalone
	// mode does not have; max-in-flight limits protect the server instead.
	o.Features.EnablePriorityAndFairness = false
	o.Etcd.StorageConfig.Transport.ServerList = nil
	return o
}

// Flags returns the options as named flag sets, for grouped --help output.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	fs := fss.FlagSet("mount-apiserver")
	fs.StringVar(&o.RootDirectory, "root-directory", o.RootDirectory,
		"Directory for the embedded etcd's data, the generated certificates and admin.kubeconfig. Relative paths are resolved against the working directory.")
	fs.Int64Var(&o.EmbeddedEtcdQuotaBackendBytes, "embedded-etcd-quota-backend-bytes", o.EmbeddedEtcdQuotaBackendBytes,
		"Size limit of the embedded etcd's database in bytes; 0 takes etcd's default (2 GiB). Ignored with --etcd-servers.")
	o.ServerRun.AddUniversalFlags(fss.FlagSet("generic"))
	o.SecureServing.AddFlags(fss.FlagSet("secure serving"))
	o.Etcd.AddFlags(fss.FlagSet("etcd"))
	o.Audit.AddFlags(fss.FlagSet("auditing"))
	o.Features.AddFlags(fss.FlagSet("features"))
	logsapi.AddFlags(o.Logs, fss.FlagSet("logs"))
	return fss
}

type completedOptions struct {
	*Options
	// EmbeddedEtcd is true when no --etcd-servers were given.
	EmbeddedEtcd bool
	// GenerateCerts is true when no --tls-cert-file was given: the server makes its own PKI.
	GenerateCerts bool
}

// CompletedOptions are options with defaults derived; only they can be validated and turned
// into a Config.
type CompletedOptions struct {
	*completedOptions
}

// Complete derives the paths below the root directory and the storage mode.
func (o *Options) Complete() (CompletedOptions, error) {
	root, err := filepath.Abs(o.RootDirectory)
	if err != nil {
		return CompletedOptions{}, fmt.Errorf("resolving --root-directory %q: %w", o.RootDirectory, err)
	}
	o.RootDirectory = root
	// Fix the effective version and feature gates now that flags are parsed.
	if err := o.ServerRun.ComponentGlobalsRegistry.Set(); err != nil {
		return CompletedOptions{}, fmt.Errorf("applying version and feature gate flags: %w", err)
	}
	if o.SecureServing.ServerCert.CertDirectory == "" || o.SecureServing.ServerCert.CertDirectory == genericoptions.NewSecureServingOptions().ServerCert.CertDirectory {
		o.SecureServing.ServerCert.CertDirectory = filepath.Join(root, pkiDir)
	}
	return CompletedOptions{&completedOptions{
		Options:       o,
		EmbeddedEtcd:  len(o.Etcd.StorageConfig.Transport.ServerList) == 0,
		GenerateCerts: o.SecureServing.ServerCert.CertKey.CertFile == "",
	}}, nil
}

// Validate checks the options; all problems are reported at once.
func (o CompletedOptions) Validate() error {
	var errs []error
	if o.RootDirectory == "" {
		errs = append(errs, errors.New("--root-directory must not be empty"))
	}
	if o.EmbeddedEtcdQuotaBackendBytes < 0 {
		errs = append(errs, errors.New("--embedded-etcd-quota-backend-bytes must not be negative"))
	}
	if o.SecureServing.BindPort == 0 && o.SecureServing.Listener == nil {
		errs = append(errs, errors.New("--secure-port must be between 1 and 65535"))
	}
	errs = append(errs, o.ServerRun.Validate()...)
	errs = append(errs, o.SecureServing.Validate()...)
	errs = append(errs, o.etcdValidate()...)
	errs = append(errs, o.Audit.Validate()...)
	errs = append(errs, o.Features.Validate()...)
	// Logging is process-wide; the command applies it once, Validate only checks it.
	errs = append(errs, logsapi.Validate(o.Logs, nil, nil).ToAggregate())
	return utilerrors.NewAggregate(errs)
}

// etcdValidate validates the etcd options; the embedded server's URL is known only once it
// listens, so in embedded mode the check for --etcd-servers is done on a stand-in.
func (o CompletedOptions) etcdValidate() []error {
	if !o.EmbeddedEtcd {
		return o.Etcd.Validate()
	}
	etcd := *o.Etcd
	etcd.StorageConfig.Transport.ServerList = []string{"http://127.0.0.1:2379"}
	return etcd.Validate()
}

// servingHosts returns the names and addresses the generated serving certificate covers.
func (o CompletedOptions) servingHosts() ([]string, []net.IP) {
	hosts := []string{"localhost"}
	ips := []net.IP{netutils.ParseIPSloppy("127.0.0.1"), net.IPv6loopback}
	if bind := o.SecureServing.BindAddress; bind != nil && !bind.IsUnspecified() && !bind.IsLoopback() {
		ips = append(ips, bind)
	}
	return hosts, ips
}

// embeddedEtcdStartTimeout bounds the wait for a fresh or recovering embedded etcd.
const embeddedEtcdStartTimeout = time.Minute
