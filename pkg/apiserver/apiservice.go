package apiserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// publishCABundle sets spec.caBundle of the named APIService to caBundle, retrying with
// backoff until it succeeds or ctx ends. The aggregator then trusts the generated serving
// certificate without insecureSkipTLSVerify; the RBAC of artifacts/apiservice allows exactly
// this one APIService.
func publishCABundle(ctx context.Context, client kubernetes.Interface, name string, caBundle []byte) {
	logger := klog.FromContext(ctx).WithValues("apiservice", name)
	path := "/apis/apiregistration.k8s.io/v1/apiservices/" + name
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"caBundle": caBundle}})
	if err != nil {
		logger.Error(err, "Encoding caBundle patch")
		return
	}
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 30 * time.Second}
	_ = wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		current, err := currentCABundle(ctx, client, path)
		if err == nil && bytes.Equal(current, caBundle) {
			logger.V(2).Info("APIService already trusts this server's CA")
			return true, nil
		}
		if err == nil {
			err = client.Discovery().RESTClient().Patch(types.MergePatchType).AbsPath(path).Body(patch).Do(ctx).Error()
		}
		if err != nil {
			logger.Info("Cannot publish the serving CA to the APIService yet; retrying", "err", err.Error())
			return false, nil
		}
		logger.Info("Published the serving CA to the APIService")
		return true, nil
	})
}

func currentCABundle(ctx context.Context, client kubernetes.Interface, path string) ([]byte, error) {
	raw, err := client.Discovery().RESTClient().Get().AbsPath(path).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("getting APIService: %w", err)
	}
	var obj struct {
		Spec struct {
			CABundle string `json:"caBundle"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("decoding APIService: %w", err)
	}
	return base64.StdEncoding.DecodeString(obj.Spec.CABundle)
}
