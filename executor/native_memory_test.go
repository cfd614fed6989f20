package executor

// Authenticated floods of partly sent messages against the native
// listener, over real sockets, Noise and the multiplexer: what the
// executor holds for them is bounded by its read budgets (readbudget.go),
// other clients are served meanwhile, and the memory comes back when the
// flood leaves.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
	"github.com/outpost-exec/outpost/transport/mux"
)

// liveHeap is the heap in use after a full collection (twice, so pooled
// buffers are gone too).
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// partialFrame is the start of a request frame announcing frame bytes
// (an fs/writeFile whose data is one bin): the header, the body's
// beginning, and then the caller sends some of the data and stops.
func partialFrame(id int64, frame int) []byte {
	body := []byte{0x94, 0x01, 0xd3} // [request, int64 id, ...
	body = binary.BigEndian.AppendUint64(body, uint64(id))
	body = append(body, 0xa0|byte(len(protocol.MethodFsWriteFile)))
	body = append(body, protocol.MethodFsWriteFile...)
	body = append(body, 0xc6) // bin32: the rest of the frame
	body = binary.BigEndian.AppendUint32(body, uint32(frame-len(body)-4))
	return append(binary.BigEndian.AppendUint32(nil, uint32(frame)), body...)
}

// flooder is an authenticated connection whose streams each send part of
// one large frame and then hold still.
type flooder struct {
	sess    *transport.MuxSession
	streams []*transport.MuxStream
}

