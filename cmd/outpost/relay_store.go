package main

// Choosing the relay's token store.
//
// By default the relay keeps its tokens, executor bindings and revoked
// keys in relay.db, a bbolt file in --state-dir, which the relay and the
// `outpost token` commands on the same machine share. Relays of a cluster
// share one store in etcd instead: --store etcd://HOST:PORT,…/PREFIX (or
// $OUTPOST_RELAY_STORE), with --etcd-cacert/--etcd-cert/--etcd-key for an
// etcds:// (TLS) cluster and --etcd-user NAME[:PASSWORD] when etcd has
// authentication on. The password may come from $OUTPOST_ETCD_PASSWORD
// instead of the command line (where ps shows it); it is never printed:
// the flag's value prints as the name alone, and errors name the store by
// relay.EtcdOptions' String, which leaves it out.
//
// relay serve, token create|ls|revoke and executors revoke take these
// flags (relay migrate takes the same ones, with --to for the URL), so
// every command reaches the store the relay uses.

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/outpost-exec/outpost/relay"
)

// Environment variables of the store flags.
const (
	envRelayStore   = "OUTPOST_RELAY_STORE"
	envEtcdPassword = "OUTPOST_ETCD_PASSWORD"
)

// relayStoreFlags are the flags that choose the token store.
type relayStoreFlags struct {
	fs      *flag.FlagSet
	urlFlag string // "store", or "to" for relay migrate
	url     *string
	cacert  *string
	cert    *string
	key     *string
	user    etcdUserFlag
}

// addRelayStoreFlags registers --store (named urlFlag) and the --etcd-*
// flags on fs.
func addRelayStoreFlags(fs *flag.FlagSet) *relayStoreFlags {
	sf := addEtcdFlags(fs, "store", "the token store: empty for relay.db in --state-dir; `URL` etcd://HOST:PORT[,HOST:PORT...]/PREFIX (etcds:// for TLS) for a store shared by a relay cluster (default $"+envRelayStore+")")
	return sf
}

// addEtcdFlags registers the etcd URL flag under name, with its usage,
// and the --etcd-* flags.
func addEtcdFlags(fs *flag.FlagSet, name, usage string) *relayStoreFlags {
	sf := &relayStoreFlags{fs: fs, urlFlag: name}
	sf.url = fs.String(name, "", usage)
	sf.cacert = fs.String("etcd-cacert", "", "etcds://: PEM `FILE` of the CAs that sign etcd's certificates (default: the system's)")
	sf.cert = fs.String("etcd-cert", "", "etcds://: client certificate PEM `FILE` (with --etcd-key)")
	sf.key = fs.String("etcd-key", "", "etcds://: client key PEM `FILE` (with --etcd-cert)")
	fs.Var(&sf.user, "etcd-user", "etcd user, `NAME[:PASSWORD]` (the password may come from $"+envEtcdPassword+" instead)")
	return sf
}

// etcdUserFlag is --etcd-user NAME[:PASSWORD]; it prints as the name
// alone, so the password never reaches usage text or logs.
type etcdUserFlag struct{ name, password string }

func (u *etcdUserFlag) String() string { return u.name }

func (u *etcdUserFlag) Set(v string) error {
	name, pw, _ := strings.Cut(v, ":")
	if name == "" {
		return errors.New("want NAME[:PASSWORD]")
	}
	u.name, u.password = name, pw
	return nil
}

// given reports whether the flag name was on the command line.
func (sf *relayStoreFlags) given(name string) bool {
	seen := false
	sf.fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			seen = true
		}
	})
	return seen
}

// options resolves the flags: etcd is false for the bbolt store. The URL
// flag, when not given, is $OUTPOST_RELAY_STORE (for --store); the
// password, when --etcd-user has none, $OUTPOST_ETCD_PASSWORD.
func (sf *relayStoreFlags) options() (o relay.EtcdOptions, etcd bool, err error) {
	if sf == nil {
		return relay.EtcdOptions{}, false, nil
	}
	u := *sf.url
	if !sf.given(sf.urlFlag) && sf.urlFlag == "store" {
		u = os.Getenv(envRelayStore)
	}
	if u == "" {
		for _, name := range []string{"etcd-cacert", "etcd-cert", "etcd-key", "etcd-user"} {
			if sf.given(name) {
				return relay.EtcdOptions{}, false, errors.New("--" + name + " needs --" + sf.urlFlag + " etcd://... (or etcds://...)")
			}
		}
		return relay.EtcdOptions{}, false, nil
	}
	if o, err = relay.ParseEtcdURL(u); err != nil {
		return relay.EtcdOptions{}, false, err
	}
	o.CACert, o.Cert, o.Key = *sf.cacert, *sf.cert, *sf.key
	o.Username, o.Password = sf.user.name, sf.user.password
	if o.Username != "" && o.Password == "" {
		o.Password = os.Getenv(envEtcdPassword)
	}
	if err := o.Validate(); err != nil {
		return relay.EtcdOptions{}, false, err
	}
	return o, true, nil
}

// openRelayStore opens the token store the flags choose (sf nil: the
// bbolt one). With create (relay serve, token create) a missing store is
// made; without it (token ls and revoke, executors revoke) a missing one
// is an error wrapping relay.ErrNoStore. On etcd it dials the cluster —
// failing within the dial timeout, with relay.ErrStoreUnavailable, when no
// member answers — and returns the client too, for the cluster code to
// share (nil for bbolt). The caller closes the store, then the client.
func openRelayStore(stateDir string, sf *relayStoreFlags, create bool) (store *relay.Store, cli *clientv3.Client, err error) {
	o, etcd, err := sf.options()
	if err != nil {
		return nil, nil, err
	}
	if !etcd {
		path := filepath.Join(stateDir, "relay.db")
		if create {
			store, err = relay.OpenStore(path)
		} else {
			store, err = relay.OpenExistingStore(path)
		}
		return store, nil, err
	}
	cli, err = relay.DialEtcd(context.Background(), o)
	if err != nil {
		return nil, nil, err
	}
	if create {
		store, err = relay.NewEtcdStore(cli, o.Prefix, o.RequestTimeout)
	} else {
		store, err = relay.OpenExistingEtcdStore(cli, o.Prefix, o.RequestTimeout)
	}
	if err != nil {
		cli.Close()
		return nil, nil, err
	}
	return store, cli, nil
}

// openTokenStore is openRelayStore for the commands that use the store
// alone: done closes the store and the client.
func openTokenStore(stateDir string, sf *relayStoreFlags, create bool) (store *relay.Store, done func(), err error) {
	store, cli, err := openRelayStore(stateDir, sf, create)
	if err != nil {
		return nil, func() {}, err
	}
	return store, func() { closeRelayStore(store, cli) }, nil
}

// closeRelayStore closes what openRelayStore opened: the store, then the
// client (nil for bbolt).
func closeRelayStore(store *relay.Store, cli *clientv3.Client) {
	store.Close()
	if cli != nil {
		cli.Close()
	}
}
