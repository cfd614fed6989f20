package relay

import (
	"fmt"
	"strings"
	"testing"

	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// A connect answer naming the largest cluster a join answer may name —
// 64 members with the longest ids and long addresses — still fits a
// handshake payload: the members are cut to the budget, in order, and the
// encoding never exceeds it.
func TestConnectMembersFitAHandshakePayload(t *testing.T) {
	long := strings.Repeat("r", protocol.MaxExecutorIDLen)
	rc := &protocol.RelayCluster{Relay: long}
	for i := range protocol.MaxRelayMembers {
		rc.Members = append(rc.Members, protocol.RelayMember{ID: fmt.Sprintf("%s%03d", long[:125], i), Addr: fmt.Sprintf("%s.example.net:%d", strings.Repeat("h", 200), 7000+i)})
	}
	got := boundMembers(rc, protocol.MaxConnectClusterBytes)
	if got == nil || got.Relay != long || len(got.Members) == 0 || len(got.Members) >= len(rc.Members) {
		t.Fatalf("bounded to %v members", got)
	}
	for i, m := range got.Members {
		if m != rc.Members[i] {
			t.Fatalf("member %d: %+v, want %+v", i, m, rc.Members[i])
		}
	}
	fp := strings.Repeat("A", 52)
	payload, err := transport.PayloadResult(transport.IntID(1<<40), protocol.RelayConnectResult{ExecutorKey: fp, Verdict: true, Cluster: got})
	if err != nil || len(payload) > transport.MaxHandshakePayload {
		t.Fatalf("a connect answer of %d bytes (%v); a handshake payload holds %d", len(payload), err, transport.MaxHandshakePayload)
	}
	cl, err := transport.PayloadResult(transport.IntID(1), got)
	if err != nil || len(cl) > protocol.MaxConnectClusterBytes {
		t.Fatalf("the cluster alone encodes to %d bytes (%v), over its budget %d", len(cl), err, protocol.MaxConnectClusterBytes)
	}

	// A small cluster is named whole; an id over the budget names none.
	small := &protocol.RelayCluster{Relay: "r2", Members: []protocol.RelayMember{{ID: "r1", Addr: "10.0.0.1:7443"}, {ID: "r2", Addr: "10.0.0.2:7443"}}}
	if got := boundMembers(small, protocol.MaxConnectClusterBytes); got == nil || len(got.Members) != 2 {
		t.Fatalf("small cluster bounded to %+v", got)
	}
	if got := boundMembers(small, 10); got != nil {
		t.Fatalf("a budget below the framing gave %+v", got)
	}
}
