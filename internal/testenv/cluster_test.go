package testenv

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestClusterKillPrimary(t *testing.T) {
	t.Parallel()
	c := NewCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer rdb.Close()
	const keys = 100
	for i := range keys {
		if err := rdb.Set(ctx, fmt.Sprintf("k%d", i), i, 0).Err(); err != nil {
			t.Fatalf("SET k%d: %v", i, err)
		}
	}
	// Replication is asynchronous: without WAIT the killed primary could take writes
	// its replica never saw.
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n, err := m.Wait(ctx, 1, time.Second).Result()
		if err == nil && n < 1 {
			err = fmt.Errorf("%d replicas acknowledged", n)
		}
		if err != nil {
			return fmt.Errorf("WAIT 1 1000 on %s: %w", m.Options().Addr, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	primaries, err := c.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(primaries) != 3 || len(slices.Compact(slices.Clone(primaries))) != 3 {
		t.Fatalf("Primaries = %v, want 3 distinct", primaries)
	}
	killed := primaries[0]
	replica, err := c.ReplicaOf(ctx, killed)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(killed); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("healthy %v after killing %s", time.Since(start).Round(time.Millisecond), killed)

	primaries, err = c.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(primaries) != 3 || slices.Contains(primaries, killed) || !slices.Contains(primaries, replica) {
		t.Fatalf("Primaries after killing %s = %v, want its replica %s in its place", killed, primaries, replica)
	}

	// A fresh client: it learns the slots from a survivor, where the first one would
	// first run into the dead node and reload its view in the background.
	var survivors []string
	for _, a := range c.Addrs() {
		if a != killed {
			survivors = append(survivors, a)
		}
	}
	after := redis.NewClusterClient(&redis.ClusterOptions{Addrs: survivors})
	defer after.Close()
	for i := range keys {
		got, err := after.Get(ctx, fmt.Sprintf("k%d", i)).Int()
		if err != nil || got != i {
			t.Fatalf("GET k%d after failover = %d, %v; want %d", i, got, err, i)
		}
	}
}

func TestClusterFailover(t *testing.T) {
	t.Parallel()
	c := NewCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	primaries, err := c.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old := primaries[0]
	replica, err := c.ReplicaOf(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Failover(ctx, replica, true); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	// The old primary learns from the new one's gossip that it was replaced, and
	// follows it.
	rdb := redis.NewClient(&redis.Options{Addr: old})
	defer rdb.Close()
	for {
		info, err := rdb.Info(ctx, "replication").Result()
		if err != nil {
			t.Fatalf("INFO replication on %s: %v", old, err)
		}
		master := net.JoinHostPort(infoField(info, "master_host"), infoField(info, "master_port"))
		if infoField(info, "role") == "slave" && master == replica {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	primaries, err = c.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(primaries) != 3 || slices.Contains(primaries, old) || !slices.Contains(primaries, replica) {
		t.Fatalf("Primaries after failover = %v, want %s in place of %s", primaries, replica, old)
	}
}
