package executor

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/outpost-exec/outpost/protocol"
)

// Queued replies hold at most maxPendingReplyBytes of file data: a reply
// that would pass it waits until the writer has taken enough, while one
// to an empty queue always goes in (a single reply larger than the bound
// is not refused, only never joined by another).
func TestOutboxBoundsTheFileDataQueuedReplies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := newOutbox()
		block := func(n int) outMsg { return outMsg{result: protocol.FsReadBlockResult{Chunk: make([]byte, n)}} }
		if !o.reply(outMsg{result: protocol.FsReadFileResult{Data: make([]byte, maxPendingReplyBytes+1)}}) {
			t.Fatal("a reply to an empty queue was refused")
		}
		var queued atomic.Int32
		go func() {
			o.reply(block(1 << 20))
			queued.Add(1)
		}()
		synctest.Wait()
		if queued.Load() != 0 {
			t.Fatal("a reply passed the byte bound")
		}
		if m, _, ok := o.next(context.Background()); !ok || replyBytes(m.result) != maxPendingReplyBytes+1 {
			t.Fatalf("next: %v %d", ok, replyBytes(m.result))
		}
		synctest.Wait()
		if queued.Load() != 1 {
			t.Fatal("the waiting reply did not go in once the queue had room")
		}
		// Small replies fill up to the bound, and no further.
		queuedBytes := func() int { o.mu.Lock(); defer o.mu.Unlock(); return o.bytes }
		for queuedBytes()+(8<<20) <= maxPendingReplyBytes {
			o.reply(block(8 << 20))
		}
		go func() {
			o.reply(block(8 << 20))
			queued.Add(1)
		}()
		synctest.Wait()
		if queued.Load() != 1 || queuedBytes() > maxPendingReplyBytes {
			t.Fatalf("%d bytes queued (bound %d)", queuedBytes(), maxPendingReplyBytes)
		}
		o.shutdown() // releases the waiter, which gives up
		synctest.Wait()
		if queued.Load() != 2 {
			t.Fatal("shutdown left a reply waiting")
		}
	})
}
