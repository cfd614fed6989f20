package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/relay"
)

const relayMigrateUsage = `usage: outpost relay migrate [--state-dir DIR] --to etcd://HOST:PORT[,HOST:PORT...]/PREFIX

Copies a relay's token store, relay.db in --state-dir, into etcd, where the
relays of a cluster share it (relay serve --store URL): every token with its
hash, kind, scope, expiry and use count, the token ids, the executor
bindings, the revoked keys and the revocation sequence number. Old tokens
keep working, bound executors keep their ids and revoked keys stay revoked.

It refuses, writing nothing, when the prefix already holds tokens, bindings
or revocations. Stop the relay first: uses and revocations made on relay.db
after the copy are not carried over. relay.db is left as it was.

Flags:
`

// cmdRelayMigrate copies the bbolt token store into etcd.
func cmdRelayMigrate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outpost relay migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stateDir := fs.String("state-dir", identity.DefaultStateDir(), "the relay's state directory, whose relay.db is copied")
	to := addEtcdFlags(fs, "to", "the etcd store to copy into, `URL` etcd://HOST:PORT[,HOST:PORT...]/PREFIX (etcds:// for TLS), as relay serve --store takes it")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), relayMigrateUsage)
		fs.PrintDefaults()
	}
	if code, ok := parseArgs(fs, args, stdout); !ok {
		return code
	}
	if fs.NArg() != 0 || *to.url == "" {
		fs.Usage()
		return exitUsage
	}
	o, _, err := to.options()
	if err != nil {
		fmt.Fprintln(stderr, "outpost relay migrate: --to:", err)
		return exitUsage
	}
	src, srcDone, err := existingTokenStore(*stateDir, nil)
	if err != nil {
		fmt.Fprintln(stderr, "outpost relay migrate:", err)
		return 1
	}
	defer srcDone()
	// The destination is opened as relay serve opens it, so the prefix is
	// marked as a store; MigrateStore itself checks that it holds no data.
	dst, dstDone, err := tokenStore(*stateDir, to)
	if err != nil {
		fmt.Fprintln(stderr, "outpost relay migrate:", err)
		return 1
	}
	defer dstDone()
	rep, err := relay.MigrateStore(dst, src)
	switch {
	case errors.Is(err, relay.ErrStoreNotEmpty):
		fmt.Fprintf(stderr, "outpost relay migrate: %v: %s already holds a token store; nothing was written\n", err, o)
		return 1
	case err != nil:
		fmt.Fprintln(stderr, "outpost relay migrate:", err)
		if rep.Written > 0 {
			fmt.Fprintf(stderr, "%d of %d records were written before the failure. Remove them before trying again (with the cluster's relays stopped):\n", rep.Written, rep.Records)
			for _, b := range []string{"tokens", "token_ids", "executors", "revoked_keys", "meta"} {
				fmt.Fprintf(stderr, "  etcdctl del --prefix %s/%s/\n", o.Prefix, b)
			}
		}
		return 1
	}
	txns := "transactions"
	if rep.Txns == 1 {
		txns = "transaction"
	}
	fmt.Fprintf(stdout, "copied the token store in %s into %s (%d records in %d %s):\n", *stateDir, o, rep.Written, rep.Txns, txns)
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "  tokens\t%d\n", rep.Tokens)
	fmt.Fprintf(w, "  token ids\t%d\n", rep.TokenIDs)
	fmt.Fprintf(w, "  executor bindings\t%d\n", rep.Executors)
	fmt.Fprintf(w, "  revoked keys\t%d\n", rep.RevokedKeys)
	fmt.Fprintf(w, "  revocation sequence\t%d\n", rep.Seq)
	w.Flush()
	fmt.Fprintf(stderr, "start the relays with --store %s; %s/relay.db is unchanged (keep it as a backup)\n", *to.url, *stateDir)
	return 0
}
