package etcdtest

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestSingleMemberServesReadsAndWrites(t *testing.T) {
	c := Start(t, 1)
	if eps := c.Endpoints(); len(eps) != 1 || !strings.HasPrefix(eps[0], "127.0.0.1:") {
		t.Fatalf("endpoints %v", eps)
	}
	if u := c.URL("/outpost"); u != "etcd://"+c.Endpoints()[0]+"/outpost" {
		t.Fatalf("URL = %q", u)
	}
	if u := c.URL("x"); !strings.HasSuffix(u, "/x") {
		t.Fatalf("URL(x) = %q", u)
	}
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("get: %v %v", resp, err)
	}
	if c.Leader(t) != 0 {
		t.Fatal("the only member is not the leader")
	}
}

func TestThreeMembersSurviveTheLeadersDeathAndItsRestart(t *testing.T) {
	c := Start(t, 3)
	if len(c.Endpoints()) != 3 {
		t.Fatalf("endpoints %v", c.Endpoints())
	}
	cli := c.Client(t)
	put := func(v string) {
		t.Helper()
		// A write right after the leader's death may be cut off with the
		// old leader's connection; a bounded retry rides out the election.
		deadline := time.Now().Add(10 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := cli.Put(ctx, "k", v)
			cancel()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("put %s: %v", v, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	put("1")
	old := c.Leader(t)
	c.Kill(old)
	c.Kill(old) // killing a killed member does nothing
	start := time.Now()
	now := c.Leader(t)
	if now == old {
		t.Fatalf("leader is still the killed member %d", old)
	}
	t.Logf("re-elected member %d in %v", now, time.Since(start))
	put("2")
	c.Restart(old)
	// The restarted member serves the data written while it was down.
	one := c.Client(t, old)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := one.Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "2" {
		t.Fatalf("get from restarted member: %v %v", resp, err)
	}
}
