package options

import (
	"errors"
	"fmt"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	genericapiserver "k8s.io/apiserver/pkg/server"
	webhooktoken "k8s.io/apiserver/plugin/pkg/authenticator/token/webhook"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcp-dev/mount-apiserver/pkg/authentication"
)

// reviewTokensWithoutBodies makes the delegated chain's bearer tokens be reviewed by a
// reviewer of this server's (authentication.TokensWithoutBodies), so that no TokenReview, with
// the caller's token in its body, reaches the log at any verbosity. The reviewer's client is
// the one the generic options review with: --authentication-kubeconfig, or the pod's service
// account.
func (o CompletedOptions) reviewTokensWithoutBodies(auth *genericapiserver.AuthenticationInfo) error {
	if auth.Authenticator == nil {
		return nil
	}
	review, err := o.tokenReviewer()
	if err != nil || review == nil {
		return err
	}
	auth.Authenticator = authentication.TokensWithoutBodies(auth.Authenticator, review, o.Authentication.CacheTTL)
	return nil
}

// tokenReviewer returns the TokenReview webhook of the host through the client the generic
// options review with; nil when there is none.
func (o CompletedOptions) tokenReviewer() (authenticator.Token, error) {
	cfg, err := o.tokenReviewConfig()
	if err != nil || cfg == nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the TokenReview client: %w", err)
	}
	backoff := o.Authentication.WebhookRetryBackoff
	if backoff == nil {
		return nil, errors.New("delegated authentication has no webhook retry backoff")
	}
	authenticatorfactory.RegisterMetrics()
	review, err := webhooktoken.NewFromInterface(client.AuthenticationV1(), nil, *backoff, o.Authentication.TokenRequestTimeout, webhooktoken.AuthenticatorMetrics{
		RecordRequestTotal:   authenticatorfactory.RecordRequestTotal,
		RecordRequestLatency: authenticatorfactory.RecordRequestLatency,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the TokenReview authenticator: %w", err)
	}
	return review, nil
}

// tokenReviewConfig is the client configuration the generic delegated authentication reviews
// tokens with, with its rate limits (they bound how fast new callers are served); nil when it
// has none (no kubeconfig, not in a pod, and the kubeconfig optional).
func (o CompletedOptions) tokenReviewConfig() (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if path := o.Authentication.RemoteKubeConfigFile; path != "" {
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(&clientcmd.ClientConfigLoadingRules{ExplicitPath: path}, &clientcmd.ConfigOverrides{}).ClientConfig()
	} else {
		cfg, err = rest.InClusterConfig()
		if err != nil && o.Authentication.RemoteKubeConfigFileOptional {
			return nil, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("loading the delegated authentication kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	return cfg, nil
}
