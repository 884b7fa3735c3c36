package redistest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// slotCount is the number of hash slots of a Redis Cluster.
const slotCount = 16384

// Slot returns the hash slot of key, as CLUSTER KEYSLOT does: CRC16
// (XMODEM) of the key modulo 16384, hashing only the hash tag when the key
// has one (the bytes between the first '{' and the first '}' after it, if
// there are any).
func Slot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			key = key[open+1 : open+1+n]
		}
	}
	return int(crc16(key) % slotCount)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the
// checksum Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// ClusterOption changes how NewClusterReplicas configures its nodes.
type ClusterOption func(*clusterConfig)

type clusterConfig struct {
	nodeTimeout time.Duration
	args        []string // extra redis-server arguments
}

// NodeTimeout sets cluster-node-timeout (default 1000 ms for
// NewClusterReplicas): how long a node may stay unreachable before the
// others flag it as failing, which is the bulk of a failover's duration.
// It is rounded up to whole milliseconds.
func NodeTimeout(d time.Duration) ClusterOption {
	return func(c *clusterConfig) { c.nodeTimeout = d }
}

// NodeConfig sets a redis-server configuration directive on every node,
// overriding the defaults, as in NodeConfig("cluster-require-full-coverage",
// "no") to keep the healthy masters serving while a master is down.
func NodeConfig(name, value string) ClusterOption {
	return func(c *clusterConfig) { c.args = append(c.args, "--"+name, value) }
}

