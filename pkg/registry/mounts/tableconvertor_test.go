package mounts

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

func TestConvertToTable(t *testing.T) {
	m := testMount()
	m.CreationTimestamp = metav1.NewTime(time.Now().Add(-90 * time.Minute))
	m.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "ProbeSucceeded"}}
	edge := testMount()
	edge.Name = "edge"
	edge.Status.Phase = mounts.MountPhaseConnecting
	edge.Status.Conditions = []metav1.Condition{
		{Type: "Ready", Status: metav1.ConditionFalse, Reason: "AgentNotConnected"},
		{Type: "AgentConnected", Status: metav1.ConditionFalse, Reason: "Detached"},
	}
	long := testMount()
	long.Name = "long"
	long.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "AReasonLongerThanThirtyTwoCharactersInAll"}}
	ws := &mounts.Mount{
		ObjectMeta: metav1.ObjectMeta{Name: "team"},
		Spec: mounts.MountSpec{
			Type:     mounts.MountTypeWorkspace,
			Ref:      mounts.ObjectReference{Kind: "Workspace", Name: "root:team"},
			Identity: mounts.MountIdentity{Mode: mounts.IdentityModeImpersonate},
		},
	}
	list := &mounts.MountList{ListMeta: metav1.ListMeta{ResourceVersion: "42", Continue: "c"}, Items: []mounts.Mount{*m, *ws, *edge, *long}}

	table, err := tableConvertor{}.ConvertToTable(context.Background(), list, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range table.ColumnDefinitions {
		if c.Priority == 0 {
			names = append(names, c.Name)
		}
	}
	if diff := cmp.Diff([]string{"Name", "Type", "Phase", "Ready", "Reason", "Age"}, names); diff != "" {
		t.Errorf("default columns (-want +got):\n%s", diff)
	}
	if len(table.ColumnDefinitions) != len(table.Rows[0].Cells) {
		t.Errorf("%d columns but %d cells", len(table.ColumnDefinitions), len(table.Rows[0].Cells))
	}
	want := [][]interface{}{
		{"prod", "URL", "Ready", "True", "ProbeSucceeded", "90m", "https://x/", "Secret/prod/kubeconfig", "", "Impersonate"},
		{"team", "Workspace", "", "", "", "<unknown>", "", "Workspace/root:team", "", "Impersonate"},
		{"edge", "URL", "Connecting", "False", "AgentNotConnected", "<unknown>", "https://x/", "Secret/prod/kubeconfig", "Detached", "Impersonate"},
		{"long", "URL", "Ready", "False", "AReasonLongerThanThirtyTwoCha...", "<unknown>", "https://x/", "Secret/prod/kubeconfig", "", "Impersonate"},
	}
	for i, row := range table.Rows {
		if diff := cmp.Diff(want[i], row.Cells); diff != "" {
			t.Errorf("row %d (-want +got):\n%s", i, diff)
		}
	}
	if table.ResourceVersion != "42" || table.Continue != "c" {
		t.Errorf("list metadata lost: %q %q", table.ResourceVersion, table.Continue)
	}

	single, err := tableConvertor{}.ConvertToTable(context.Background(), m, &metav1.TableOptions{NoHeaders: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(single.ColumnDefinitions) != 0 || len(single.Rows) != 1 {
		t.Errorf("NoHeaders table: %d columns, %d rows", len(single.ColumnDefinitions), len(single.Rows))
	}

	// Rows carry managedFields only when whole objects are asked for; the stored (cached)
	// Mount keeps them either way.
	m.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "alice", Operation: metav1.ManagedFieldsOperationApply}}
	for _, c := range []struct {
		opts *metav1.TableOptions
		want int
	}{{nil, 0}, {&metav1.TableOptions{IncludeObject: metav1.IncludeMetadata}, 0}, {&metav1.TableOptions{IncludeObject: metav1.IncludeObject}, 1}} {
		table, err := tableConvertor{}.ConvertToTable(context.Background(), m, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		rowObj := table.Rows[0].Object.Object.(*mounts.Mount)
		if len(rowObj.ManagedFields) != c.want || rowObj.Name != "prod" || rowObj.Labels["env"] != "prod" {
			t.Errorf("options %+v: row object %+v, want %d managedFields entries", c.opts, rowObj.ObjectMeta, c.want)
		}
		if len(m.ManagedFields) != 1 {
			t.Fatalf("options %+v: the converted Mount lost its managedFields", c.opts)
		}
	}

	if _, err := (tableConvertor{}).ConvertToTable(context.Background(), &metav1.Status{}, nil); err == nil {
		t.Error("expected an error for a foreign object")
	}
}
