package framework

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Netns is a network namespace of its own for one test: only a loopback interface, so
// nothing inside can reach the host's 127.0.0.1 and nothing outside can reach its 127.0.0.1
// except through the Unix-socket bridges made with ForwardIn and ForwardOut.
//
// Processes run inside with Command (ip netns exec). Sockets of this test process are made
// inside by a goroutine that locks its OS thread, joins the namespace with setns, makes the
// socket and joins the thread's own namespace again before unlocking it, so no other goroutine
// ever runs in the wrong namespace. (Ending the locked goroutine instead would not do: Go
// cannot end the main thread, which would then stay in the namespace, and ip netns pids would
// count this whole process as inside.) A socket keeps the namespace it was created in,
// whichever thread uses it later. This keeps everything in one process (no helper binary to build or re-exec, no second
// process to clean up), and the in-process test kubelet can listen and dial inside.
//
// A nil *Netns is the host's namespace: Command, Listen and DialContext then act as usual, so
// the framework's helpers take a *Netns and need no second code path.
type Netns struct {
	// Name is the namespace's name for ip netns: mnt-<pid of this process>-<random>.
	Name string

	fd      int
	sockDir string

	mu      sync.Mutex
	closers []io.Closer
	socks   int
}

// NewNetns creates a network namespace with its loopback interface up. t.Cleanup closes its
// bridges, kills every process inside and deletes it, also when the test fails.
func NewNetns(t testing.TB) *Netns {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("the ip command (iproute2) is needed for network namespace tests: %v", err)
	}
	sweepOrphans(t)
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	n := &Netns{Name: fmt.Sprintf("%s%d-%s", netnsPrefix, os.Getpid(), hex.EncodeToString(b[:])), fd: -1}
	if out, err := exec.Command("ip", "netns", "add", n.Name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", n.Name, err, out)
	}
	t.Cleanup(func() {
		if err := n.destroy(); err != nil {
			t.Errorf("removing network namespace %s: %v", n.Name, err)
		}
	})
	if out, err := n.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip link set lo up in %s: %v: %s", n.Name, err, out)
	}
	fd, err := unix.Open(filepath.Join("/var/run/netns", n.Name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("opening network namespace %s: %v", n.Name, err)
	}
	n.fd = fd
	// Unix socket paths are limited to 108 bytes; t.TempDir's can be longer.
	if n.sockDir, err = os.MkdirTemp("", n.Name+"-"); err != nil {
		t.Fatal(err)
	}
	return n
}

// netnsPrefix starts the names of the framework's namespaces; the creator's pid follows.
const netnsPrefix = "mnt-"

// sweepOrphans deletes the namespaces of test processes that are gone (killed before their
// cleanup ran), with everything left in them. Namespaces of live processes, other tests
// running now, are never touched; a reused pid only keeps an orphan a while longer.
func sweepOrphans(t testing.TB) {
	t.Helper()
	entries, err := os.ReadDir("/var/run/netns")
	if err != nil {
		return // none yet
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), netnsPrefix)
		if !ok {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		orphan := &Netns{Name: e.Name(), fd: -1}
		if dirs, err := filepath.Glob(filepath.Join(os.TempDir(), e.Name()+"-*")); err == nil && len(dirs) == 1 {
			orphan.sockDir = dirs[0]
		}
		if err := orphan.destroy(); err != nil {
			t.Logf("removing the orphaned network namespace %s: %v", e.Name(), err)
		} else {
			t.Logf("removed the orphaned network namespace %s of process %d, which is gone", e.Name(), pid)
		}
	}
}