// NewClusterReplicas starts a Redis Cluster of masters masters (at least 1)
// with the 16384 slots split evenly between them, as NewCluster does, and
// replicasPerMaster replicas (at least 0) of each, each attached with
// CLUSTER REPLICATE. It returns once every node reports cluster_state:ok,
// every replica reports master_link_status:up, and every node's CLUSTER
// NODES shows that topology with no node flagged failing. Startup takes 2
// to 3 s, as NewCluster's: a master only turns its state ok 2 s after it
// started. The nodes stop when the test ends.
//
// The nodes are set up for fast, predictable failover:
//
//   - cluster-node-timeout 1000 (see NodeTimeout), so that a replica
//     replaces a stopped or paused master in 2.1 to 2.6 s (see
//     WaitPromoted);
//   - cluster-replica-validity-factor 0: a replica always stands for
//     election, however long it was cut off from its master;
//   - cluster-allow-replica-migration no: replicas stay with the master
//     they were given (or the replica promoted in its place), so Replicas
//     stays meaningful;
//   - repl-diskless-sync-delay 0: a replica's first sync starts at once
//     instead of after 5 s.
//
// A failover needs a majority of the masters to flag the failed one, so
// with fewer than 3 masters no replica is ever promoted.
//
// The defaults otherwise stay, notably cluster-require-full-coverage yes:
// from the moment the others flag a master as failed until its replica
// takes over, every node answers CLUSTERDOWN, for all keys. NodeConfig
// changes any of these.
func NewClusterReplicas(t testing.TB, masters, replicasPerMaster int, opts ...ClusterOption) *Cluster {
	t.Helper()
	if masters < 1 || replicasPerMaster < 0 {
		t.Fatalf("redistest: NewClusterReplicas(%d, %d): need at least one master and no negative replica count",
			masters, replicasPerMaster)
	}
	cfg := clusterConfig{nodeTimeout: time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	ms := (cfg.nodeTimeout + time.Millisecond - 1) / time.Millisecond
	if ms < 1 {
		t.Fatalf("redistest: NewClusterReplicas: NodeTimeout(%v) is not positive", cfg.nodeTimeout)
	}
	args := append([]string{
		"--cluster-node-timeout", strconv.FormatInt(int64(ms), 10),
		"--cluster-replica-validity-factor", "0",
		"--cluster-allow-replica-migration", "no",
		"--repl-diskless-sync-delay", "0",
	}, cfg.args...)
	return newCluster(t, masters, replicasPerMaster, args)
}

// newCluster starts the nodes with the given extra arguments and forms the
// cluster.
func newCluster(t testing.TB, masters, replicasPerMaster int, args []string) *Cluster {
	t.Helper()
	path := serverPath(t)
	c := &Cluster{
		replicas: map[*Server][]*Server{},
		masterOf: map[*Server]*Server{},
		ids:      map[*Server]string{},
	}
	for range masters {
		m := start(t, path, clusterNode, args...)
		c.Nodes = append(c.Nodes, m)
		c.masters = append(c.masters, m)
	}
	for _, m := range c.masters {
		for range replicasPerMaster {
			r := start(t, path, clusterNode, args...)
			c.Nodes = append(c.Nodes, r)
			c.replicas[m] = append(c.replicas[m], r)
			c.masterOf[r] = m
		}
	}
	if err := c.form(); err != nil {
		if replicasPerMaster == 0 {
			t.Fatalf("redistest: forming a %d-master cluster: %v", masters, err)
		}
		t.Fatalf("redistest: forming a cluster of %d masters with %d replicas each: %v", masters, replicasPerMaster, err)
	}
	return c
}

// form assigns slots, introduces the nodes, attaches the replicas, and
// waits for agreement.
func (c *Cluster) form() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	clients := map[*Server]*redis.Client{}
	for _, n := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		defer cl.Close()
		clients[n] = cl
		id, err := cl.ClusterMyID(ctx).Result()
		if err != nil {
			return fmt.Errorf("CLUSTER MYID on %s: %w", n.Addr, err)
		}
		c.ids[n] = id
	}
	for i, m := range c.masters {
		lo, hi := masterSlots(i, len(c.masters))
		if err := clients[m].ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			return fmt.Errorf("ADDSLOTS %d-%d on %s: %w", lo, hi, m.Addr, err)
		}
		// Each master an epoch of its own, as redis-cli --cluster create
		// does: else they all start at 0, and while the nodes resolve the
		// collisions (seconds after forming) a master's epoch can rise
		// past the one a slot migration gave the slot's new owner, whose
		// claim on the slot the others then refuse.
		if err := clients[m].Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("SET-CONFIG-EPOCH %d on %s: %w", i+1, m.Addr, err)
		}
	}
	for _, n := range c.Nodes[1:] {
		host, port, _ := net.SplitHostPort(n.Addr)
		if err := clients[c.Nodes[0]].ClusterMeet(ctx, host, port).Err(); err != nil {
			return fmt.Errorf("MEET %s: %w", n.Addr, err)
		}
	}
	// A replica can follow its master only once it knows the master's ID,
	// which takes a round of gossip after MEET: retry until then.
	for _, m := range c.masters {
		for _, r := range c.replicas[m] {
			for {
				err := clients[r].ClusterReplicate(ctx, c.ids[m]).Err()
				if err == nil {
					break
				}
				if !sleepCtx(ctx, 20*time.Millisecond) {
					return fmt.Errorf("CLUSTER REPLICATE %s (%s) on %s: %w", c.ids[m], m.Addr, r.Addr, err)
				}
			}
		}
	}
	for {
		err := c.formed(ctx, clients)
		if err == nil {
			return nil
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return fmt.Errorf("not formed within %v: %w", startTimeout, err)
		}
	}
}

// masterSlots returns the slots that the i-th of n masters gets at start.
func masterSlots(i, n int) (lo, hi int) {
	return i * slotCount / n, (i+1)*slotCount/n - 1
}

// sleepCtx sleeps for d and reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return ctx.Err() == nil
	}
}

