package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/relay"
)

// clusterFlags are `relay serve`'s cluster flags. A relay whose --store is
// etcd is a member of the cluster on that etcd (every relay of it shares
// the relay key: give them the same state directory's relay.key).
type clusterFlags struct {
	id        *string
	advertise *string
	lease     *time.Duration
}

func (c *clusterFlags) register(fs *flag.FlagSet) {
	host, _ := os.Hostname()
	c.id = fs.String("relay-id", host, "this relay's id in its cluster (with an etcd --store; unique among the relays)")
	c.advertise = fs.String("cluster-advertise", "", "HOST:PORT the cluster's executors and peer relays dial to reach this relay (with an etcd --store; default --advertise, else the listen address when it is not a wildcard)")
	c.lease = fs.Duration("cluster-lease", relay.DefaultLeaseTTL, "how long this relay's member entry and its executors' presence outlive it in etcd (whole seconds, at least 2s)")
}

// config is the relay's cluster configuration on cli (nil: no cluster,
// the store is not etcd). listen is --listen's HOST:PORT.
func (c *clusterFlags) config(cli *clientv3.Client, prefix string, listen, advertise string) (*relay.ClusterConfig, error) {
	if cli == nil {
		return nil, nil
	}
	addr := *c.advertise
	if addr == "" {
		addr = advertise
	}
	if addr == "" {
		host, port, _ := net.SplitHostPort(listen)
		if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() || port == "0" {
			return nil, errors.New("--cluster-advertise HOST:PORT is needed: the relay listens on all addresses, and its peers and executors must be told one they can dial")
		}
		addr = net.JoinHostPort(host, port)
	}
	if err := checkAdvertise(addr); err != nil {
		return nil, fmt.Errorf("--cluster-advertise: %w", err)
	}
	if err := protocol.CheckExecutorID(*c.id); err != nil {
		return nil, fmt.Errorf("--relay-id: %w", err)
	}
	cfg := &relay.ClusterConfig{Client: cli, Prefix: prefix, RelayID: *c.id, Advertise: addr, LeaseTTL: *c.lease}
	return cfg, nil
}
