package targetpolicy

import (
	"errors"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func TestParseRule(t *testing.T) {
	valid := map[string]string{
		"10.0.0.0/8":            "addr",
		"10.1.2.3/8":            "addr", // masked to 10.0.0.0/8
		"fd00::/8":              "addr",
		"::ffff:10.0.0.0/104":   "addr", // IPv4-mapped, matches 10.0.0.0/8
		"10.1.2.3":              "addr",
		"fd00::1":               "addr",
		"::ffff:10.1.2.3":       "addr",
		"10.1.2.3:6443":         "addr",
		"[fd00::1]:6443":        "addr",
		"api.example.com":       "name",
		"API.Example.COM.":      "name",
		"api.example.com:6443":  "name",
		"*.example.com":         "name",
		"*.example.com:443":     "name",
		"localhost":             "name",
		" kubernetes.default  ": "name",
	}
	for s, kind := range valid {
		r, err := ParseRule(s)
		if err != nil {
			t.Errorf("ParseRule(%q): %v", s, err)
			continue
		}
		if got := map[bool]string{true: "addr", false: "name"}[r.prefix.IsValid()]; got != kind {
			t.Errorf("ParseRule(%q) is a %s rule, want %s", s, got, kind)
		}
	}
	for _, s := range []string{
		"", "10.0.0.0/33", "10.0.0.0/8:443", "fd00::/8:443", "http://example.com", "example.com/path",
		"*", "*.", "a.*.example.com", "exa mple.com", "example.com:0", "example.com:65536", "example.com:https",
		"[fd00::1]", "127.1", "2130706433", "0x7f.0.0.1", "0x7f000001", "foo_bar.example.com",
	} {
		if r, err := ParseRule(s); err == nil {
			t.Errorf("ParseRule(%q) = %+v, want an error", s, r)
		}
	}
	_, err := ParseRules([]string{"10.0.0.0/8", "bad entry", "example.com:0"})
	if err == nil || !strings.Contains(err.Error(), `"bad entry"`) || !strings.Contains(err.Error(), `"example.com:0"`) {
		t.Errorf("ParseRules names every bad entry: %v", err)
	}
}

func mustRules(t *testing.T, entries ...string) []Rule {
	t.Helper()
	rules, err := ParseRules(entries)
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

func classOf(err error) Class {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Class
	}
	return ""
}

func TestCheckURL(t *testing.T) {
	def := New(Config{})
	restricted := New(Config{
		Allowed: mustRules(t, "*.example.com", "10.0.0.0/8", "192.168.1.10:6443"),
		Denied:  mustRules(t, "secret.example.com", "10.9.0.0/16", "*.internal.example.com:443"),
	})
	namesOnly := New(Config{Allowed: mustRules(t, "api.example.com")})
	below := New(Config{Allowed: mustRules(t, "*.example.com")})
	tests := []struct {
		policy *Policy
		server string
		want   Class
	}{
		{def, "https://127.0.0.1:6443", ""},
		{def, "https://[::1]:6443", ""},
		{def, "https://localhost:6443/clusters/root", ""},
		{def, "https://kubernetes.default.svc", ""},
		{def, "http://127.0.0.1:8080", ClassPlainHTTP},
		{New(Config{AllowPlainHTTP: true}), "http://127.0.0.1:8080", ""},
		{def, "ftp://127.0.0.1", ClassScheme},
		{def, "https://169.254.169.254", ClassMetadata},
		{def, "https://169.254.169.254:443/latest/meta-data", ClassMetadata},
		{def, "https://[::ffff:169.254.169.254]", ClassMetadata},
		{def, "https://[::ffff:a9fe:a9fe]", ClassMetadata},
		{def, "https://[fe80::1]", ClassMetadata},
		{def, "https://[fe80::1%25eth0]:6443", ClassMetadata},
		{def, "https://[fd00:ec2::254]", ClassMetadata},
		{def, "https://100.100.100.200", ClassMetadata},
		{def, "https://127.1", ClassHost},
		{def, "https://2130706433", ClassHost},
		{def, "https://0x7f000001", ClassHost},
		{def, "https://:6443", ClassHost},
		{def, "https://example.com:99999", ClassHost},
		// Names on an allow list pass; names on none wait for the address they resolve to
		// when the list has address entries, and are refused when it has none.
		{restricted, "https://api.example.com", ""},
		{restricted, "https://API.EXAMPLE.COM.:443", ""},
		{restricted, "https://example.com", ""},
		{namesOnly, "https://example.com", ClassNotAllowed},
		{namesOnly, "https://api.example.com:6443", ""},
		{namesOnly, "https://10.0.0.1", ClassNotAllowed},
		{below, "https://a.b.example.com", ""},
		{below, "https://example.com", ClassNotAllowed},
		{below, "https://evilexample.com", ClassNotAllowed},
		{below, "https://example.com.evil.org", ClassNotAllowed},
		{restricted, "https://10.1.2.3:6443", ""},
		{restricted, "https://[::ffff:10.1.2.3]:6443", ""},
		{restricted, "https://11.1.2.3", ClassNotAllowed},
		{restricted, "https://192.168.1.10:6443", ""},
		{restricted, "https://192.168.1.10:443", ClassNotAllowed},
		// Deny wins.
		{restricted, "https://secret.example.com", ClassDenied},
		{restricted, "https://10.9.1.1", ClassDenied},
		{restricted, "https://a.internal.example.com", ClassDenied},
		{restricted, "https://a.internal.example.com:6443", ""},
		{New(Config{Allowed: mustRules(t, "169.254.0.0/16")}), "https://169.254.169.254", ClassMetadata},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.server)
		if err != nil {
			t.Fatalf("%s: %v", tt.server, err)
		}
		err = tt.policy.CheckURL(u)
		if got := classOf(err); got != tt.want || (err != nil) != (tt.want != "") {
			t.Errorf("CheckURL(%s) = %v, want class %q", tt.server, err, tt.want)
		}
		if err != nil && !errors.Is(err, ErrNotAllowed) {
			t.Errorf("CheckURL(%s): %v is not ErrNotAllowed", tt.server, err)
		}
	}
}