// formed says what, if anything, keeps the cluster from being as form
// built it.
func (c *Cluster) formed(ctx context.Context, clients map[*Server]*redis.Client) error {
	wantKnown := fmt.Sprintf("cluster_known_nodes:%d", len(c.Nodes))
	for _, n := range c.Nodes {
		info, err := clients[n].ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("CLUSTER INFO on %s: %w", n.Addr, err)
		}
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, wantKnown) {
			return fmt.Errorf("%s is not ok yet or does not know all %d nodes", n.Addr, len(c.Nodes))
		}
		if m := c.masterOf[n]; m != nil {
			repl, err := clients[n].Info(ctx, "replication").Result()
			if err != nil {
				return fmt.Errorf("INFO replication on %s: %w", n.Addr, err)
			}
			if !strings.Contains(repl, "master_link_status:up") {
				return fmt.Errorf("replica %s: link to master %s not up", n.Addr, m.Addr)
			}
		}
		text, err := clients[n].ClusterNodes(ctx).Result()
		if err != nil {
			return fmt.Errorf("CLUSTER NODES on %s: %w", n.Addr, err)
		}
		if err := c.viewFormed(parseNodes(text)); err != nil {
			return fmt.Errorf("the view of %s: %w", n.Addr, err)
		}
	}
	return nil
}

// viewFormed checks one node's CLUSTER NODES against the topology form
// built.
func (c *Cluster) viewFormed(view []nodeInfo) error {
	if len(view) != len(c.Nodes) {
		return fmt.Errorf("%d nodes listed, want %d", len(view), len(c.Nodes))
	}
	byID := map[string]nodeInfo{}
	for _, n := range view {
		byID[n.id] = n
	}
	for i, s := range c.Nodes {
		n, ok := byID[c.ids[s]]
		switch {
		case !ok:
			return fmt.Errorf("%s (%s) missing", s.Addr, c.ids[s])
		case n.addr != s.Addr:
			return fmt.Errorf("%s listed at %s", s.Addr, n.addr)
		case n.has("fail") || n.has("fail?") || n.has("handshake") || n.has("noaddr"):
			return fmt.Errorf("%s flagged %s", s.Addr, n.flags)
		}
		if m := c.masterOf[s]; m != nil {
			if !n.has("slave") || n.masterID != c.ids[m] || len(n.slots) != 0 {
				return fmt.Errorf("%s is not yet a replica of %s: %s", s.Addr, m.Addr, n.raw)
			}
			continue
		}
		lo, hi := masterSlots(i, len(c.masters))
		if !n.has("master") || len(n.slots) != 1 || n.slots[0] != [2]int{lo, hi} {
			return fmt.Errorf("%s is not yet a master of slots %d-%d: %s", s.Addr, lo, hi, n.raw)
		}
	}
	return nil
}

// nodeInfo is one line of CLUSTER NODES.
type nodeInfo struct {
	id, addr string
	flags    string // comma-separated: myself, master, slave, fail?, fail, ...
	masterID string // "-" for a master
	epoch    int64  // config epoch
	slots    [][2]int
	raw      string // the whole line, for messages and migration states
}

// has reports whether the node carries flag.
func (n nodeInfo) has(flag string) bool {
	for _, f := range strings.Split(n.flags, ",") {
		if f == flag {
			return true
		}
	}
	return false
}

// owns reports whether slot is among the node's slots.
func (n nodeInfo) owns(slot int) bool {
	for _, r := range n.slots {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}

// ownsAny reports whether any of the slots in ranges is among the node's.
func (n nodeInfo) ownsAny(ranges [][2]int) bool {
	for _, a := range n.slots {
		for _, b := range ranges {
			if a[0] <= b[1] && b[0] <= a[1] {
				return true
			}
		}
	}
	return false
}

// ownsAll reports whether every slot in ranges is among the node's.
func (n nodeInfo) ownsAll(ranges [][2]int) bool {
	for _, r := range ranges {
		for s := r[0]; s <= r[1]; s++ {
			if !n.owns(s) {
				return false
			}
		}
	}
	return true
}

// parseNodes parses CLUSTER NODES. Addresses lose their bus port
// ("127.0.0.1:7000@17000" becomes "127.0.0.1:7000"), and a node that never
// met another, so never learned its own IP, gets 127.0.0.1, where every
// node here listens (":7000@17000" becomes "127.0.0.1:7000"); slots in migration
// ("[5->-id]", "[5-<-id]", on the myself line only) are left out of slots
// but stay in raw.
func parseNodes(text string) []nodeInfo {
	var nodes []nodeInfo
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		if strings.HasPrefix(addr, ":") {
			addr = "127.0.0.1" + addr
		}
		epoch, _ := strconv.ParseInt(f[6], 10, 64)
		n := nodeInfo{id: f[0], addr: addr, flags: f[2], masterID: f[3], epoch: epoch, raw: line}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue
			}
			loText, hiText, isRange := strings.Cut(s, "-")
			lo, err1 := strconv.Atoi(loText)
			hi, err2 := lo, error(nil)
			if isRange {
				hi, err2 = strconv.Atoi(hiText)
			}
			if err1 == nil && err2 == nil {
				n.slots = append(n.slots, [2]int{lo, hi})
			}
		}
		nodes = append(nodes, n)
	}
	return nodes
}

