package options

import (
	"strings"
	"testing"
)

// TestRewriteDocumentMemoryBudget: --rewrite-document-memory-budget sizes the proxy's budget
// of whole-document rewrites (256 MiB by default), 0 turns it off, and a negative one is
// refused.
func TestRewriteDocumentMemoryBudget(t *testing.T) {
	fss := NewOptions().Flags()
	fs := fss.FlagSet("mount-apiserver")
	if f := fs.Lookup("rewrite-document-memory-budget"); f == nil || f.DefValue != "268435456" {
		t.Fatalf("flag %v", f)
	}
	for budget, want := range map[int64]int64{DefaultRewriteDocumentMemoryBudget: 256 << 20, 64 << 20: 64 << 20, 0: 0} {
		cfg, _ := config(t, func(o *Options) { o.RewriteDocumentMemoryBudget = budget })
		b := cfg.Extra.Proxier.RewriteBudget
		switch {
		case want == 0 && b != nil:
			t.Errorf("%d: a budget of %d", budget, b.Size())
		case want != 0 && (b == nil || b.Size() != want):
			t.Errorf("%d: budget %v", budget, b)
		}
		cfg.Close()
	}
	o := NewOptions()
	o.RewriteDocumentMemoryBudget = -1
	completed, err := o.Complete()
	if err != nil {
		t.Fatal(err)
	}
	if err := completed.Validate(); err == nil || !strings.Contains(err.Error(), "--rewrite-document-memory-budget must not be negative") {
		t.Fatalf("%v", err)
	}
}