func TestCheckConnection(t *testing.T) {
	local := netip.MustParseAddr("10.0.0.5")
	own := New(Config{
		OwnEndpoints: []netip.AddrPort{
			netip.MustParseAddrPort("127.0.0.1:2379"),          // embedded etcd
			netip.MustParseAddrPort("[::ffff:127.0.0.1]:2380"), // as net.TCPAddr reports it
			netip.MustParseAddrPort("0.0.0.0:6443"),            // secure port on all addresses
		},
		IsLocal: func(ip netip.Addr) bool { return ip == local },
	})
	restricted := New(Config{
		Allowed: mustRules(t, "*.example.com", "10.0.0.0/8"),
		Denied:  mustRules(t, "10.9.0.0/16", "bad.example.com"),
	})
	tests := []struct {
		policy *Policy
		target string
		addr   string
		want   Class
	}{
		{own, "127.0.0.1:2379", "127.0.0.1:2379", ClassOwnEndpoint},
		{own, "localhost:2379", "127.0.0.1:2379", ClassOwnEndpoint},
		{own, "localhost:2379", "[::ffff:127.0.0.1]:2379", ClassOwnEndpoint},
		{own, "0.0.0.0:2379", "0.0.0.0:2379", ClassOwnEndpoint}, // 0.0.0.0 reaches loopback
		{own, "127.0.0.1:2380", "127.0.0.1:2380", ClassOwnEndpoint},
		{own, "127.0.0.2:2379", "127.0.0.2:2379", ""}, // etcd listens on 127.0.0.1 only
		{own, "[::1]:2379", "[::1]:2379", ""},
		{own, "127.0.0.1:2381", "127.0.0.1:2381", ""},
		{own, "127.0.0.1:6443", "127.0.0.1:6443", ClassOwnEndpoint},
		{own, "127.0.0.9:6443", "127.0.0.9:6443", ClassOwnEndpoint},
		{own, "[::1]:6443", "[::1]:6443", ClassOwnEndpoint},
		{own, "[::]:6443", "[::]:6443", ClassOwnEndpoint},
		{own, "node.example.com:6443", "10.0.0.5:6443", ClassOwnEndpoint}, // an interface address
		{own, "other.example.com:6443", "10.0.0.6:6443", ""},
		{own, "rebound.example.com:443", "169.254.169.254:443", ClassMetadata},
		{own, "rebound.example.com:443", "[fe80::1%eth0]:443", ClassMetadata},
		{own, "rebound.example.com:443", "[::ffff:169.254.169.254]:443", ClassMetadata},
		// An allowed name is allowed on the addresses it resolves to, unless they are denied.
		{restricted, "api.example.com:443", "203.0.113.7:443", ""},
		{restricted, "api.example.com:443", "10.9.0.1:443", ClassDenied},
		{restricted, "api.example.com:443", "169.254.169.254:443", ClassMetadata},
		{restricted, "bad.example.com:443", "10.1.1.1:443", ClassDenied},
		{restricted, "api.other.org:443", "10.1.1.1:443", ""},
		{restricted, "api.other.org:443", "[::ffff:10.1.1.1]:443", ""},
		{restricted, "api.other.org:443", "203.0.113.7:443", ClassNotAllowed},
		{restricted, "[::ffff:203.0.113.7]:443", "203.0.113.7:443", ClassNotAllowed},
	}
	for _, tt := range tests {
		err := tt.policy.CheckConnection(tt.target, netip.MustParseAddrPort(tt.addr))
		if got := classOf(err); got != tt.want || (err != nil) != (tt.want != "") {
			t.Errorf("CheckConnection(%s, %s) = %v, want class %q", tt.target, tt.addr, err, tt.want)
		}
		// The message names the target as the mount names it, never the address connected to.
		if err != nil && tt.target != tt.addr && strings.Contains(err.Error(), tt.addr) {
			t.Errorf("CheckConnection(%s, %s): %q names the resolved address", tt.target, tt.addr, err)
		}
	}
}