// myself returns the line of the node that answered.
func myself(view []nodeInfo) (nodeInfo, bool) {
	for _, n := range view {
		if n.has("myself") {
			return n, true
		}
	}
	return nodeInfo{}, false
}

// conns holds one client per node for the duration of a helper, so that
// polling does not dial anew each time. Every command has its own timeout.
type conns struct {
	timeout time.Duration
	clients map[*Server]*redis.Client
}

func newConns(timeout time.Duration) *conns {
	return &conns{timeout: timeout, clients: map[*Server]*redis.Client{}}
}

// do sends one command to s.
func (cs *conns) do(s *Server, args ...any) *redis.Cmd {
	cl := cs.clients[s]
	if cl == nil {
		cl = redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 1, MaxRetries: -1,
			DialTimeout: cs.timeout, ReadTimeout: cs.timeout, WriteTimeout: cs.timeout})
		cs.clients[s] = cl
	}
	ctx, cancel := context.WithTimeout(context.Background(), cs.timeout)
	defer cancel()
	return cl.Do(ctx, args...)
}

// view returns s's CLUSTER NODES.
func (cs *conns) view(s *Server) ([]nodeInfo, error) {
	text, err := cs.do(s, "CLUSTER", "NODES").Text()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES on %s: %w", s.Addr, err)
	}
	return parseNodes(text), nil
}

func (cs *conns) close() {
	for _, cl := range cs.clients {
		_ = cl.Close()
	}
}

// Masters returns the masters at start, in slot order: the i-th of n
// serves slots i*16384/n to (i+1)*16384/n-1. After a failover or a
// migration ask Owner who serves a slot now.
func (c *Cluster) Masters() []*Server {
	return append([]*Server(nil), c.masters...)
}

// Replicas returns the replicas that followed master at start (none for a
// cluster made by NewCluster, or for a node that was not a master).
func (c *Cluster) Replicas(master *Server) []*Server {
	return append([]*Server(nil), c.replicas[master]...)
}

// MasterOf returns the master that replica followed at start, or nil if it
// was not a replica.
func (c *Cluster) MasterOf(replica *Server) *Server {
	return c.masterOf[replica]
}

// ID returns the node's cluster node ID (CLUSTER MYID), or "" if s is not
// a node of c.
func (c *Cluster) ID(s *Server) string {
	return c.ids[s]
}

// id returns the node's ID or ends the test.
func (c *Cluster) id(t testing.TB, s *Server) string {
	t.Helper()
	id := c.ids[s]
	if id == "" {
		addr := "<nil>"
		if s != nil {
			addr = s.Addr
		}
		t.Fatalf("redistest: %s is not a node of this cluster", addr)
	}
	return id
}

