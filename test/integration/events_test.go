package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kcp-dev/mount-apiserver/pkg/authorization"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestStandaloneEvents: the standalone server keeps the Events its status controller records
// of its mounts and serves them as a cluster does, as core v1 and events.k8s.io/v1 Events of
// one store: kubectl describe mount lists them (it said "Events: <none>"), kubectl get events
// shows them (it said the resource type does not exist), field selectors work in both APIs,
// viewers and editors read them and nobody but the server and its admins writes them; they
// are bounded in count (the oldest go first) and in age (--event-ttl).
func TestStandaloneEvents(t *testing.T) {
	ctx := context.Background()
	bin := kubectlBinary(t)
	cache := t.TempDir()
	run := func(kubeconfig string, args ...string) kubectlResult {
		t.Helper()
		return runKubectlWith(ctx, bin, cache, kubeconfig, "", time.Minute, args...)
	}
	const maxEvents = 20
	s := framework.StartInProcess(t, "", func(o *options.Options) { o.MaxEvents = maxEvents })
	if _, err := s.Client.MountsV1alpha1().Mounts().Create(ctx, urlMount("lost"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var described kubectlResult
	deadline := time.Now().Add(30 * time.Second)
	for {
		described = run(s.Kubeconfig, "describe", "mount", "lost")
		if described.exitCode == 0 && regexpMatch(`(?m)^Events:\n\s+Type\s+Reason\s+Age\s+From\s+Message\n`, described.out) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubectl describe mount lost shows no Events: exit %d\n%s", described.exitCode, described.out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("kubectl describe mount lost:\n%s", described.out[strings.Index(described.out, "Events:"):])
	if !regexpMatch(`(?m)^\s+(Normal|Warning)\s+\w+\s+\S+\s+mount-status\s+Phase `, described.out) {
		t.Errorf("kubectl describe mount lost: the Event is not the status controller's:\n%s", described.out)
	}

	viewer := userKubeconfigFile(t, s, s.URL, "vera", authorization.ViewersGroup)
	editor := userKubeconfigFile(t, s, s.URL, "edith", authorization.EditorsGroup)
	for _, c := range []struct {
		who, kubeconfig string
		args            []string
		want            string
	}{
		{"admin", s.Kubeconfig, []string{"get", "events"}, `(?m)^LAST SEEN\s+TYPE\s+REASON\s+OBJECT\s+MESSAGE\n.*mount/lost\s+Phase `},
		{"viewer", viewer, []string{"get", "events", "-A", "--field-selector", "involvedObject.name=lost,involvedObject.kind=Mount", "-o", "jsonpath={.items[*].involvedObject.name}"}, `^lost( lost)*$`},
		{"editor", editor, []string{"get", "events.v1.events.k8s.io", "--field-selector", "regarding.name=lost", "-o", "jsonpath={.items[*].regarding.name} {.items[*].reportingController}"}, `^lost( lost)* mount-status`},
		{"viewer", viewer, []string{"get", "ev", "--field-selector", "involvedObject.name=other"}, `No resources found in default namespace`},
		{"viewer", viewer, []string{"get", "events", "--field-selector", "note=x"}, `field label not supported: note`},
	} {
		if r := run(c.kubeconfig, c.args...); !regexpMatch(c.want, strings.TrimSpace(r.out)) {
			t.Errorf("%s: kubectl %s: exit %d\n%s\nwant %s", c.who, strings.Join(c.args, " "), r.exitCode, r.out, c.want)
		}
	}

	// Only the server (and its admins) write Events: a viewer or an editor could otherwise
	// plant a misleading one about any mount.
	planted := `{"apiVersion":"v1","kind":"Event","metadata":{"name":"planted","namespace":"default"},"involvedObject":{"kind":"Mount","name":"lost"},"reason":"Ready","message":"all fine","type":"Normal"}`
	for who, kubeconfig := range map[string]string{"viewer": viewer, "editor": editor} {
		r := runKubectlWith(ctx, bin, cache, kubeconfig, planted, time.Minute, "create", "-f", "-")
		if r.exitCode == 0 || !strings.Contains(r.out, "Forbidden") {
			t.Errorf("%s created an Event: exit %d\n%s", who, r.exitCode, r.out)
		}
	}

	// Bounded in count: the admin writes many more than the bound; the newest stay.
	kube, err := kubernetes.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(-time.Hour)
	const written = 3 * maxEvents
	for i := range written {
		e := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("e%02d", i), Namespace: "default"},
			InvolvedObject: corev1.ObjectReference{Kind: "Mount", Name: "lost"},
			Reason:         "Test", Message: "number " + fmt.Sprint(i), Type: corev1.EventTypeNormal,
			LastTimestamp: metav1.NewTime(base.Add(time.Duration(i) * time.Second)),
		}
		if _, err := kube.CoreV1().Events("default").Create(ctx, e, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating Event %d: %v", i, err)
		}
	}
	all, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Items) > maxEvents {
		t.Errorf("%d Events kept, want at most %d", len(all.Items), maxEvents)
	}
	if _, err := kube.CoreV1().Events("default").Get(ctx, fmt.Sprintf("e%02d", written-1), metav1.GetOptions{}); err != nil {
		t.Errorf("the newest Event is gone: %v", err)
	}
	if _, err := kube.CoreV1().Events("default").Get(ctx, "e00", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the oldest Event is kept: %v", err)
	}

	// Bounded in age: with --event-ttl=3s an Event goes within seconds (an etcd lease).
	short := framework.StartInProcess(t, "", func(o *options.Options) { o.EventTTL = 3 * time.Second; apiOnly(o) })
	shortKube, err := kubernetes.NewForConfig(short.Config)
	if err != nil {
		t.Fatal(err)
	}
	e := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "brief", Namespace: "default"}, InvolvedObject: corev1.ObjectReference{Kind: "Mount", Name: "x"}, Reason: "Test"}
	if _, err := shortKube.CoreV1().Events("default").Create(ctx, e, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		_, err := shortKube.CoreV1().Events("default").Get(ctx, "brief", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			t.Logf("an Event with --event-ttl=3s was gone after %s", time.Since(start).Round(100*time.Millisecond))
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("an Event with --event-ttl=3s still there after 30s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
