package protocol

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

type rawJSON []byte

func (r rawJSON) Decode(v any) error { return json.Unmarshal(r, v) }

func sampleEvents() []Event {
	return []Event{
		{Kind: EventOutput, Seq: 1, Stream: StreamStdout, Data: []byte("out")},
		{Kind: EventOutput, Seq: 2, Stream: StreamStderr, Data: []byte("err")},
		{Kind: EventExited, Seq: 3, ExitCode: 137, Signal: 9, SandboxDenied: true, Limit: LimitMemory},
		{Kind: EventClosed, Seq: 4},
	}
}

// Every event survives the trip through its notification, signal and all.
func TestEventsRoundTripThroughNotifications(t *testing.T) {
	for _, ev := range sampleEvents() {
		b, err := json.Marshal(ev.Params("p1"))
		if err != nil {
			t.Fatal(err)
		}
		pid, back, ok := DecodeEvent(ev.Kind.Method(), rawJSON(b))
		if !ok || pid != "p1" || !reflect.DeepEqual(back, ev) {
			t.Fatalf("%s: %s came back as %q %+v %v", ev.Kind, b, pid, back, ok)
		}
	}
	if _, _, ok := DecodeEvent("process/other", rawJSON(`{}`)); ok {
		t.Fatal("an unknown method decoded")
	}
	if _, _, ok := DecodeEvent(MethodProcessExited, rawJSON(`{"seq":"x"}`)); ok {
		t.Fatal("bad params decoded")
	}
}

// The same events survive the trip through process/read: a result built
// from them rebuilds them, the exit's signal included.
func TestEventsRoundTripThroughReadResult(t *testing.T) {
	evs := sampleEvents()
	res := ReadResult{Chunks: []OutputChunk{}, NextSeq: 5}
	for i := range evs {
		switch evs[i].Kind {
		case EventOutput:
			res.AddOutput(&evs[i])
		case EventExited:
			res.SetExit(&evs[i])
		case EventClosed:
			res.SetClosed(&evs[i])
		}
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var back ReadResult
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if got := back.Events(); !reflect.DeepEqual(got, evs) {
		t.Fatalf("%s rebuilt\n%+v\nwant\n%+v", b, got, evs)
	}
	if !bytes.Contains(b, []byte(`"signal":9`)) {
		t.Fatalf("no signal in %s", b)
	}
}

// A result cut short by maxBytes leaves out the exit (and close) numbered
// after output it did not return; the rest of the output comes first.
func TestReadResultEventsStopAtWhatTheResultCovers(t *testing.T) {
	evs := sampleEvents()
	res := ReadResult{NextSeq: 2}
	res.AddOutput(&evs[0])
	res.SetExit(&evs[2])
	res.SetClosed(&evs[3])
	got := res.Events()
	if len(got) != 1 || got[0].Seq != 1 {
		t.Fatalf("%+v", got)
	}
	// codex's results carry no exit or close seq: chunks only.
	code := int32(0)
	codex := ReadResult{Chunks: []OutputChunk{{Seq: 1, Stream: StreamStdout, Chunk: []byte("x")}}, NextSeq: 2, Exited: true, ExitCode: &code, Closed: true}
	if got := codex.Events(); len(got) != 1 || got[0].Kind != EventOutput {
		t.Fatalf("%+v", got)
	}
}

// A signal is an outpost addition: absent unless a signal killed the
// process, so a codex peer reading an ordinary result sees nothing new.
func TestReadResultSignalIsOmittedWhenZero(t *testing.T) {
	ev := Event{Kind: EventExited, Seq: 1, ExitCode: 3}
	var res ReadResult
	res.SetExit(&ev)
	b, _ := json.Marshal(res)
	if bytes.Contains(b, []byte("signal")) {
		t.Fatalf("signal without one: %s", b)
	}
}