// byAddr returns the node at addr, or nil.
func (c *Cluster) byAddr(addr string) *Server {
	for _, s := range c.Nodes {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// checkSlot ends the test if slot is not a hash slot.
func checkSlot(t testing.TB, slot int) {
	t.Helper()
	if slot < 0 || slot >= slotCount {
		t.Fatalf("redistest: slot %d is not in 0-%d", slot, slotCount-1)
	}
}

// Owner returns the master that serves slot now. It asks every running,
// unpaused node who it is: among those that claim the slot as masters (in
// the myself line of their CLUSTER NODES), the one with the highest config
// epoch wins, as it does in the cluster, so a master that a failover or
// a migration has replaced but not yet told counts for nothing. It ends
// the test if no node claims the slot, as between a master's death and its
// replacement: call WaitPromoted first.
func (c *Cluster) Owner(t testing.TB, slot int) *Server {
	t.Helper()
	checkSlot(t, slot)
	cs := newConns(adminTimeout)
	defer cs.close()
	var owner *Server
	var epoch int64
	for _, s := range c.Nodes {
		if !s.live() {
			continue
		}
		view, err := cs.view(s)
		if err != nil {
			t.Fatalf("redistest: who owns slot %d: %v", slot, err)
		}
		me, ok := myself(view)
		if ok && me.has("master") && me.owns(slot) && (owner == nil || me.epoch > epoch) {
			owner, epoch = s, me.epoch
		}
	}
	if owner == nil {
		t.Fatalf("redistest: no running master claims slot %d (its master stopped or paused, and no replica replaced it yet?)", slot)
	}
	return owner
}

// pollInterval is how often WaitPromoted asks.
const pollInterval = 10 * time.Millisecond

// WaitPromoted waits, for up to timeout, until a replica has replaced dead,
// a master that the test stopped or paused, and returns that replica and
// the instant the promotion was first observed: when the replica, polled
// every 10 ms, first reported itself master of the slots dead had served
// (its own CLUSTER NODES). Its slots are then served, if clients ask it.
// WaitPromoted returns only once every running, unpaused node's CLUSTER
// NODES agrees: the replica owns those slots and nothing else does, dead
// least of all. Usually that agreement follows within a few ms.
//
// The replicas considered are dead's at start (Replicas) and any that
// follow it now in the nodes' view, so a master that was itself promoted
// can be waited for again. It ends the test if dead has no replica or time
// runs out.
//
// With NewClusterReplicas's cluster-node-timeout of 1000 ms a promotion
// takes 2.1 to 2.6 s from Stop or Pause: measured on loopback over 8 runs
// each (3 masters with 1 replica each), the same for both. The node
// timeout must pass unanswered, after up to half of it waiting for the next
// ping, a majority of masters must flag the node, and then the replica
// waits 500 ms, plus up to 500 ms at random, plus 1 s per replica of the
// same master better placed than itself, before it stands for election.
// With NodeTimeout(500*time.Millisecond) it took 1.6 to 1.9 s, with 2 s
// 2.8 to 4.4 s. Until then, with cluster-require-full-coverage yes, the
// whole cluster answers CLUSTERDOWN once the master is flagged failed.
//
// A go-redis ClusterClient keeps sending the dead master's slots to the
// dead master, failing, after the promotion: it rereads the slot map only
// after a MOVED or ASK reply, on ReloadState, or every
// ClusterStateReloadInterval (60 s by default), not on a refused
// connection or a timeout.
func (c *Cluster) WaitPromoted(t testing.TB, dead *Server, timeout time.Duration) (*Server, time.Time) {
	t.Helper()
	deadID := c.id(t, dead)
	cs := newConns(200 * time.Millisecond)
	defer cs.close()
	deadline := time.Now().Add(timeout)

	// Which nodes may replace dead, and what did it serve? Ask the
	// survivors before anything moves further.
	candidates, deadSlots := c.successors(cs, dead, deadID)
	if len(candidates) == 0 {
		t.Fatalf("redistest: WaitPromoted: no replica follows %s, so none can replace it", dead.Addr)
	}

	var promoted *Server
	var at time.Time
	problem := "no replica of it reported itself master yet"
	for {
		if promoted == nil {
			promoted, at, deadSlots = claimant(cs, candidates, deadSlots)
		}
		if promoted != nil {
			problem = c.agree(cs, dead, promoted, deadSlots)
			if problem == "" {
				return promoted, at
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: WaitPromoted: %s (%s) not replaced within %v; candidates %v: %s",
				dead.Addr, deadID, timeout, addrs(candidates), problem)
		}
		time.Sleep(pollInterval)
	}
}

// successors returns the nodes that may replace dead, whose id is deadID:
// its replicas at start (Replicas) and any node a running survivor sees
// following it now; and the slots dead served, as the first survivor that
// knows it says.
func (c *Cluster) successors(cs *conns, dead *Server, deadID string) ([]*Server, [][2]int) {
	candidates := c.Replicas(dead)
	var deadSlots [][2]int
	for _, s := range c.Nodes {
		if s == dead || !s.live() {
			continue
		}
		view, err := cs.view(s)
		if err != nil {
			continue
		}
		for _, n := range view {
			if n.id == deadID && len(deadSlots) == 0 {
				deadSlots = n.slots
			}
			if r := c.byAddr(n.addr); r != nil && n.masterID == deadID && !contains(candidates, r) {
				candidates = append(candidates, r)
			}
		}
	}
	return candidates, deadSlots
}

// claimant returns the first running candidate that reports itself a
// master owning every one of slots, when it said so, and the slots it
// owns; or nil, the zero time and slots if none does yet.
func claimant(cs *conns, candidates []*Server, slots [][2]int) (*Server, time.Time, [][2]int) {
	for _, r := range candidates {
		if !r.live() {
			continue
		}
		view, err := cs.view(r)
		now := time.Now()
		if err != nil {
			continue
		}
		me, ok := myself(view)
		if ok && me.has("master") && len(me.slots) > 0 && me.ownsAll(slots) {
			return r, now, me.slots
		}
	}
	return nil, time.Time{}, slots
}

// agree returns "" if every running, unpaused node other than dead sees
// owner as the master of slots and no other node owning any of them, or
// else what is amiss.
func (c *Cluster) agree(cs *conns, dead, owner *Server, slots [][2]int) string {
	ownerID := c.ids[owner]
	for _, s := range c.Nodes {
		if s == dead || !s.live() {
			continue
		}
		view, err := cs.view(s)
		if err != nil {
			return err.Error()
		}
		found := false
		for _, n := range view {
			if n.id == ownerID {
				found = true
				if !n.has("master") || !n.ownsAll(slots) {
					return fmt.Sprintf("%s does not yet see %s as master of its slots: %s", s.Addr, owner.Addr, n.raw)
				}
			} else if n.ownsAny(slots) {
				return fmt.Sprintf("%s still sees slots of %s on another node: %s", s.Addr, owner.Addr, n.raw)
			}
		}
		if !found {
			return fmt.Sprintf("%s does not know %s", s.Addr, owner.Addr)
		}
	}
	return ""
}

func contains(list []*Server, s *Server) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func addrs(list []*Server) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = s.Addr
	}
	return out
}

