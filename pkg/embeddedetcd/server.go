package embeddedetcd

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
)

// Options configure the embedded etcd server.
type Options struct {
	// Directory holds etcd's data (WAL and snapshots).
	Directory string
	// StartTimeout bounds the wait for etcd to become ready.
	StartTimeout time.Duration
	// QuotaBackendBytes is etcd's backend size limit; 0 takes etcd's default (2 GiB).
	QuotaBackendBytes int64
	// LogLevel is the least level of etcd's own logs (debug, info, warn, error) that is
	// logged; empty leaves it to the logger's verbosity: etcd's warnings at V(0), its infos at
	// V(3), its debug messages at V(5).
	LogLevel string
}

// Server is a running embedded etcd.
type Server struct {
	etcd *embed.Etcd
	// ClientURL is the URL at which the server serves etcd clients.
	ClientURL string
	// PeerURL is the URL of its peer listener (no peer ever uses it; it listens all the same).
	PeerURL string
	// logLevel lets Close silence etcd's own logs, which report the listeners closing on
	// purpose as "serving failed" errors.
	logLevel zap.AtomicLevel
}

// member name and the peer URL are constants, not per-start values: etcd stores them in its
// data directory and a restart must present the same ones.
const memberName = "mount-apiserver"

// Start starts etcd and waits until it serves. Clients and peers listen on 127.0.0.1 on ports
// the kernel picks: a single member never talks to peers, and clients learn the URL from
// ClientURL, so no fixed port can collide with another instance.
func Start(ctx context.Context, opts Options) (*Server, error) {
	logger := klog.FromContext(ctx).WithName("embedded-etcd")
	if err := os.MkdirAll(opts.Directory, 0o700); err != nil {
		return nil, fmt.Errorf("creating etcd data directory: %w", err)
	}
	// Only this process may read the data, whoever created the directory.
	if err := os.Chmod(opts.Directory, 0o700); err != nil {
		return nil, fmt.Errorf("restricting etcd data directory: %w", err)
	}

	loopback := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg := embed.NewConfig()
	cfg.Name = memberName
	cfg.Dir = opts.Directory
	cfg.ListenClientUrls = []url.URL{loopback}
	cfg.AdvertiseClientUrls = []url.URL{loopback}
	cfg.ListenPeerUrls = []url.URL{loopback}
	cfg.AdvertisePeerUrls = []url.URL{loopback}
	cfg.InitialCluster = cfg.InitialClusterFromName(memberName)
	// The gateway dials the configured client address, which is :0 here; the apiserver
	// speaks gRPC and does not need it.
	cfg.EnableGRPCGateway = false
	cfg.QuotaBackendBytes = opts.QuotaBackendBytes
	// One member has no follower to catch up: etcd's defaults keep 10,000 + 5,000 raft
	// entries, each a whole object, in memory for that.
	cfg.SnapshotCount = 2000
	cfg.SnapshotCatchUpEntries = 500
	if opts.LogLevel == "" {
		// The server's -v decides (see newZapLogger).
		opts.LogLevel = "debug"
	}
	level, err := zap.ParseAtomicLevel(opts.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd log level %q: %w", opts.LogLevel, err)
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(newZapLogger(logger, level))

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting embedded etcd in %s: %w", opts.Directory, err)
	}
	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = time.Minute
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd failed while starting: %w", err)
	case <-time.After(timeout):
		e.Close()
		return nil, fmt.Errorf("embedded etcd did not become ready within %s", timeout)
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("embedded etcd did not start: %w", ctx.Err())
	}

	s := &Server{etcd: e, ClientURL: "http://" + e.Clients[0].Addr().String(), PeerURL: "http://" + e.Peers[0].Listener.Addr().String(), logLevel: level}
	logger.Info("Embedded etcd is ready", "dir", opts.Directory, "clientURL", s.ClientURL, "peerURL", s.PeerURL)
	return s, nil
}

// Close stops etcd gracefully; everything it acknowledged is on disk when Close returns.
func (s *Server) Close() {
	if s == nil || s.etcd == nil {
		return
	}
	s.logLevel.SetLevel(zapcore.FatalLevel)
	s.etcd.Close()
}

// Err reports fatal errors of the running server.
func (s *Server) Err() <-chan error { return s.etcd.Err() }
