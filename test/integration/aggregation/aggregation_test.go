package aggregation

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
)

func TestSmoke(t *testing.T) {
	c, err := clientset.NewForConfig(kube.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	m := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "smoke"}, Spec: v1alpha1.MountSpec{Ref: v1alpha1.ObjectReference{Namespace: "a", Name: "b"}}}
	if _, err := c.MountsV1alpha1().Mounts().Create(context.Background(), m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