// MigrateOption changes how MigrateSlot moves keys.
type MigrateOption func(*migrateConfig)

type migrateConfig struct {
	batch int
	pause time.Duration
	hook  func(moved int)
}

// MigrateBatch sets how many keys each MIGRATE moves (default 10, as
// redis-cli's --cluster-pipeline).
func MigrateBatch(n int) MigrateOption {
	return func(c *migrateConfig) { c.batch = n }
}

// MigratePause makes MigrateSlot sleep for d after each batch (default 0),
// to keep the slot migrating, its keys split between both nodes, for
// about d times the number of batches.
func MigratePause(d time.Duration) MigrateOption {
	return func(c *migrateConfig) { c.pause = d }
}

// MigrateOnBatch makes MigrateSlot call f after each batch, before the
// pause, with the number of keys moved so far. The slot is still
// MIGRATING on the source and IMPORTING on the target then; f runs on
// MigrateSlot's goroutine and may end the test.
func MigrateOnBatch(f func(moved int)) MigrateOption {
	return func(c *migrateConfig) { c.hook = f }
}

// migrateTimeout bounds MigrateSlot's own work, not counting its pauses
// and calls of the MigrateOnBatch function.
const migrateTimeout = 20 * time.Second

// migrateIOTimeout is MIGRATE's timeout argument, in milliseconds.
const migrateIOTimeout = 5000

