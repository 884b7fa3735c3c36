// Package redistest starts real redis-server processes for tests: standalone
// servers and clusters, each on free loopback ports, each stopped by its own
// process handle when the test ends.
//
// When redis-server is not on PATH the test is skipped with a loud message,
// unless REDLIMIT_REQUIRE_REDIS=1, in which case it fails: CI sets it so a
// missing server can never pass as green.
package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RequireEnv names the environment variable that turns a missing
// redis-server from a skip into a failure when set to "1".
const RequireEnv = "REDLIMIT_REQUIRE_REDIS"

// Missing begins every skip and failure message of a test that needs
// redis-server when none is on PATH. internal/cmd/testall counts the tests
// whose output carries it, to say how many could not run.
const Missing = "redistest: redis-server is not on PATH"

// startTimeout bounds how long a server or cluster may take to come up.
const startTimeout = 20 * time.Second

// Server is one redis-server process on a fixed loopback port. Its methods
// are safe for concurrent use; those that take a testing.TB end the test on
// error, so call them from the test's goroutine.
type Server struct {
	// Addr is host:port on the loopback interface. It never changes, not
	// even across Restart.
	Addr string

	path string   // the redis-server binary
	args []string // its arguments, reused by Restart

	mu     sync.Mutex    // guards cmd, exited and paused
	cmd    *exec.Cmd     // the running process, nil once stopped
	exited chan struct{} // closed when cmd has exited
	paused bool          // SIGSTOP sent and no SIGCONT since
}

// serverPath finds redis-server or ends the test: skip by default, fail when
// RequireEnv is "1".
func serverPath(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err == nil {
		return path
	}
	msg := Missing + ": tests against real Redis CANNOT RUN. " +
		"Install it (apt-get install redis-server) or run .ci/run."
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s %s=1 makes this a failure.", msg, RequireEnv)
	}
	t.Skipf("%s SKIPPING; set %s=1 to fail instead.", msg, RequireEnv)
	return ""
}

// Standalone starts one redis-server for the test and returns it once it
// answers PING. It is stopped when the test and its subtests end.
func Standalone(t testing.TB) *Server {
	t.Helper()
	return start(t, serverPath(t), standalone)
}

// mode says what kind of process to start.
type mode int

const (
	standalone  mode = iota
	clusterNode      // args: extra redis-server arguments, overriding the defaults
	sentinel         // args: the address of the master to monitor
	replica          // args: the address of the master to follow
)

// start launches a process on a free port, retrying a few times in case
// another process takes the port between choosing and binding it.
func start(t testing.TB, path string, m mode, args ...string) *Server {
	t.Helper()
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort(m == clusterNode)
		if err != nil {
			lastErr = err
			continue
		}
		s, err := launch(t, path, port, m, args...)
		if err == nil {
			return s
		}
		lastErr = err
	}
	t.Fatalf("redistest: could not start redis-server: %v", lastErr)
	return nil
}

func launch(t testing.TB, path string, port int, m mode, extra ...string) (*Server, error) {
	dir := t.TempDir()
	args := []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--loglevel", "warning", "--logfile", "",
	}
	switch m {
	case clusterNode:
		args = append(args, "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "5000")
		args = append(args, extra...)
	case replica: // args: the address of the master to follow
		host, masterPort, _ := net.SplitHostPort(extra[0])
		args = append(args, "--replicaof", host, masterPort)
	case sentinel:
		// A sentinel needs a configuration file it can rewrite.
		host, masterPort, _ := net.SplitHostPort(extra[0])
		conf := filepath.Join(dir, "sentinel.conf")
		body := fmt.Sprintf("sentinel monitor %[1]s %[2]s %[3]s 1\n"+
			"sentinel down-after-milliseconds %[1]s 1000\nsentinel failover-timeout %[1]s 10000\n",
			SentinelMaster, host, masterPort)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			return nil, err
		}
		args = append([]string{conf, "--sentinel"}, args[:4]...) // port and bind only
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), path: path, args: args}
	t.Cleanup(s.Stop)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.run(); err != nil {
		return nil, err
	}
	return s, nil
}