// Command returns a command that runs name with args inside the namespace. It dies with the
// test process (SIGKILL), as the framework's other processes do.
func (n *Netns) Command(name string, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if n == nil {
		cmd = exec.Command(name, args...)
	} else {
		// ip netns exec replaces itself with the command, so the pid is the command's.
		cmd = exec.Command("ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Listen listens on addr (an IP address, not a host name) inside the namespace.
func (n *Netns) Listen(network, addr string) (net.Listener, error) {
	var l net.Listener
	err := n.do(func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// DialContext dials addr (an IP address, not a host name) inside the namespace.
func (n *Netns) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if n != nil {
		// A host name resolves in other goroutines and may dial several addresses in
		// parallel, on threads outside the namespace.
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if net.ParseIP(host) == nil {
			return nil, fmt.Errorf("dialing %q in network namespace %s: only IP addresses are dialed inside", addr, n.Name)
		}
	}
	var conn net.Conn
	err := n.do(func() error {
		d := net.Dialer{FallbackDelay: -1}
		var err error
		conn, err = d.DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// do runs fn on an OS thread that has joined the namespace, or here for the host's.
func (n *Netns) do(fn func() error) error {
	if n == nil {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread's own namespace (not /proc/self's: that is the main thread's).
		back, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("opening this thread's network namespace: %w", err)
			return
		}
		defer unix.Close(back)
		if err := unix.Setns(n.fd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("joining network namespace %s: %w", n.Name, err)
			return
		}
		err = fn()
		// Back to where it was before the thread serves any other goroutine. Should that
		// fail, the goroutine ends locked and Go ends the thread with it (the main thread
		// cannot end: it would stay in the namespace, parked, serving nothing else).
		if unix.Setns(back, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// ForwardIn makes hostAddr (a TCP address on the host, e.g. mount-apiserver's) reachable from
// inside the namespace: it returns a 127.0.0.1 address inside that forwards, through a Unix
// socket, to hostAddr.
func (n *Netns) ForwardIn(hostAddr string) (string, error) {
	sock := n.sockPath("in")
	outer, err := net.Listen("unix", sock)
	if err != nil {
		return "", err
	}
	inner, err := n.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		outer.Close()
		return "", err
	}
	n.serve(outer, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", hostAddr)
	})
	n.serve(inner, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	})
	return inner.Addr().String(), nil
}

// ForwardOut makes nsAddr (a TCP address on the namespace's 127.0.0.1) reachable from the
// host: it returns a host 127.0.0.1 address that forwards, through a Unix socket, to nsAddr.
// Tests use it for their own setup calls to servers inside.
func (n *Netns) ForwardOut(nsAddr string) (string, error) {
	sock := n.sockPath("out")
	inner, err := net.Listen("unix", sock)
	if err != nil {
		return "", err
	}
	outer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		inner.Close()
		return "", err
	}
	n.serve(inner, func(ctx context.Context) (net.Conn, error) {
		return n.DialContext(ctx, "tcp", nsAddr)
	})
	n.serve(outer, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	})
	return outer.Addr().String(), nil
}

func (n *Netns) sockPath(kind string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.socks++
	return filepath.Join(n.sockDir, kind+strconv.Itoa(n.socks)+".sock")
}

// serve accepts on l until the namespace is destroyed and pipes each connection to a new one
// from dial.
func (n *Netns) serve(l net.Listener, dial func(context.Context) (net.Conn, error)) {
	f := &forwarder{l: l, dial: dial, conns: map[net.Conn]struct{}{}}
	n.mu.Lock()
	n.closers = append(n.closers, f)
	n.mu.Unlock()
	f.wg.Add(1)
	go f.run()
}

// destroy closes the bridges, kills every process inside, and deletes the namespace.
func (n *Netns) destroy() error {
	n.mu.Lock()
	closers := n.closers
	n.closers = nil
	n.mu.Unlock()
	for _, c := range closers {
		_ = c.Close()
	}
	var errs []error
	if err := n.killAll(); err != nil {
		errs = append(errs, err)
	}
	if n.fd >= 0 {
		_ = unix.Close(n.fd)
	}
	if out, err := exec.Command("ip", "netns", "delete", n.Name).CombinedOutput(); err != nil {
		errs = append(errs, fmt.Errorf("ip netns delete: %w: %s", err, out))
	}
	if n.sockDir != "" {
		_ = os.RemoveAll(n.sockDir)
	}
	return errors.Join(errs...)
}

// killAll SIGKILLs every process in the namespace and waits until none is left.
func (n *Netns) killAll() error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		pids, err := n.Pids()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still in network namespace %s", pids, n.Name)
		}
		for _, pid := range pids {
			if pid == os.Getpid() {
				return fmt.Errorf("this test process counts as inside network namespace %s", n.Name)
			}
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Pids returns the processes in the namespace (ip netns pids), zombies excluded.
func (n *Netns) Pids() ([]int, error) {
	out, err := exec.Command("ip", "netns", "pids", n.Name).Output()
	if err != nil {
		return nil, fmt.Errorf("ip netns pids %s: %w", n.Name, err)
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("ip netns pids %s: %q", n.Name, f)
		}
		// A killed child of this process stays a zombie until its Wait; it is gone already.
		if stat, err := os.ReadFile("/proc/" + f + "/stat"); err == nil {
			if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
				continue
			}
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// forwarder pipes the connections accepted on l to connections from dial.
type forwarder struct {
	l    net.Listener
	dial func(context.Context) (net.Conn, error)
	wg   sync.WaitGroup

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
}

func (f *forwarder) run() {
	defer f.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for {
		c, err := f.l.Accept()
		if err != nil {
			return
		}
		if !f.track(c) {
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer f.untrack(c)
			dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
			up, err := f.dial(dctx)
			dcancel()
			if err != nil {
				return
			}
			if !f.track(up) {
				return
			}
			defer f.untrack(up)
			pipe(c, up)
		}()
	}
}

func (f *forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		_ = c.Close()
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *forwarder) untrack(c net.Conn) {
	_ = c.Close()
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
}

// Close stops accepting, closes every connection and waits for the pipes to end.
func (f *forwarder) Close() error {
	err := f.l.Close()
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
	return err
}

// pipe copies both ways until both directions end; an end of one direction is passed on as a
// half-close, so request/response protocols that close their sending side still work.
func pipe(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, err := io.Copy(dst, src)
		if err != nil {
			// A reset, not an end: the other direction cannot go on either.
			_ = a.Close()
			_ = b.Close()
		} else if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
}
