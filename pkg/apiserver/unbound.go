package apiserver

import (
	"time"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	componentbaseconfig "k8s.io/component-base/config"

	"github.com/kcp-dev/mount-apiserver/pkg/controller/unbound"
	"github.com/kcp-dev/mount-apiserver/pkg/kcp"
)

// UnboundGCConfig configures the collector of Mounts of logical clusters that no longer bind
// the APIExport.
type UnboundGCConfig struct {
	// Bindings says which clusters bind the export; nil disables the collector.
	Bindings kcp.BindingSource
	// Interval between rounds; 0 disables the collector.
	Interval time.Duration
	// LeaderElection elects one replica to collect, with a host cluster; the Lease is the
	// status controller's name with the suffix -unbound-gc.
	LeaderElection componentbaseconfig.LeaderElectionConfiguration
}

// startUnboundGC is the post-start hook that runs the collector on the server's own API
// through the loopback client (whose user logical clusters let in). host, if not nil, holds
// the Lease.
func startUnboundGC(cfg UnboundGCConfig, host kubernetes.Interface) genericapiserver.PostStartHookFunc {
	return func(hookCtx genericapiserver.PostStartHookContext) error {
		mounts, err := unbound.NewLoopbackMounts(hookCtx.LoopbackClientConfig)
		if err != nil {
			return err
		}
		ctrl := unbound.New(cfg.Bindings, mounts, cfg.Interval)
		if host == nil || !cfg.LeaderElection.LeaderElect {
			go ctrl.Run(hookCtx)
			return nil
		}
		le := cfg.LeaderElection
		le.ResourceName += "-unbound-gc"
		go runElected(hookCtx, host, le, unbound.ControllerName, ctrl.Run)
		return nil
	}
}