// run starts the process and waits until it answers PING; if it does not,
// run kills it and says why. The caller holds s.mu.
func (s *Server) run() error {
	cmd := exec.Command(s.path, s.args...)
	var out LockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	if err := waitReady(s.Addr, exited); err != nil {
		s.kill()
		return fmt.Errorf("%w; server output:\n%s", err, out.String())
	}
	return nil
}

// waitReady polls PING until the server answers, exits, or time runs out.
func waitReady(addr string, exited <-chan struct{}) error {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server on %s exited before answering", addr)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not answer PING within %v: %v", addr, startTimeout, err)
		}
	}
}

// kill sends SIGKILL to the process, if one runs, and waits for it to exit.
// SIGKILL ends a paused (SIGSTOPped) process too. The caller holds s.mu.
func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd, s.paused = nil, false
}

// Client returns a new client of its own (its own connection pool, as a
// separate app instance would have), closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Stop kills the server process, even a paused one, and waits for it to
// exit. It is safe to call more than once and is called by the test's
// cleanup anyway; call it earlier to test what happens when Redis goes
// away, and Restart to bring it back.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kill()
}

// Pause freezes the process with SIGSTOP: it stops answering, but its
// connections stay open and new ones are still accepted by the kernel, so
// clients hang until their timeouts, as with a Redis stuck in a long
// command or a lost network. Resume undoes it; Stop and Restart work on a
// paused server. Pause and Resume may be called in any order, any number of
// times, and do nothing once the server is stopped. Give clients a short
// ReadTimeout and MaxRetries: -1: with go-redis's defaults one command to a
// paused server blocks for about 10 s (3 s read timeout, retried).
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume lets a paused server run again with SIGCONT; it answers what it
// was sent meanwhile. On a server that is not paused it does nothing.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

// signal sends sig to the process, if one runs.
func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
		s.paused = sig == syscall.SIGSTOP
	}
}

// live reports whether the process runs and is not paused, so that it can
// answer.
func (s *Server) live() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil && !s.paused
}

// restartTimeout bounds how long Restart retries binding the old port.
const restartTimeout = 5 * time.Second