// MigrateSlot moves slot, with its keys, from the master that serves it
// now (Owner) to the master to, by the protocol redis-cli --cluster uses:
//
//  1. CLUSTER SETSLOT slot IMPORTING on to, then MIGRATING on the source;
//  2. CLUSTER GETKEYSINSLOT and MIGRATE ... KEYS on the source, a batch at
//     a time (MigrateBatch, MigratePause, MigrateOnBatch), until the
//     source has no key of the slot left;
//  3. CLUSTER SETSLOT slot NODE on to, then on the source, then on every
//     other running master. If the source refuses because a key of the
//     slot appeared meanwhile, it moves that too and tries again.
//
// Clients may write to the slot all along: while it migrates, the source
// answers commands on keys it still holds and redirects the others with
// -ASK to to, where they are created (go-redis's ClusterClient follows
// ASK by itself, sending ASKING first). A multi-key command or script gets
// -TRYAGAIN while its keys are split between the nodes, and also, on
// either node, whenever one of its keys does not exist yet: a script that
// creates a key next to an existing one fails for the whole migration.
// go-redis retries -TRYAGAIN up to MaxRedirects (3) times, with a short
// backoff, then returns it. Afterwards the source redirects with -MOVED.
//
// MigrateSlot returns once every running, unpaused node's CLUSTER NODES
// shows to as the slot's only owner and no node marks it migrating or
// importing. It ends the test if to is not a running master of the
// cluster, if a command fails, or if its own work takes more than 20 s.
// If to already serves slot, it does nothing.
func (c *Cluster) MigrateSlot(t testing.TB, slot int, to *Server, opts ...MigrateOption) {
	t.Helper()
	cfg := migrateConfig{batch: 10}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.batch < 1 {
		t.Fatalf("redistest: MigrateSlot: MigrateBatch(%d) is not positive", cfg.batch)
	}
	checkSlot(t, slot)
	toID := c.id(t, to)
	if !to.live() {
		t.Fatalf("redistest: MigrateSlot: target %s is stopped or paused", to.Addr)
	}
	from := c.Owner(t, slot)
	if from == to {
		return
	}
	m := &migration{c: c, t: t, cs: newConns(adminTimeout), cfg: cfg, slot: slot, from: from, to: to, toID: toID}
	defer m.cs.close()
	m.checkTarget()
	m.must(to, "CLUSTER", "SETSLOT", slot, "IMPORTING", c.ids[from])
	m.must(from, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID)
	m.deadline = time.Now().Add(migrateTimeout)
	m.drain()
	m.assign()
	m.awaitSettled()
}

// migration is one MigrateSlot call under way.
type migration struct {
	c        *Cluster
	t        testing.TB
	cs       *conns
	cfg      migrateConfig
	slot     int
	from, to *Server
	toID     string
	deadline time.Time // bounds the migration's own work: moved on by its pauses and hooks
	moved    int       // keys moved so far
}

// fail ends the test, saying what went wrong with the migration.
func (m *migration) fail(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("redistest: migrating slot %d from %s to %s: %s", m.slot, m.from.Addr, m.to.Addr, fmt.Sprintf(format, args...))
}

// must sends the command args to s, failing the migration if it fails.
func (m *migration) must(s *Server, args ...any) *redis.Cmd {
	m.t.Helper()
	cmd := m.cs.do(s, args...)
	if err := cmd.Err(); err != nil {
		m.fail("%v on %s: %v", args, s.Addr, err)
	}
	return cmd
}

