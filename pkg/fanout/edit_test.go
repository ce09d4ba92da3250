package fanout

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"
)

type editedObject struct {
	Metadata struct {
		Name            string            `json:"name"`
		Namespace       string            `json:"namespace"`
		ResourceVersion string            `json:"resourceVersion"`
		Labels          map[string]string `json:"labels"`
	} `json:"metadata"`
	Data map[string]string `json:"data"`
}

// TestEditObject: names get the mount, labels the mount label (a target's own value of it
// replaced), everything else stays as it came.
func TestEditObject(t *testing.T) {
	for name, c := range map[string]struct {
		in     string
		labels map[string]string
	}{
		"labels":        {`{"kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","labels":{"app":"x"}},"data":{"k":"v"}}`, map[string]string{"app": "x", MountLabel: "m1"}},
		"no labels":     {`{"metadata":{"name":"a","namespace":"ns"},"data":{"k":"v"}}`, map[string]string{MountLabel: "m1"}},
		"null labels":   {`{"metadata":{"labels":null,"name":"a","namespace":"ns"},"data":{"k":"v"}}`, map[string]string{MountLabel: "m1"}},
		"empty labels":  {`{"metadata":{"name":"a","namespace":"ns","labels":{}},"data":{"k":"v"}}`, map[string]string{MountLabel: "m1"}},
		"claims other":  {`{"metadata":{"name":"a","namespace":"ns","labels":{"mounts.kcp.io/mount":"m2","b":"c"}},"data":{"k":"v"}}`, map[string]string{"b": "c", MountLabel: "m1"}},
		"escaped claim": {`{"metadata":{"name":"a","namespace":"ns","labels":{"mounts.kcp.io\/mount":"m2"}},"data":{"k":"v"}}`, map[string]string{MountLabel: "m1"}},
		"escaped keys":  {`{"m\u0065tadata":{"n\u0061me":"a","namespace":"ns"},"data":{"k":"v"}}`, map[string]string{MountLabel: "m1"}},
	} {
		t.Run(name, func(t *testing.T) {
			e := &editor{mount: "m1", keep: true}
			out, hole, err := e.object(nil, []byte(c.in), false)
			if err != nil {
				t.Fatal(err)
			}
			if hole != -1 {
				t.Errorf("hole %d without rvHole", hole)
			}
			var got editedObject
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("%s: %v", out, err)
			}
			if got.Metadata.Name != "m1:a" || got.Metadata.Namespace != "ns" || !reflect.DeepEqual(got.Metadata.Labels, c.labels) || got.Data["k"] != "v" {
				t.Errorf("got %s", out)
			}
			if e.name != "a" || e.namespace != "ns" {
				t.Errorf("editor read name %q namespace %q", e.name, e.namespace)
			}
		})
	}
}

// TestEditObjectHole: with rvHole the resourceVersion is left for the caller, present or not.
func TestEditObjectHole(t *testing.T) {
	for _, in := range []string{
		`{"metadata":{"name":"a","resourceVersion":"17"}}`,
		`{"metadata":{"name":"a"}}`,
	} {
		e := &editor{mount: "m"}
		out, hole, err := e.object(nil, []byte(in), true)
		if err != nil || hole < 0 {
			t.Fatalf("%s: hole %d, %v", in, hole, err)
		}
		full := append(append(append([]byte(nil), out[:hole]...), `"composite"`...), out[hole:]...)
		var got editedObject
		if err := json.Unmarshal(full, &got); err != nil {
			t.Fatalf("%s: %v", full, err)
		}
		if got.Metadata.ResourceVersion != "composite" || got.Metadata.Name != "m:a" {
			t.Errorf("%s gave %s", in, full)
		}
	}
}