// Restart kills the process (running, paused or already stopped) and
// starts a fresh redis-server with the same arguments on the same port, so
// Addr is unchanged and existing clients can reconnect, and returns once it
// answers PING. Nothing persists: the new server starts EMPTY, as after a
// crash without persistence; unless the test made a snapshot (SAVE) since
// the server started, which the new process loads from its directory, as
// after a crash with RDB snapshots. If the port cannot be bound at once (another
// process took it, or it is in TIME_WAIT, though redis-server sets
// SO_REUSEADDR) Restart retries for up to 5 s, then ends the test.
//
// A go-redis Client made before works at once afterwards, without a failed
// command: its pool drops connections the old process closed and dials
// anew. A redis.Conn (Client.Conn) stays broken ("Conn is in a bad state").
//
// Only standalone servers (Standalone, Sentinel.Master) are meant for it. A
// cluster node, replica or sentinel is relaunched with its old arguments
// too, so it rereads its nodes.conf or sentinel.conf. A cluster master that
// a replica replaced (Cluster.WaitPromoted) rejoins at once as a replica
// of its replacement and copies its data; whether other nodes rejoin
// cleanly is untested.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kill()
	deadline := time.Now().Add(restartTimeout)
	for {
		err := s.run()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: restarting redis-server on %s: %v", s.Addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// adminTimeout bounds each command that the helpers below send.
const adminTimeout = 5 * time.Second

// admin sends one command on a fresh connection of its own, which none of
// the test's clients share, and ends the test if it fails (as it does after
// 5 s on a paused server).
func (s *Server) admin(t testing.TB, args ...any) *redis.Cmd {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 1, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	cmd := c.Do(ctx, args...)
	if err := cmd.Err(); err != nil {
		t.Fatalf("redistest: %v on %s: %v", args, s.Addr, err)
	}
	return cmd
}

// KillClients closes the connection of every normal client (CLIENT KILL
// TYPE normal SKIPME yes), as a server-side timeout or a proxy dropping
// connections would, and returns how many it closed. Replicas, Sentinel's
// pub/sub connection and clients in SUBSCRIBE are not normal clients and
// stay connected; Sentinel's command connection is normal and is closed.
// As after Restart, a go-redis Client's pool dials anew and its next
// command succeeds, while a redis.Conn stays broken.
func (s *Server) KillClients(t testing.TB) int {
	t.Helper()
	n, _ := s.admin(t, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Int()
	return n
}

// SlowFor makes the server hold back every client command, reads and writes
// alike, for d (CLIENT PAUSE d ALL, rounded up to whole milliseconds), while
// the process keeps running. It returns at once and the slowness ends by
// itself; commands sent meanwhile are answered when it ends, or time out.
// A d of 0 or less does nothing.
func (s *Server) SlowFor(t testing.TB, d time.Duration) {
	t.Helper()
	if d <= 0 {
		return
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	s.admin(t, "CLIENT", "PAUSE", int64(ms), "ALL")
}

// ClientCount returns how many normal clients are connected (CLIENT LIST
// TYPE normal, not counting the connection that asks). Each go-redis client
// holds up to its pool size of them; Sentinel's command connection counts
// too. A client's closed connection may still count for a moment, until the
// server notices it, so poll when waiting for a count to drop.
func (s *Server) ClientCount(t testing.TB) int {
	t.Helper()
	list, _ := s.admin(t, "CLIENT", "LIST", "TYPE", "normal").Text()
	return len(strings.Split(strings.TrimSpace(list), "\n")) - 1
}

// Cluster is a Redis Cluster: master nodes with the hash slots split evenly
// between them, and, when made by NewClusterReplicas, replicas of each.
// Methods that take a testing.TB end the test on error, so call them from
// the test's goroutine; the others are safe for concurrent use.
type Cluster struct {
	// Nodes is every node, each a Server: first the masters in slot order
	// (Masters), then the replicas grouped by master, in the order of
	// Masters. It shows the roles at start; a failover does not reorder it.
	Nodes []*Server

	masters  []*Server             // the masters at start, in slot order
	replicas map[*Server][]*Server // each master's replicas at start
	masterOf map[*Server]*Server   // each replica's master at start
	ids      map[*Server]string    // every node's cluster node ID
}

// NewCluster starts masters redis-server processes (at least 1) in cluster
// mode, assigns the 16384 slots evenly, joins them, and returns once every
// node reports cluster_state:ok and every node's CLUSTER NODES agrees. The
// nodes have no replicas and a cluster-node-timeout of 5000 ms; for
// failover tests see NewClusterReplicas. The nodes stop when the test ends.
func NewCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	if masters < 1 {
		t.Fatalf("redistest: NewCluster(%d): need at least one master", masters)
	}
	return newCluster(t, masters, 0, nil)
}

// Addrs returns the nodes' addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

// Client returns a new cluster client of its own, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// freePort asks the kernel for a free loopback port. For a cluster node the
// bus port (port+10000) must be free too.
func freePort(cluster bool) (int, error) {
	for i := 0; i < 20; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		if !cluster {
			return port, nil
		}
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		if err != nil {
			continue
		}
		_ = bus.Close()
		return port, nil
	}
	return 0, errors.New("no free loopback port pair for a cluster node")
}

// LockedBuffer collects output written from other goroutines (a process's,
// a logger's), safe for concurrent use; a failing start reads it.
type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written.
func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Servers runs f as parallel subtests "standalone", "cluster" and
// "sentinel", on a fresh standalone server, a fresh 3-master cluster and a
// fresh master behind a Sentinel. newClient makes an independent client of
// that Redis each time it is called (its own pool, as another app instance
// would have), closed when the test ends.
func Servers(t *testing.T, f func(t *testing.T, newClient func() redis.UniversalClient)) {
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		s := Standalone(t)
		f(t, func() redis.UniversalClient { return s.Client(t) })
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		c := NewCluster(t, 3)
		f(t, func() redis.UniversalClient { return c.Client(t) })
	})
	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		s := NewSentinel(t)
		f(t, func() redis.UniversalClient { return s.Client(t) })
	})
}

