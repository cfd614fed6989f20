package relay

// Connecting to etcd: the store URL, its options, and a dial that proves
// the cluster answers.
//
// A relay cluster names its etcd with one URL,
//
//	etcd://host1:2379,host2:2379,host3:2379/prefix     plaintext
//	etcds://host1:2379,host2:2379/prefix                TLS
//
// listing any number of members (the client balances and fails over
// between them) and the key prefix every relay of the cluster shares
// (default /outpost). Credentials never go in the URL — URLs end up in
// logs, ps output and shell history — but in EtcdOptions' Username and
// Password (the CLI's --etcd-user and $OUTPOST_ETCD_PASSWORD), and TLS
// files in CACert, Cert and Key.
//
// clientv3.New does not connect (gRPC dials lazily), so DialEtcd reads a
// key before it returns: a relay pointed at a dead or mistyped cluster
// fails at start within DialTimeout, with ErrStoreUnavailable, instead of
// refusing every token later.

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Defaults and bounds of EtcdOptions.
const (
	// DefaultEtcdPrefix is the key prefix when the URL names none.
	DefaultEtcdPrefix = "/outpost"
	// DefaultEtcdDialTimeout bounds DialEtcd's first contact.
	DefaultEtcdDialTimeout = 5 * time.Second
	// DefaultEtcdRequestTimeout bounds each store operation on etcd.
	DefaultEtcdRequestTimeout = 5 * time.Second
	// defaultEtcdPort is the port of an endpoint that names none.
	defaultEtcdPort = "2379"
	// maxEtcdEndpoints bounds the members one URL may list.
	maxEtcdEndpoints = 64
	// etcd closes idle gRPC connections' keepalive pings sent more often
	// than every 5 s (--grpc-keepalive-min-time), so ping every 10 s and
	// give a dead member 3 s to answer.
	etcdKeepAliveTime    = 10 * time.Second
	etcdKeepAliveTimeout = 3 * time.Second
)

// EtcdOptions say how to reach the etcd cluster of a relay cluster.
type EtcdOptions struct {
	// Endpoints are the members' client addresses, host:port.
	Endpoints []string
	// Prefix is the key prefix: it begins with "/" and does not end with
	// one (default DefaultEtcdPrefix).
	Prefix string
	// TLS speaks TLS to the members (etcds://). CACert is a PEM file of
	// the CAs to trust (default: the system's); Cert and Key, given
	// together, a client certificate.
	TLS               bool
	CACert, Cert, Key string
	// Username and Password authenticate to etcd (both or neither).
	Username, Password string
	// DialTimeout bounds DialEtcd (default DefaultEtcdDialTimeout);
	// RequestTimeout each store operation (default
	// DefaultEtcdRequestTimeout).
	DialTimeout, RequestTimeout time.Duration
}

// ParseEtcdURL parses etcd://host:port[,host:port…][/prefix] (etcds://
// for TLS). An endpoint without a port gets 2379; an empty prefix is
// DefaultEtcdPrefix.
func ParseEtcdURL(s string) (EtcdOptions, error) {
	var o EtcdOptions
	rest, ok := strings.CutPrefix(s, "etcd://")
	if !ok {
		if rest, ok = strings.CutPrefix(s, "etcds://"); !ok {
			return EtcdOptions{}, fmt.Errorf("relay: store URL %q: want etcd://HOST:PORT[,HOST:PORT…][/PREFIX] (etcds:// for TLS)", s)
		}
		o.TLS = true
	}
	if strings.ContainsAny(rest, "?#") {
		return EtcdOptions{}, fmt.Errorf("relay: store URL %q: no query or fragment is allowed", s)
	}
	hosts, prefix, _ := strings.Cut(rest, "/")
	if strings.Contains(hosts, "@") {
		// Do not echo the URL: it holds a password.
		return EtcdOptions{}, errors.New("relay: store URL: credentials do not belong in the URL (it is logged and shown by ps): give --etcd-user NAME and $OUTPOST_ETCD_PASSWORD")
	}
	for _, h := range strings.Split(hosts, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			// No port: the default one (an IPv6 address needs brackets).
			h = net.JoinHostPort(strings.Trim(h, "[]"), defaultEtcdPort)
		}
		o.Endpoints = append(o.Endpoints, h)
	}
	o.Prefix = "/" + strings.Trim(prefix, "/")
	if o.Prefix == "/" {
		o.Prefix = DefaultEtcdPrefix
	}
	if err := o.Validate(); err != nil {
		return EtcdOptions{}, err
	}
	return o, nil
}

