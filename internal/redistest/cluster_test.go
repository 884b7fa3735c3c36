package redistest_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

func TestSlotOwner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := redistest.NewCluster(t, 3)
	keys := []string{"", "a", "123456789", "foo", "{user1000}.following", "{user1000}.followers",
		"{}", "{}a", "a{}b", "a{}{b}", "{a", "a}", "}{a}", "{{a}}", "{a}{b}", "x{a}y", "\x00\xff{\x80}", "ключ{é}"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		b := make([]byte, rng.IntN(20))
		for i := range b {
			b[i] = "ab{}\x00\xff"[rng.IntN(6)]
		}
		keys = append(keys, string(b))
	}
	node := c.Nodes[0].Client(t)
	pipe := node.Pipeline()
	cmds := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.ClusterKeySlot(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		if got, want := redistest.Slot(k), int(cmds[i].Val()); got != want {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}
	// CRC16/XMODEM's check value is 0x31C3 = 12739, which is below 16384.
	if got := redistest.Slot("123456789"); got != 0x31C3 {
		t.Errorf("Slot(123456789) = %d, want %d", got, 0x31C3)
	}

	// Owner names the master that holds a key written through a cluster
	// client.
	masters := c.Masters()
	for i, slot := range []int{0, 5461, 16383} {
		if got := c.Owner(t, slot); got != masters[i] {
			t.Errorf("Owner(%d) = %s, want %s", slot, got.Addr, masters[i].Addr)
		}
	}
	cc := c.Client(t)
	for _, k := range []string{"a", "b", "c", "{x}y"} {
		if err := cc.Set(ctx, k, 1, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if n := c.Owner(t, redistest.Slot(k)).Client(t).Exists(ctx, k).Val(); n != 1 {
			t.Errorf("key %q is not on Owner(Slot(%q))", k, k)
		}
	}

	// Without replicas WaitPromoted fails at once.
	r := &tb{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.WaitPromoted(r, masters[0], time.Second)
	}()
	<-done
	if !strings.Contains(r.failed, "no replica follows") {
		t.Errorf("WaitPromoted on a master without replicas: failed %q", r.failed)
	}
}

func TestClusterReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := redistest.NewClusterReplicas(t, 3, 1)
	masters := c.Masters()
	if len(masters) != 3 || len(c.Nodes) != 6 {
		t.Fatalf("%d masters, %d nodes; want 3 and 6", len(masters), len(c.Nodes))
	}
	for _, m := range masters {
		rs := c.Replicas(m)
		if len(rs) != 1 || c.MasterOf(rs[0]) != m || c.MasterOf(m) != nil {
			t.Fatalf("master %s: replicas %v", m.Addr, rs)
		}
		waitFollows(t, rs[0], m)
	}

	// A write through a cluster client reaches the master that owns the
	// key's slot and then that master's replica.
	cc := c.Client(t)
	const keys = 100
	for i := range keys {
		if err := cc.Set(ctx, fmt.Sprintf("key%d", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range keys {
		key := fmt.Sprintf("key%d", i)
		owner := c.Owner(t, redistest.Slot(key))
		replica := readOnlyClient(t, c.Replicas(owner)[0])
		waitFor(t, 5*time.Second, func() string {
			got, err := replica.Get(ctx, key).Int()
			if err != nil || got != i {
				return fmt.Sprintf("replica %s has %s = %d, %v; want %d", replica.Options().Addr, key, got, err, i)
			}
			return ""
		})
	}
}

// TestWaitPromoted measures failover: not parallel.
func TestWaitPromoted(t *testing.T) {
	ctx := context.Background()
	c := redistest.NewClusterReplicas(t, 3, 1)
	cc := c.Client(t)

	// Stop the master of a key: its replica takes over, with the data.
	const key = "promoted"
	slot := redistest.Slot(key)
	dead := c.Owner(t, slot)
	if err := cc.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := dead.Client(t).Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d, %v", n, err)
	}
	dead.Stop()
	stopped := time.Now()
	promoted, at := c.WaitPromoted(t, dead, 10*time.Second)
	t.Logf("Stop: promoted %v after the stop, WaitPromoted returned %v after", at.Sub(stopped), time.Since(stopped))
	if want := c.Replicas(dead)[0]; promoted != want {
		t.Fatalf("WaitPromoted returned %s, want the replica %s", promoted.Addr, want.Addr)
	}
	if at.Before(stopped) || at.After(time.Now()) {
		t.Fatalf("promotion instant %v is outside the wait", at)
	}
	if got := c.Owner(t, slot); got != promoted {
		t.Fatalf("Owner(%d) = %s after promotion, want %s", slot, got.Addr, promoted.Addr)
	}
	if got := promoted.Client(t).Get(ctx, key).Val(); got != "v" {
		t.Fatalf("promoted replica has %s = %q, want v", key, got)
	}
	// A go-redis cluster client finds the new master only once it reloads
	// its slot map: a refused connection does not make it reload, and it
	// does so by itself only every 60 s (ClusterStateReloadInterval).
	cc.ReloadState(ctx)
	waitFor(t, 5*time.Second, func() string {
		if err := cc.Set(ctx, key, "w", 0).Err(); err != nil {
			return fmt.Sprintf("SET through the cluster client: %v", err)
		}
		return ""
	})
	if got := promoted.Client(t).Get(ctx, key).Val(); got != "w" {
		t.Fatalf("promoted master has %s = %q, want w", key, got)
	}

	// The old master, restarted (empty), rejoins as a replica of its
	// replacement and copies its data.
	dead.Restart(t)
	waitFollows(t, dead, promoted)
	replica := readOnlyClient(t, dead)
	waitFor(t, 5*time.Second, func() string {
		if got, err := replica.Get(ctx, key).Result(); got != "w" {
			return fmt.Sprintf("restarted old master has %s = %q, %v; want w", key, got, err)
		}
		return ""
	})
	if got := c.Owner(t, slot); got != promoted {
		t.Fatalf("Owner(%d) = %s after the old master came back, want %s", slot, got.Addr, promoted.Addr)
	}
}

// TestWaitPromotedPause does not measure time, unlike TestWaitPromoted.
func TestWaitPromotedPause(t *testing.T) {
	t.Parallel()
	c := redistest.NewClusterReplicas(t, 3, 2)
	paused := c.Masters()[2]
	paused.Pause()
	promoted, at := c.WaitPromoted(t, paused, 15*time.Second)
	if !slices.Contains(c.Replicas(paused), promoted) {
		t.Fatalf("WaitPromoted returned %s, not a replica of %s", promoted.Addr, paused.Addr)
	}
	if at.IsZero() || at.After(time.Now()) {
		t.Fatalf("promotion instant %v", at)
	}
	if got := c.Owner(t, 16383); got != promoted {
		t.Fatalf("Owner(16383) = %s, want %s", got.Addr, promoted.Addr)
	}
	// The other replica follows the new master; the old one, resumed,
	// learns it was replaced and follows it too.
	for _, r := range c.Replicas(paused) {
		if r != promoted {
			waitFollows(t, r, promoted)
		}
	}
	paused.Resume()
	waitFollows(t, paused, promoted)
	if got := c.Owner(t, 16383); got != promoted {
		t.Fatalf("Owner(16383) = %s after Resume, want %s", got.Addr, promoted.Addr)
	}
}

// waitFollows waits up to 5 s until replica reports (ROLE) that it follows
// master.
func waitFollows(t *testing.T, replica, master *redistest.Server) {
	t.Helper()
	ctx := context.Background()
	cl := replica.Client(t)
	waitFor(t, 5*time.Second, func() string {
		role, err := cl.Do(ctx, "ROLE").Slice()
		if err != nil || role[0] != "slave" || fmt.Sprint(role[2]) != strings.Split(master.Addr, ":")[1] {
			return fmt.Sprintf("%s: ROLE %v, %v; want a replica of %s", replica.Addr, role, err, master.Addr)
		}
		return ""
	})
}

func TestMigrateSlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := redistest.NewClusterReplicas(t, 3, 1)
	const tag = "{mig}"
	slot := redistest.Slot(tag)
	from := c.Owner(t, slot)
	var to *redistest.Server
	for _, m := range c.Masters() {
		if m != from {
			to = m
			break
		}
	}
	cc := c.Client(t)
	const before, during = 60, 80 // keys that exist before, and also during, the migration
	for i := range before {
		if err := cc.Set(ctx, fmt.Sprintf("%s:%d", tag, i), 0, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}

	// A writer INCRs keys of the slot throughout, creating new ones once the
	// migration has begun; it stops when told, or after 100000 commands or
	// 20 s.
	var migrating atomic.Bool
	var ops atomic.Int64
	counts := map[string]int64{}
	var errs []error
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		end := time.Now().Add(20 * time.Second)
		for i := 0; i < 100000 && time.Now().Before(end); i++ {
			select {
			case <-stop:
				return
			default:
			}
			n := before
			if migrating.Load() {
				n = during
			}
			key := fmt.Sprintf("%s:%d", tag, i%n)
			if err := cc.Incr(ctx, key).Err(); err != nil {
				if len(errs) < 10 {
					errs = append(errs, fmt.Errorf("INCR %s: %w", key, err))
				}
				continue
			}
			counts[key]++
			ops.Add(1)
		}
	}()
	waitFor(t, 5*time.Second, func() string {
		if ops.Load() < 100 {
			return "the writer did not get going"
		}
		return ""
	})

	fromClient, toClient := from.Client(t), to.Client(t)
	split := false
	var opsAtStart int64
	began := time.Now()
	c.MigrateSlot(t, slot, to, redistest.MigrateBatch(10), redistest.MigratePause(50*time.Millisecond),
		redistest.MigrateOnBatch(func(moved int) {
			if !migrating.Swap(true) {
				opsAtStart = ops.Load()
			}
			onSource := fromClient.ClusterCountKeysInSlot(ctx, slot).Val()
			onTarget := toClient.ClusterCountKeysInSlot(ctx, slot).Val()
			if onSource > 0 && onTarget > 0 {
				split = true
			}
		}))
	took := time.Since(began)
	close(stop)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer did not stop")
	}
	t.Logf("migrated in %v; %d INCRs during the migration, %d in all", took, ops.Load()-opsAtStart, ops.Load())
	if len(errs) > 0 {
		t.Errorf("the writer failed: %v", errs)
	}
	if !split {
		t.Error("the keys were never split between source and target")
	}
	if took < 250*time.Millisecond {
		t.Errorf("the migration took %v, less than its pauses", took)
	}
	if n := ops.Load() - opsAtStart; n == 0 {
		t.Error("no INCR during the migration")
	}

	// All keys are on the target, with every increment; the source owns
	// nothing of the slot and redirects.
	if got := c.Owner(t, slot); got != to {
		t.Fatalf("Owner(%d) = %s, want %s", slot, got.Addr, to.Addr)
	}
	if n := fromClient.ClusterCountKeysInSlot(ctx, slot).Val(); n != 0 {
		t.Errorf("the source still holds %d keys of the slot", n)
	}
	if n := toClient.ClusterCountKeysInSlot(ctx, slot).Val(); n != during || len(counts) != during {
		t.Errorf("the target holds %d keys of the slot, the writer wrote %d; want %d", n, len(counts), during)
	}
	for key, want := range counts {
		if got, err := toClient.Get(ctx, key).Int64(); err != nil || got != want {
			t.Errorf("%s on the target = %d, %v; want %d", key, got, err, want)
		}
	}
	if err := fromClient.Get(ctx, tag+":0").Err(); err == nil || !strings.HasPrefix(err.Error(), "MOVED") {
		t.Errorf("GET on the source: %v, want MOVED", err)
	}
	for _, s := range c.Nodes {
		shards, err := s.Client(t).ClusterShards(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, shard := range shards {
			for _, r := range shard.Slots {
				if r.Start <= int64(slot) && int64(slot) <= r.End && !slices.ContainsFunc(shard.Nodes, func(n redis.Node) bool {
					return n.Role == "master" && n.ID == c.ID(to)
				}) {
					t.Errorf("%s: CLUSTER SHARDS puts slot %d in a shard not led by %s: %+v", s.Addr, slot, to.Addr, shard.Nodes)
				}
			}
		}
	}
	// The target's replica receives the migrated keys.
	replica := readOnlyClient(t, c.Replicas(to)[0])
	waitFor(t, 5*time.Second, func() string {
		if n := replica.ClusterCountKeysInSlot(ctx, slot).Val(); n != during {
			return fmt.Sprintf("the target's replica holds %d keys of the slot, want %d", n, during)
		}
		return ""
	})

	// Migrating a slot to its owner does nothing.
	c.MigrateSlot(t, slot, to)
}

// readOnlyClient returns a client of a replica that may read (READONLY).
func readOnlyClient(t *testing.T, replica *redistest.Server) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: replica.Addr,
		OnConnect: func(ctx context.Context, cn *redis.Conn) error { return cn.ReadOnly(ctx).Err() }})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitFor polls check every 10 ms until it returns "", or fails the test
// with its last answer after timeout.
func waitFor(t *testing.T, timeout time.Duration, check func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		problem := check()
		if problem == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, problem)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