// Silent returns the address of a loopback server that accepts connections
// and never answers: a Redis that hangs. It stops when the test ends.
func Silent(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	var mu sync.Mutex
	var held []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	return ln.Addr().String()
}

// CommandStat is one command's line of INFO commandstats.
type CommandStat struct {
	Calls       float64
	Usec        float64
	UsecPerCall float64
}

// CommandStats reads INFO commandstats into a map keyed by command name
// ("evalsha", "get", ...). After CONFIG RESETSTAT it measures what the
// server spent on each command since.
func CommandStats(ctx context.Context, rdb redis.UniversalClient) (map[string]CommandStat, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	stats := map[string]CommandStat{}
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var s CommandStat
		for _, field := range strings.Split(fields, ",") {
			key, value, _ := strings.Cut(field, "=")
			f, _ := strconv.ParseFloat(value, 64)
			switch key {
			case "calls":
				s.Calls = f
			case "usec":
				s.Usec = f
			case "usec_per_call":
				s.UsecPerCall = f
			}
		}
		stats[strings.TrimPrefix(name, "cmdstat_")] = s
	}
	return stats, nil
}

// SentinelMaster is the name under which Sentinel monitors the master.
const SentinelMaster = "redistest"

// Sentinel is a master and a Sentinel monitoring it, as a Redis Sentinel
// deployment is seen by clients.
type Sentinel struct {
	Master   *Server
	Sentinel *Server

	clients []*redis.Client
	next    atomic.Int64
}

// sentinelClients is how many independent Sentinel-aware clients
// NewSentinel prepares. They are made up front, concurrently, because
// go-redis's NewFailoverClient looks up a host name while it constructs
// (maintenance-notification endpoint detection), which stalls for the
// resolver's timeout, 2 s here, on a host without DNS.
const sentinelClients = 8

// NewSentinel starts a master and one Sentinel monitoring it, and returns
// once the Sentinel reports the master's address. Both stop when the test
// ends.
func NewSentinel(t testing.TB) *Sentinel {
	t.Helper()
	path := serverPath(t)
	master := start(t, path, standalone)
	s := &Sentinel{Master: master, Sentinel: start(t, path, sentinel, master.Addr)}
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinel.Addr})
	defer c.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		addr, err := c.GetMasterAddrByName(ctx, SentinelMaster).Result()
		cancel()
		if err == nil && len(addr) == 2 && net.JoinHostPort(addr[0], addr[1]) == master.Addr {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: the sentinel on %s does not report master %s: %v %v", s.Sentinel.Addr, master.Addr, addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	s.clients = make([]*redis.Client, sentinelClients)
	var wg sync.WaitGroup
	for i := range s.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.clients[i] = redis.NewFailoverClient(&redis.FailoverOptions{
				MasterName: SentinelMaster, SentinelAddrs: []string{s.Sentinel.Addr}})
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range s.clients {
			_ = c.Close()
		}
	})
	return s
}

// AddReplica starts a replica of the master and returns once the master
// and the Sentinel both know it, so that Sentinel can promote it when the
// master fails. It stops when the test ends.
func (s *Sentinel) AddReplica(t testing.TB) *Server {
	t.Helper()
	r := start(t, serverPath(t), replica, s.Master.Addr)
	master := redis.NewClient(&redis.Options{Addr: s.Master.Addr})
	defer master.Close()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinel.Addr})
	defer sc.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := master.Info(ctx, "replication").Result()
		replicas, serr := sc.Replicas(ctx, SentinelMaster).Result()
		cancel()
		if err == nil && serr == nil && strings.Contains(info, "connected_slaves:1") && len(replicas) == 1 {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: replica %s not known to the master and the sentinel: %v %v", r.Addr, err, serr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Client returns a Sentinel-aware client (go-redis's FailoverClient, asking
// the Sentinel for the master). Consecutive calls return different clients,
// each with its own pool, cycling through a fixed set of eight that close
// when the test that made the Sentinel ends.
func (s *Sentinel) Client(testing.TB) *redis.Client {
	return s.clients[int(s.next.Add(1)-1)%len(s.clients)]
}
