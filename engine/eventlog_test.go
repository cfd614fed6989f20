package engine

import (
	"context"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/protocol"
)

func u64(v uint64) *uint64 { return &v }

func mustAppend(t *testing.T, l *EventLog, s protocol.Stream, data string) uint64 {
	t.Helper()
	seq, err := l.Append(s, []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

func read(t *testing.T, l *EventLog, req ReadRequest) protocol.ReadResult {
	t.Helper()
	res, err := l.Read(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func chunkSeqs(res protocol.ReadResult) []uint64 {
	var seqs []uint64
	for _, c := range res.Chunks {
		seqs = append(seqs, c.Seq)
	}
	return seqs
}

func TestEventLogSharesOneSequenceAcrossOutputExitAndClose(t *testing.T) {
	l := NewEventLog(DefaultRetention(), 2)
	if got := mustAppend(t, l, protocol.StreamStdout, "a"); got != 1 {
		t.Fatalf("first seq = %d, want 1", got)
	}
	mustAppend(t, l, protocol.StreamStderr, "b")
	l.Exit(7, false)
	l.StreamEOF()
	select {
	case <-l.Closed():
		t.Fatal("closed with one stream still open")
	default:
	}
	l.StreamEOF()
	<-l.Closed()
	sub := l.Subscribe(0, false, nil)
	defer sub.Close()
	evs, gap, done := sub.Next(100, 1<<20)
	if gap != nil || !done {
		t.Fatalf("gap=%v done=%v", gap, done)
	}
	want := []struct {
		kind EventKind
		seq  uint64
	}{{EventOutput, 1}, {EventOutput, 2}, {EventExited, 3}, {EventClosed, 4}}
	if len(evs) != len(want) {
		t.Fatalf("got %d events, want %d", len(evs), len(want))
	}
	for i, w := range want {
		if evs[i].Kind != w.kind || evs[i].Seq != w.seq {
			t.Errorf("event %d = %v/%d, want %v/%d", i, evs[i].Kind, evs[i].Seq, w.kind, w.seq)
		}
	}
	if evs[2].ExitCode != 7 {
		t.Errorf("exit code %d", evs[2].ExitCode)
	}
}

func TestEventLogKeepsLateOutputAfterExit(t *testing.T) {
	l := NewEventLog(DefaultRetention(), 1)
	l.Exit(0, false)
	res := read(t, l, ReadRequest{AfterSeq: 0, MaxBytes: -1})
	if !res.Exited || res.Closed || res.NextSeq != 2 {
		t.Fatalf("after exit: %+v", res)
	}
	mustAppend(t, l, protocol.StreamStdout, "late")
	l.StreamEOF()
	res = read(t, l, ReadRequest{AfterSeq: 1, MaxBytes: -1})
	if got := chunkSeqs(res); len(got) != 1 || got[0] != 2 || string(res.Chunks[0].Chunk) != "late" {
		t.Fatalf("late chunk: %+v", res)
	}
	if !res.Closed || res.NextSeq != 4 {
		t.Fatalf("closed=%v nextSeq=%d, want true 4", res.Closed, res.NextSeq)
	}
}

func TestEventLogReadByteBudgetAlwaysReturnsFirstChunk(t *testing.T) {
	l := NewEventLog(DefaultRetention(), 1)
	for _, s := range []string{"aaaa", "bb", "cc", "d"} {
		mustAppend(t, l, protocol.StreamStdout, s)
	}
	cases := []struct {
		max     int64
		want    []uint64
		nextSeq uint64
	}{
		{0, []uint64{1}, 2},
		{3, []uint64{1}, 2},
		{4, []uint64{1}, 2},
		{6, []uint64{1, 2}, 3},
		{7, []uint64{1, 2}, 3},
		{-1, []uint64{1, 2, 3, 4}, 5},
	}
	for _, c := range cases {
		res := read(t, l, ReadRequest{MaxBytes: c.max})
		got := chunkSeqs(res)
		if len(got) != len(c.want) || res.NextSeq != c.nextSeq {
			t.Errorf("maxBytes %d: seqs %v nextSeq %d, want %v %d", c.max, got, res.NextSeq, c.want, c.nextSeq)
		}
	}
}

func TestEventLogUnlimitedReadNextSeqSkipsTerminalEvents(t *testing.T) {
	l := NewEventLog(DefaultRetention(), 1)
	mustAppend(t, l, protocol.StreamStdout, "x")
	l.Exit(0, false)
	l.StreamEOF()
	res := read(t, l, ReadRequest{MaxBytes: -1})
	if res.NextSeq != 4 {
		t.Fatalf("nextSeq %d, want 4 (past exit and close)", res.NextSeq)
	}
}

func TestEventLogReportsGapWhenAfterSeqWasEvicted(t *testing.T) {
	l := NewEventLog(Retention{MaxBytes: 1 << 20, MaxChunks: 3}, 1)
	for i := 0; i < 5; i++ {
		mustAppend(t, l, protocol.StreamStdout, "x")
	}
	res := read(t, l, ReadRequest{AfterSeq: 0, MaxBytes: -1})
	if res.Gap == nil || res.Gap.FromSeq != 1 || res.Gap.ToSeq != 2 {
		t.Fatalf("gap = %+v, want 1..2", res.Gap)
	}
	if got := chunkSeqs(res); len(got) != 3 || got[0] != 3 {
		t.Fatalf("chunks %v, want 3,4,5", got)
	}
	res = read(t, l, ReadRequest{AfterSeq: 2, MaxBytes: -1})
	if res.Gap != nil {
		t.Fatalf("no gap expected after seq 2, got %+v", res.Gap)
	}
}

func TestEventLogEvictsByBytes(t *testing.T) {
	l := NewEventLog(Retention{MaxBytes: MaxChunkBytes, MaxChunks: 1000}, 1)
	big := string(make([]byte, MaxChunkBytes/2))
	mustAppend(t, l, protocol.StreamStdout, big)
	mustAppend(t, l, protocol.StreamStdout, big)
	mustAppend(t, l, protocol.StreamStdout, big)
	res := read(t, l, ReadRequest{MaxBytes: -1})
	if got := chunkSeqs(res); len(got) != 2 || got[0] != 2 {
		t.Fatalf("chunks %v, want 2,3", got)
	}
	if res.Gap == nil || res.Gap.ToSeq != 1 {
		t.Fatalf("gap %+v", res.Gap)
	}
}

func TestEventLogExitAndCloseSurviveEviction(t *testing.T) {
	l := NewEventLog(Retention{MaxBytes: 1 << 20, MaxChunks: 1}, 1)
	mustAppend(t, l, protocol.StreamStdout, "a")
	l.Exit(3, false)
	mustAppend(t, l, protocol.StreamStdout, "b")
	mustAppend(t, l, protocol.StreamStdout, "c")
	l.StreamEOF()
	sub := l.Subscribe(0, false, nil)
	defer sub.Close()
	evs, gap, done := sub.Next(100, 1<<20)
	if gap == nil || gap.FromSeq != 1 || gap.ToSeq != 3 {
		t.Fatalf("gap %+v, want 1..3", gap)
	}
	if !done || len(evs) != 2 || evs[0].Seq != 4 || evs[1].Kind != EventClosed {
		t.Fatalf("events %+v done %v", evs, done)
	}
	res := read(t, l, ReadRequest{MaxBytes: -1})
	if !res.Exited || *res.ExitCode != 3 {
		t.Fatalf("exit lost: %+v", res)
	}
}

func TestEventLogLongPollWakesOnOutput(t *testing.T) {
	l := NewEventLog(DefaultRetention(), 1)
	got := make(chan protocol.ReadResult, 1)
	go func() {
		res, _ := l.Read(context.Background(), ReadRequest{MaxBytes: -1, Wait: time.Minute})
		got <- res
	}()
	mustAppend(t, l, protocol.StreamStdout, "hi")
	res := <-got
	if len(res.Chunks) != 1 || string(res.Chunks[0].Chunk) != "hi" {
		t.Fatalf("%+v", res)
	}
}

func TestEventLogLongPollReturnsAtDeadlineWithNothing(t *testing.T) {
	l := NewEventLog(DefaultRetention(), 1)
	res := read(t, l, ReadRequest{MaxBytes: -1, Wait: 5 * time.Millisecond})
	if len(res.Chunks) != 0 || res.NextSeq != 1 || res.Exited {
		t.Fatalf("%+v", res)
	}
}

func TestEventLogLongPollWakesOnUnseenExit(t *testing.T) {
	l := NewEventLog(DefaultRetention(), 1)
	got := make(chan protocol.ReadResult, 1)
	go func() {
		res, _ := l.Read(context.Background(), ReadRequest{MaxBytes: -1, Wait: time.Minute})
		got <- res
	}()
	l.Exit(1, false)
	if res := <-got; !res.Exited {
		t.Fatalf("%+v", res)
	}
	// A caller that has seen the exit waits for the close.
	go func() {
		res, _ := l.Read(context.Background(), ReadRequest{AfterSeq: 1, MaxBytes: -1, Wait: time.Minute})
		got <- res
	}()
	l.StreamEOF()
	if res := <-got; !res.Closed {
		t.Fatalf("%+v", res)
	}
}

func TestEventLogLongPollCancelledByResume(t *testing.T) {
	l := NewEventLog(DefaultRetention(), 1)
	cancel := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		_, err := l.Read(context.Background(), ReadRequest{MaxBytes: -1, Wait: time.Minute, Cancel: cancel})
		errc <- err
	}()
	close(cancel)
	if err := <-errc; err != ErrReadCancelled {
		t.Fatalf("err = %v", err)
	}
}

func TestHoldingSubscriberMakesAppendWaitInsteadOfEvicting(t *testing.T) {
	l := NewEventLog(Retention{MaxBytes: 1 << 20, MaxChunks: 2}, 1)
	sub := l.Subscribe(0, true, nil)
	defer sub.Close()
	mustAppend(t, l, protocol.StreamStdout, "1")
	mustAppend(t, l, protocol.StreamStdout, "2")
	appended := make(chan uint64)
	go func() {
		seq, _ := l.Append(protocol.StreamStdout, []byte("3"))
		appended <- seq
	}()
	select {
	case <-appended:
		t.Fatal("append evicted an event the holding subscriber had not consumed")
	case <-time.After(20 * time.Millisecond):
	}
	evs, gap, _ := sub.Next(1, 1<<20)
	if gap != nil || len(evs) != 1 || evs[0].Seq != 1 {
		t.Fatalf("evs %+v gap %+v", evs, gap)
	}
	if seq := <-appended; seq != 3 {
		t.Fatalf("seq %d", seq)
	}
	evs, gap, _ = sub.Next(10, 1<<20)
	if gap != nil || len(evs) != 2 || evs[0].Seq != 2 || evs[1].Seq != 3 {
		t.Fatalf("evs %+v gap %+v", evs, gap)
	}
}

func TestClosingHoldingSubscriberReleasesWaitingAppend(t *testing.T) {
	l := NewEventLog(Retention{MaxBytes: 1 << 20, MaxChunks: 1}, 1)
	sub := l.Subscribe(0, true, nil)
	mustAppend(t, l, protocol.StreamStdout, "1")
	done := make(chan struct{})
	go func() {
		l.Append(protocol.StreamStdout, []byte("2"))
		close(done)
	}()
	sub.Close()
	<-done
}

func TestAbortReleasesWaitingAppend(t *testing.T) {
	l := NewEventLog(Retention{MaxBytes: 1 << 20, MaxChunks: 1}, 1)
	sub := l.Subscribe(0, true, nil)
	defer sub.Close()
	mustAppend(t, l, protocol.StreamStdout, "1")
	errc := make(chan error)
	go func() {
		_, err := l.Append(protocol.StreamStdout, []byte("2"))
		errc <- err
	}()
	l.Abort()
	if err := <-errc; err != ErrLogAborted {
		t.Fatalf("err = %v", err)
	}
}

func TestSubscriptionReplaysThenFollowsLive(t *testing.T) {
	l := NewEventLog(DefaultRetention(), 1)
	mustAppend(t, l, protocol.StreamStdout, "before")
	notified := make(chan struct{}, 10)
	sub := l.Subscribe(0, false, func() { notified <- struct{}{} })
	defer sub.Close()
	evs, _, _ := sub.Next(10, 1<<20)
	if len(evs) != 1 || string(evs[0].Data) != "before" {
		t.Fatalf("%+v", evs)
	}
	mustAppend(t, l, protocol.StreamStdout, "after")
	<-notified
	<-sub.Ready()
	evs, _, _ = sub.Next(10, 1<<20)
	if len(evs) != 1 || string(evs[0].Data) != "after" {
		t.Fatalf("%+v", evs)
	}
}

func TestSubscribeNowSkipsHistory(t *testing.T) {
	l := NewEventLog(DefaultRetention(), 1)
	mustAppend(t, l, protocol.StreamStdout, "old")
	sub := l.SubscribeNow(false, nil)
	defer sub.Close()
	mustAppend(t, l, protocol.StreamStdout, "new")
	evs, _, _ := sub.Next(10, 1<<20)
	if len(evs) != 1 || string(evs[0].Data) != "new" {
		t.Fatalf("%+v", evs)
	}
}

func TestSubscriptionNextRespectsEventAndByteBudget(t *testing.T) {
	l := NewEventLog(DefaultRetention(), 1)
	for i := 0; i < 5; i++ {
		mustAppend(t, l, protocol.StreamStdout, "0123456789")
	}
	sub := l.Subscribe(0, false, nil)
	defer sub.Close()
	if evs, _, _ := sub.Next(2, 1<<20); len(evs) != 2 {
		t.Fatalf("event budget: %d", len(evs))
	}
	if evs, _, _ := sub.Next(10, 15); len(evs) != 1 {
		t.Fatalf("byte budget: %d events", len(evs))
	}
	if evs, _, _ := sub.Next(10, 1); len(evs) != 1 {
		t.Fatalf("first event must always fit: %d", len(evs))
	}
}

func TestRetentionValidation(t *testing.T) {
	if err := (Retention{MaxBytes: 10, MaxChunks: 10}).Validate(); err == nil {
		t.Error("tiny MaxBytes accepted")
	}
	if err := (Retention{MaxBytes: 1 << 20}).Validate(); err == nil {
		t.Error("zero MaxChunks accepted")
	}
	if err := DefaultRetention().Validate(); err != nil {
		t.Error(err)
	}
}
