package apiserver

import (
	"context"
	"net/http"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/peers"
)

// TunnelPeersConfig lets replicas that share a host reach tunnel sessions held by each other.
// A standalone server has none: only its own sessions exist.
type TunnelPeersConfig struct {
	// Owners records the sessions held here and finds those held elsewhere.
	Owners *peers.Owners
	// Relay serves other replicas' hops into the sessions held here.
	Relay *peers.Relay
	// Hop reaches other replicas; nil when no CA to verify them is known.
	Hop *peers.Hop
}

// withTunnelRelay serves peers.RelayPath in front of the handler chain that build makes (see
// peers.Relay for why); relayed connections end once the server has drained its requests.
func withTunnelRelay(relay *peers.Relay, build func(http.Handler, *genericapiserver.Config) http.Handler) func(http.Handler, *genericapiserver.Config) http.Handler {
	return func(apiHandler http.Handler, c *genericapiserver.Config) http.Handler {
		ctx, cancel := context.WithCancel(context.Background())
		drained := c.DrainedNotify()
		go func() {
			<-drained
			cancel()
		}()
		return relay.Serve(ctx, build(apiHandler, c))
	}
}

// startTunnelPeers watches the ownership Leases and learns the identity the replicas share
// (this replica's, as the host authenticates it), the only one whose hops the relay accepts.
func startTunnelPeers(cfg *TunnelPeersConfig, host kubernetes.Interface) genericapiserver.PostStartHookFunc {
	return func(hookCtx genericapiserver.PostStartHookContext) error {
		ctx := klog.NewContext(hookCtx, klog.FromContext(hookCtx).WithName("tunnel-peers"))
		go cfg.Owners.Run(ctx)
		go learnPeerIdentity(ctx, host, cfg.Relay)
		return nil
	}
}

// learnPeerIdentity asks the host who this replica is, retrying until it answers.
func learnPeerIdentity(ctx context.Context, host kubernetes.Interface, relay *peers.Relay) {
	logger := klog.FromContext(ctx)
	_ = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		review, err := host.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			logger.Error(err, "Cannot learn this replica's identity from the host; other replicas cannot reach tunnel sessions held here yet")
			return false, nil
		}
		name := review.Status.UserInfo.Username
		if name == "" {
			logger.Error(nil, "The host names no user for this replica's credentials; other replicas cannot reach tunnel sessions held here")
			return true, nil
		}
		relay.SetPeerIdentity(name)
		logger.Info("Accepting hops of other replicas into tunnel sessions held here", "user", name)
		return true, nil
	})
}
