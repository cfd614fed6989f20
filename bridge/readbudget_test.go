package bridge_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/outpost-exec/outpost/bridge"
	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/protocol"
)

// codex's messages share the bridge's read budget (Config.MessageReadBytes):
// while one connection holds it with a large message half sent, another's
// large message is dropped as it arrives and its request answered at once,
// KindExhausted under its own id; its small requests are still served.
func TestAttackPartlySentMessagesShareTheBridgesReadBudget(t *testing.T) {
	b, err := bridge.New(bridge.Config{
		Logger:           zaptest.NewLogger(t),
		MaxMessageBytes:  1 << 20,
		MessageReadBytes: 1 << 20,
		Dial: func(ctx context.Context, _ string) (*client.Remote, error) {
			return nil, errors.New("no executor in this test")
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	stdio := func() (*os.File, *bufio.Scanner) {
		inR, inW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		outR, outW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { inW.Close(); outR.Close() })
		go b.ServeStdio(context.Background(), inR, outW)
		out := bufio.NewScanner(outR)
		out.Buffer(nil, 1<<20)
		return inW, out
	}
	// The holder: 900 KiB of a message, no end of line yet.
	holder, _ := stdio()
	go holder.WriteString(`{"id":1,"method":"fs/writeFile","params":{"path":"/x","dataBase64":"` + strings.Repeat("A", 900<<10))

	in, out := stdio()
	reply := func() map[string]any {
		t.Helper()
		got := make(chan map[string]any, 1)
		go func() {
			var m map[string]any
			if out.Scan() {
				json.Unmarshal(out.Bytes(), &m)
			}
			got <- m
		}()
		select {
		case m := <-got:
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("no reply")
			return nil
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for bridge.ReadsUsed(b) < 900<<10 {
		if time.Now().After(deadline) {
			t.Fatalf("the holder's message never took the budget (%d bytes)", bridge.ReadsUsed(b))
		}
		time.Sleep(5 * time.Millisecond)
	}
	go in.WriteString(`{"id":7,"method":"fs/writeFile","params":{"path":"/y","dataBase64":"` + strings.Repeat("B", 900<<10) + `"}}` + "\n")
	m := reply()
	e, _ := m["error"].(map[string]any)
	data, _ := e["data"].(map[string]any)
	if m["id"] != float64(7) || data["kind"] != string(protocol.KindExhausted) {
		t.Fatalf("a large request while the budget is held: %v, want KindExhausted for id 7", m)
	}
	// A small request is still read (and answered: not initialized).
	in.WriteString(`{"id":8,"method":"process/read","params":{"processId":"p"}}` + "\n")
	if m := reply(); m["id"] != float64(8) {
		t.Fatalf("a small request during the hold: %v", m)
	}
}