// Validate checks the options without contacting etcd.
func (o EtcdOptions) Validate() error {
	if len(o.Endpoints) == 0 {
		return errors.New("relay: etcd: no endpoint given")
	}
	if len(o.Endpoints) > maxEtcdEndpoints {
		return fmt.Errorf("relay: etcd: %d endpoints, at most %d", len(o.Endpoints), maxEtcdEndpoints)
	}
	for _, ep := range o.Endpoints {
		host, port, err := net.SplitHostPort(ep)
		if err != nil {
			return fmt.Errorf("relay: etcd endpoint %q: %w", ep, err)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("relay: etcd endpoint %q: bad port", ep)
		}
		if host == "" || strings.ContainsAny(host, " /,@") {
			return fmt.Errorf("relay: etcd endpoint %q: bad host", ep)
		}
	}
	if !strings.HasPrefix(o.Prefix, "/") || (len(o.Prefix) > 1 && strings.HasSuffix(o.Prefix, "/")) || o.Prefix == "/" {
		return fmt.Errorf("relay: etcd prefix %q: want /NAME (it begins with / and does not end with one)", o.Prefix)
	}
	for _, r := range o.Prefix {
		if r < 0x21 || r == 0x7f {
			return fmt.Errorf("relay: etcd prefix %q: no spaces or control characters", o.Prefix)
		}
	}
	if (o.Cert == "") != (o.Key == "") {
		return errors.New("relay: etcd: a client certificate needs both its certificate and its key file")
	}
	if !o.TLS && (o.CACert != "" || o.Cert != "") {
		return errors.New("relay: etcd: TLS files are given but the URL is etcd:// (plaintext): use etcds://")
	}
	if strings.Contains(o.Username, ":") {
		return errors.New("relay: etcd: the user name contains ':'")
	}
	if (o.Username == "") != (o.Password == "") {
		// The etcd client silently skips authentication when either is
		// empty; say so rather than fail later with "permission denied".
		return errors.New("relay: etcd: a user needs a password and a password a user (give --etcd-user NAME:PASSWORD or NAME with $OUTPOST_ETCD_PASSWORD)")
	}
	if o.DialTimeout < 0 || o.RequestTimeout < 0 {
		return errors.New("relay: etcd: timeouts must not be negative")
	}
	return nil
}

// String describes the options as a URL, without the password, so that
// logging them never leaks it.
func (o EtcdOptions) String() string {
	scheme := "etcd://"
	if o.TLS {
		scheme = "etcds://"
	}
	s := scheme + strings.Join(o.Endpoints, ",") + o.Prefix
	if o.Username != "" {
		s += " (user " + o.Username + ")"
	}
	return s
}

// tlsConfig builds the client's TLS configuration (nil without TLS).
func (o EtcdOptions) tlsConfig() (*tls.Config, error) {
	if !o.TLS {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CACert != "" {
		pem, err := os.ReadFile(o.CACert)
		if err != nil {
			return nil, fmt.Errorf("relay: etcd CA certificate: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("relay: etcd CA certificate %s: no PEM certificate in it", o.CACert)
		}
		tc.RootCAs = pool
	}
	if o.Cert != "" {
		pair, err := tls.LoadX509KeyPair(o.Cert, o.Key)
		if err != nil {
			return nil, fmt.Errorf("relay: etcd client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// DialEtcd connects to the cluster and reads one key to prove it answers
// (a linearizable read: it needs a quorum with a leader), all within
// DialTimeout; otherwise it fails with ErrStoreUnavailable wrapped. The
// caller closes the client. Its logging is off: the relay reports etcd's
// failures through its own errors.
func DialEtcd(ctx context.Context, o EtcdOptions) (*clientv3.Client, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	tc, err := o.tlsConfig()
	if err != nil {
		return nil, err
	}
	scheme := "http://"
	if o.TLS {
		scheme = "https://"
	}
	eps := make([]string, len(o.Endpoints))
	for i, ep := range o.Endpoints {
		eps[i] = scheme + ep
	}
	timeout := cmp.Or(o.DialTimeout, DefaultEtcdDialTimeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            eps,
		DialTimeout:          timeout, // also bounds the authentication New does with a user
		DialKeepAliveTime:    etcdKeepAliveTime,
		DialKeepAliveTimeout: etcdKeepAliveTimeout,
		TLS:                  tc,
		Username:             o.Username,
		Password:             o.Password,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return nil, etcdError(fmt.Sprintf("connecting to %s", o), err)
	}
	if _, err := cli.Get(ctx, o.Prefix+"/"+string(bucketMeta)+"/"+etcdMarkerKey, clientv3.WithCountOnly()); err != nil {
		cli.Close()
		if errors.Is(err, context.DeadlineExceeded) {
			// The client's own word would be "context deadline exceeded".
			return nil, fmt.Errorf("relay: etcd %s: no member answered (with a leader) within %v: %w", o, timeout, ErrStoreUnavailable)
		}
		return nil, etcdError(fmt.Sprintf("connecting to %s", o), err)
	}
	return cli, nil
}