// TestEditObjectRefuses: what a client would read otherwise than this server is refused.
func TestEditObjectRefuses(t *testing.T) {
	for name, in := range map[string]string{
		"two metadata":            `{"metadata":{"name":"a"},"metadata":{"name":"b","labels":{"mounts.kcp.io/mount":"m2"}}}`,
		"two metadata, escaped":   `{"metadata":{"name":"a"},"m\u0065tadata":{"name":"b"}}`,
		"two names":               `{"metadata":{"name":"a","name":"b"}}`,
		"two labels":              `{"metadata":{"name":"a","labels":{},"labels":{"mounts.kcp.io/mount":"m2"}}}`,
		"no metadata":             `{"kind":"X"}`,
		"metadata not an object":  `{"metadata":"x"}`,
		"name not a string":       `{"metadata":{"name":1}}`,
		"labels not an object":    `{"metadata":{"name":"a","labels":[]}}`,
		"invalid JSON":            `{"metadata":{"name":"a",}}`,
		"a literal":               `true`,
		"two resourceVersions":    `{"metadata":{"name":"a","resourceVersion":"1","resourceVersion":"2"}}`,
		"two namespaces, escaped": `{"metadata":{"name":"a","namespace":"x","n\u0061mespace":"y"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			e := &editor{mount: "m1"}
			if out, _, err := e.object(nil, []byte(in), true); !errors.Is(err, errMalformed) {
				t.Errorf("got %s, %v; want errMalformed", out, err)
			}
		})
	}
}

// TestEditRow: the mount's cell comes first, the row's object is edited, cells can be
// reordered to other columns.
func TestEditRow(t *testing.T) {
	e := &editor{mount: "m1"}
	row := `{"cells":["a",1,"5s"],"object":{"kind":"PartialObjectMetadata","metadata":{"name":"a","namespace":"ns"}}}`
	out, err := e.row(nil, []byte(row), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Cells  []any        `json:"cells"`
		Object editedObject `json:"object"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	if !reflect.DeepEqual(got.Cells, []any{"m1", "a", 1.0, "5s"}) || got.Object.Metadata.Name != "m1:a" || got.Object.Metadata.Labels[MountLabel] != "m1" {
		t.Errorf("got %s", out)
	}
	// Another member's columns are Age, Name: reorder to Name, Data, Age.
	other := `{"cells":["7s","b"]}`
	edited, err := e.row(nil, []byte(other), nil)
	if err != nil {
		t.Fatal(err)
	}
	remapped, err := remapRows(nil, edited, remap([]string{"Name", "Data", "Age"}, []string{"Age", "Name"}))
	if err != nil {
		t.Fatal(err)
	}
	if string(remapped) != `{"cells":["m1","b",null,"7s"]}` {
		t.Errorf("remapped %s", remapped)
	}
	if remap([]string{"A"}, []string{"A"}) != nil {
		t.Error("equal columns need no remap")
	}
	for _, bad := range []string{`{"cells":"x"}`, `{"object":{}}`, `{"cells":[],"cells":[]}`, `{"cells":[],"object":{"metadata":{"name":"a"}},"object":{}}`} {
		if out, err := e.row(nil, []byte(bad), nil); err == nil {
			t.Errorf("%s: got %s", bad, out)
		}
	}
}

// FuzzEditObject: whatever a target sends, the editor answers valid JSON with the object's
// name prefixed and the mount label set, or an error; never a panic.
func FuzzEditObject(f *testing.F) {
	for _, s := range []string{
		`{"metadata":{"name":"a","labels":{"x":"y"}}}`,
		`{"metadata":{"name":"a\"b","labels":null,"resourceVersion":"1"},"spec":{"x":[1,2,{"y":"}"}]}}`,
		`{"m\u0065tadata":{"name":"a"}}`,
		`{"cells":["a"],"object":{"metadata":{"name":"a"}}}`,
	} {
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, hole bool) {
		e := &editor{mount: "m", keep: true}
		out, at, err := e.object(nil, data, hole)
		// The indexed edit of the scanner's items gives the same.
		sc := newScanner(bytes.NewReader(data))
		v, idx, ierr := sc.indexed()
		if ierr == nil {
			if _, rest := sc.peek(); rest == io.EOF {
				iout, iat, ierr := (&editor{mount: "m"}).item(nil, v, idx, hole)
				if (ierr == nil) != (err == nil) || err == nil && (!bytes.Equal(iout, out) || iat != at) {
					t.Fatalf("%q: indexed edit %q %d %v, scanned %q %d %v", data, iout, iat, ierr, out, at, err)
				}
			}
		}
		if err != nil {
			return
		}
		if hole {
			if at < 0 || at > len(out) {
				t.Fatalf("hole %d in %d bytes", at, len(out))
			}
			out = append(append(append([]byte(nil), out[:at]...), `"rv"`...), out[at:]...)
		}
		var got editedObject
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%q gave invalid %q: %v", data, out, err)
		}
		if got.Metadata.Labels[MountLabel] != "m" {
			t.Fatalf("%q gave %q without the mount label", data, out)
		}
		if e.name != "" && got.Metadata.Name != "m:"+e.name {
			t.Fatalf("%q gave name %q", data, got.Metadata.Name)
		}
		if _, err := e.row(nil, data, nil); err == nil {
			return
		}
	})
}