// checkTarget fails the migration unless the target says it is a master.
func (m *migration) checkTarget() {
	m.t.Helper()
	view, err := m.cs.view(m.to)
	if err != nil {
		m.fail("%v", err)
	}
	if me, ok := myself(view); !ok || !me.has("master") {
		m.fail("the target is not a master: %s", me.raw)
	}
}

// drain moves the slot's keys from the source to the target, a batch of
// them per MIGRATE (with the pause and hook of MigratePause and
// MigrateOnBatch after each), until the source holds none.
func (m *migration) drain() {
	m.t.Helper()
	host, port, _ := net.SplitHostPort(m.to.Addr)
	for {
		if time.Now().After(m.deadline) {
			m.fail("keys still left on the source after %v (%d moved)", migrateTimeout, m.moved)
		}
		keys, err := m.cs.do(m.from, "CLUSTER", "GETKEYSINSLOT", m.slot, m.cfg.batch).StringSlice()
		if err != nil {
			m.fail("CLUSTER GETKEYSINSLOT on the source: %v", err)
		}
		if len(keys) == 0 {
			return
		}
		args := []any{"MIGRATE", host, port, "", 0, migrateIOTimeout, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		m.must(m.from, args...)
		m.moved += len(keys)
		if m.cfg.hook != nil || m.cfg.pause > 0 {
			began := time.Now()
			if m.cfg.hook != nil {
				m.cfg.hook(m.moved)
			}
			time.Sleep(m.cfg.pause)
			m.deadline = m.deadline.Add(time.Since(began))
		}
	}
}

// assign gives the slot to the target: CLUSTER SETSLOT NODE on it, then on
// the source (moving the keys that appeared meanwhile, and trying again),
// then on every other running master.
func (m *migration) assign() {
	m.t.Helper()
	m.must(m.to, "CLUSTER", "SETSLOT", m.slot, "NODE", m.toID)
	for attempt := 0; ; attempt++ {
		err := m.cs.do(m.from, "CLUSTER", "SETSLOT", m.slot, "NODE", m.toID).Err()
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "still hold keys") || attempt >= 10 {
			m.fail("CLUSTER SETSLOT %d NODE on the source: %v", m.slot, err)
		}
		m.drain()
	}
	view, err := m.cs.view(m.to)
	if err != nil {
		m.fail("%v", err)
	}
	for _, n := range view {
		s := m.c.byAddr(n.addr)
		if s == nil || s == m.to || s == m.from || !n.has("master") || !s.live() {
			continue
		}
		m.must(s, "CLUSTER", "SETSLOT", m.slot, "NODE", m.toID)
	}
}

// awaitSettled waits until every running node sees the target as the
// slot's only owner, none marking it migrating or importing.
func (m *migration) awaitSettled() {
	m.t.Helper()
	for {
		problem := m.c.slotSettled(m.cs, m.slot, m.to)
		if problem == "" {
			return
		}
		if time.Now().After(m.deadline) {
			m.fail("the nodes do not agree on the new owner: %s", problem)
		}
		time.Sleep(pollInterval)
	}
}

// slotSettled returns "" if every running, unpaused node sees owner as the
// only owner of slot and none marks it migrating or importing, or else
// what is amiss.
func (c *Cluster) slotSettled(cs *conns, slot int, owner *Server) string {
	ownerID := c.ids[owner]
	mark := "[" + strconv.Itoa(slot) + "-"
	for _, s := range c.Nodes {
		if !s.live() {
			continue
		}
		view, err := cs.view(s)
		if err != nil {
			return err.Error()
		}
		for _, n := range view {
			if (n.id == ownerID) != n.owns(slot) {
				return fmt.Sprintf("%s sees: %s", s.Addr, n.raw)
			}
			if n.has("myself") && strings.Contains(n.raw, mark) {
				return fmt.Sprintf("%s still marks the slot: %s", s.Addr, n.raw)
			}
		}
	}
	return ""
}