// flood opens streams streams on a new connection and sends on each the
// first sent bytes of a frame of frame bytes; it returns once all is
// sent.
func (f *floodFixture) flood(t *testing.T, ctx context.Context, streams, frame, sent int) *flooder {
	t.Helper()
	nc, err := transport.NoiseInitiator(ctx, f.dialFrom(t, ""), transport.NoiseConfig{Static: floodKey(t), Purpose: NativePurpose, PeerStatic: f.key.Public})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := transport.MuxClient(nc, transport.DefaultMuxConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	fl := &flooder{sess: sess}
	data := make([]byte, 256<<10)
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for i := range streams {
		st, err := sess.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		fl.streams = append(fl.streams, st)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A stream the executor resets (the mux's accept backlog
			// past its bytes, when the accept loop lags behind the
			// flood) is refused too; refusals counts it.
			head := partialFrame(int64(100+i), frame)
			if _, err := st.Write(head); err != nil {
				if !errors.Is(err, mux.ErrStreamReset) {
					errs <- err
				}
				return
			}
			for left := sent - len(head); left > 0; left -= len(data) {
				if _, err := st.Write(data[:min(left, len(data))]); err != nil {
					if !errors.Is(err, mux.ErrStreamReset) {
						errs <- err
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("flood stream: %v", err)
	}
	// The executor answers a ping once it has read every frame before it.
	if _, err := sess.Ping(); err != nil {
		t.Fatal(err)
	}
	return fl
}

// refusals reads the replies the flood's streams got, as far as they
// came within a moment: the streams whose frame was dropped, each
// answered under its request's id, and those the executor reset.
func (fl *flooder) refusals(t *testing.T) int {
	t.Helper()
	n := 0
	for i, st := range fl.streams {
		st.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		m, err := transport.NewMsgpackConn(st, 0).ReadMessage(context.Background())
		st.SetReadDeadline(time.Time{})
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue // still being read: it holds budget
		}
		if errors.Is(err, mux.ErrStreamReset) {
			n++
			continue
		}
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		if m.Kind != transport.KindResponse || m.Error == nil || m.Error.Kind() != protocol.KindExhausted || m.ID != transport.IntID(int64(100+i)) {
			t.Fatalf("stream %d: reply %+v (error %v), want a KindExhausted error for request %d", i, m, m.Error, 100+i)
		}
		n++
	}
	return n
}

// settle waits until the server's read budget stops moving: every byte
// the flood sent has been read into a message or dropped.
func (f *floodFixture) settle(t *testing.T) int64 {
	t.Helper()
	last, since := f.srv.reads.Used(), time.Now()
	deadline := time.Now().Add(testTimeout)
	for time.Since(since) < 300*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatal("the read budget never settled")
		}
		time.Sleep(10 * time.Millisecond)
		if u := f.srv.reads.Used(); u != last {
			last, since = u, time.Now()
		}
	}
	return last
}

// writeFile writes a file through fc.
func (fc *floodClient) writeFile(ctx context.Context, path string, data []byte) error {
	return fc.call(ctx, protocol.MethodFsWriteFile, protocol.FsWriteFileParams{Path: path, Data: data}, &struct{}{})
}

// The reported attack: one authenticated connection, 64 control streams,
// each sending part of a 64 MiB frame and then holding still. Before the
// read budgets every stream kept what it had received (the report: 6.7 GB
// for 48 MiB each); now the connection holds at most its budget (64 MiB)
// plus 64 KiB per stream, the streams past it are answered KindExhausted
// under their request's id, another client is served meanwhile (a
// command, and a 2 MiB fs/writeFile), and the memory comes back once the
// flood leaves.
func TestNativeFloodOfPartialMessagesIsBoundedPerConnection(t *testing.T) {
	f := startFloodListener(t, "tcp://127.0.0.1:0", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
	defer cancel()
	streams, sent := DefaultNativeConfig().Mux.MaxInboundStreams, 4<<20
	base := liveHeap()

	fl := f.flood(t, ctx, streams, protocol.MaxMessageBytes, sent)
	used := f.settle(t)
	held := liveHeap() - base
	budget := int64(transport.DefaultConnectionReadBytes) + int64(streams)*transport.FreeFrameBytes
	t.Logf("%d streams × %d MiB of a 64 MiB frame: %d MiB reserved, %d MiB of heap (budget %d MiB)", streams, sent>>20, used>>20, held>>20, budget>>20)
	if used > transport.DefaultConnectionReadBytes {
		t.Fatalf("%d bytes reserved, past the connection's budget", used)
	}
	if slack := int64(24 << 20); held > budget+slack {
		t.Fatalf("the flood holds %d bytes of heap, want at most the connection's budget %d + %d", held, budget, slack)
	}
	refused := fl.refusals(t)
	if holding := streams - refused; refused == 0 || int64(holding)*int64(sent) > transport.DefaultConnectionReadBytes {
		t.Fatalf("%d streams refused, %d still read: more than the budget holds", refused, holding)
	}

	// Another client, meanwhile: a command and a 2 MiB whole-file write.
	fc, err := f.connect(ctx, f.dialFrom(t, ""), floodKey(t))
	if err != nil {
		t.Fatalf("a client during the flood: %v", err)
	}
	defer fc.sess.Close()
	if out, err := fc.run(ctx, "/bin/echo", "served"); err != nil || out != "served\n" {
		t.Fatalf("command during the flood: %q, %v", out, err)
	}
	file := filepath.Join(t.TempDir(), "two-mib")
	data := bytes.Repeat([]byte("outpost\n"), 2<<20/8)
	if err := fc.writeFile(ctx, file, data); err != nil {
		t.Fatalf("a 2 MiB fs/writeFile during the flood: %v", err)
	}
	if got, err := os.ReadFile(file); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("file written during the flood: %d bytes, %v", len(got), err)
	}

	// The flood leaves: its memory and its budget come back.
	fl.sess.Close()
	waitFor(t, "the flood's budget to be released", func() bool { return f.srv.reads.Used() == 0 })
	if after := liveHeap() - base; after > 8<<20 {
		t.Fatalf("%d bytes of heap still held after the flood left", after)
	}
}

// Many connections share the server's budget (Config.MessageReadBytes):
// with a 64 MiB server budget and 32 MiB per connection, four flooding
// connections (128 MiB of budgets between them) hold at most 64 MiB.
// While they do, a whole-file write past the first 64 KiB is refused at
// once, KindExhausted under its own id (no hang), and small requests are
// still served; once the flood leaves the write goes through.
func TestNativeFloodOfPartialMessagesIsBoundedPerServer(t *testing.T) {
	f := startFloodListenerWith(t, "tcp://127.0.0.1:0", func(c *Config) { c.MessageReadBytes = protocol.MaxMessageBytes }, func(o *NativeConfig) {
		o.MaxMessageBytes = 8 << 20
		o.ConnectionReadBytes = 32 << 20
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
	defer cancel()
	const conns, streams, sent = 4, 16, 6 << 20
	base := liveHeap()

	var floods []*flooder
	for range conns {
		floods = append(floods, f.flood(t, ctx, streams, 8<<20, sent))
	}
	used := f.settle(t)
	held := liveHeap() - base
	budget := int64(protocol.MaxMessageBytes) + conns*streams*transport.FreeFrameBytes
	t.Logf("%d connections × %d streams × %d MiB: %d MiB reserved, %d MiB of heap (budget %d MiB)", conns, streams, sent>>20, used>>20, held>>20, budget>>20)
	if used > protocol.MaxMessageBytes {
		t.Fatalf("%d bytes reserved, past the server's budget", used)
	}
	if slack := int64(24 << 20); held > budget+slack {
		t.Fatalf("the flood holds %d bytes of heap, want at most the server's budget %d + %d", held, budget, slack)
	}
	refused := 0
	for _, fl := range floods {
		refused += fl.refusals(t)
	}
	if refused == 0 {
		t.Fatal("no stream was refused")
	}

	fc, err := f.connect(ctx, f.dialFrom(t, ""), floodKey(t))
	if err != nil {
		t.Fatalf("a client during the flood: %v", err)
	}
	defer fc.sess.Close()
	file := filepath.Join(t.TempDir(), "one-mib")
	data := bytes.Repeat([]byte("outpost\n"), 1<<20/8)
	start := time.Now()
	err = fc.writeFile(ctx, file, data)
	if protocol.KindOf(err) != protocol.KindExhausted {
		t.Fatalf("a 1 MiB fs/writeFile while the server's budget is spent: %v, want KindExhausted", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the refusal took %v", took)
	}
	if out, err := fc.run(ctx, "/bin/echo", "served"); err != nil || out != "served\n" {
		t.Fatalf("a command after the refusal, during the flood: %q, %v", out, err)
	}

	for _, fl := range floods {
		fl.sess.Close()
	}
	waitFor(t, "the flood's budget to be released", func() bool { return f.srv.reads.Used() == 0 })
	if err := fc.writeFile(ctx, file, data); err != nil {
		t.Fatalf("the same write once the flood left: %v", err)
	}
	if after := liveHeap() - base; after > 8<<20 {
		t.Fatalf("%d bytes of heap still held after the flood left", after)
	}
}

// startFloodListenerWith is startFloodListener with the server's
// configuration adjusted too.
func startFloodListenerWith(t *testing.T, url string, server func(*Config), tweak func(*NativeConfig)) *floodFixture {
	t.Helper()
	f := &floodFixture{key: floodKey(t), clock: newFakeClock(), metrics: NewMetrics(prometheus.NewRegistry())}
	cfg := DefaultConfig()
	cfg.Logger = zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	cfg.DefaultCwd = t.TempDir()
	cfg.Metrics = f.metrics
	server(&cfg)
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nativeCfg := NativeConfig{Key: f.key, now: f.clock.now}
	tweak(&nativeCfg)
	ln, err := srv.ListenNative(url, nativeCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ln.Close()
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		srv.Shutdown(ctx)
	})
	f.srv, f.ln = srv, ln
	f.network, f.addr, _ = ParseNativeURL(ln.URL())
	return f
}