func TestDefaultIsLocalKnowsLoopback(t *testing.T) {
	p := New(Config{OwnEndpoints: []netip.AddrPort{netip.MustParseAddrPort("[::]:6443")}})
	if err := p.CheckConnection("127.0.0.1:6443", netip.MustParseAddrPort("127.0.0.1:6443")); classOf(err) != ClassOwnEndpoint {
		t.Errorf("loopback on a port bound to all addresses: %v", err)
	}
	if err := p.CheckConnection("192.0.2.1:6443", netip.MustParseAddrPort("192.0.2.1:6443")); err != nil {
		t.Errorf("TEST-NET-1, no address of this host: %v", err)
	}
}

func TestCheckPeerCertificate(t *testing.T) {
	current := []byte("current leaf")
	p := New(Config{OwnCertificates: func() [][]byte { return [][]byte{[]byte("sni leaf"), current} }})
	if err := p.CheckPeerCertificate("relay:443", []byte("current leaf")); classOf(err) != ClassOwnCertificate || !strings.Contains(err.Error(), "relay:443") {
		t.Errorf("own certificate: %v", err)
	}
	if err := p.CheckPeerCertificate("relay:443", []byte("another leaf")); err != nil {
		t.Errorf("another certificate: %v", err)
	}
	if err := New(Config{}).CheckPeerCertificate("x:443", current); err != nil {
		t.Errorf("no own certificates: %v", err)
	}
}

func kubeconfigOf(t *testing.T, server string) []byte {
	t.Helper()
	c := clientcmdapi.NewConfig()
	c.Clusters["c"] = &clientcmdapi.Cluster{Server: server}
	c.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "s3cr3t-token"}
	c.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	c.CurrentContext = "ctx"
	data, err := clientcmd.Write(*c)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestValidateKubeconfig(t *testing.T) {
	p := New(Config{})
	path := field.NewPath("spec", "ref")
	if errs := p.ValidateKubeconfig(path, kubeconfigOf(t, "https://127.0.0.1:6443")); len(errs) != 0 {
		t.Errorf("allowed target: %v", errs)
	}
	errs := p.ValidateKubeconfig(path, kubeconfigOf(t, "https://169.254.169.254"))
	if len(errs) != 1 || errs[0].Type != field.ErrorTypeForbidden || errs[0].Field != "spec.ref" || !strings.Contains(errs[0].Error(), string(ClassMetadata)) {
		t.Errorf("metadata target: %v", errs)
	}
	var bomb strings.Builder
	bomb.WriteString("apiVersion: v1\nkind: Config\nx: &a " + strings.Repeat("z", 100<<10) + "\ny: [")
	for range 1000 {
		bomb.WriteString("*a,")
	}
	bomb.WriteString("*a]\n")
	// 100 MiB of JSON once its aliases are expanded: refused before it is parsed.
	start := time.Now()
	if errs := p.ValidateKubeconfig(path, []byte(bomb.String())); len(errs) != 1 || !strings.Contains(errs[0].Error(), "aliases expand") || time.Since(start) > 5*time.Second {
		t.Errorf("aliases: %v after %v", errs, time.Since(start))
	}
	for name, data := range map[string][]byte{
		"garbage":    []byte("s3cr3t-token: {{"),
		"no context": []byte("apiVersion: v1\nkind: Config\nusers: [{name: u, user: {token: s3cr3t-token}}]\n"),
	} {
		errs := p.ValidateKubeconfig(path, data)
		if len(errs) != 1 || errs[0].Type != field.ErrorTypeInvalid || strings.Contains(errs.ToAggregate().Error(), "s3cr3t") {
			t.Errorf("%s: %v", name, errs)
		}
	}
	if errs := p.ValidateServer(path, "http://10.0.0.1"); len(errs) != 1 || !strings.Contains(errs[0].Error(), "plain http") {
		t.Errorf("ValidateServer of plain http: %v", errs)
	}
}
