package client

import (
	"context"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/transport"
)

// CallThen: a notification read after the answer waits until the
// caller has handled the answer; one read before it does not.
func TestCallThenHoldsLaterNotificationsUntilTheAnswerIsHandled(t *testing.T) {
	notes := make(chan string, 4)
	cli, srv := pipePair(t, func(m string, _ transport.Params) { notes <- m })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	release := make(chan struct{})
	inThen := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- cli.CallThen(ctx, "m", nil, nil, func(error) { close(inThen); <-release })
	}()
	req, err := srv.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv.WriteNotification(ctx, "before", nil)
	if n := <-notes; n != "before" {
		t.Fatalf("got %s", n)
	}
	srv.WriteResult(ctx, req.ID, nil)
	srv.WriteNotification(ctx, "after", nil)
	<-inThen
	select {
	case n := <-notes:
		t.Fatalf("%s was delivered while the answer was being handled", n)
	case <-time.After(50 * time.Millisecond): // a bounded look for a wrong delivery, not a wait for a right one
	}
	close(release)
	if n := <-notes; n != "after" {
		t.Fatalf("got %s", n)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A caller that stops waiting holds nothing back: the answer that comes
// after it gave up is dropped and later notifications flow.
func TestAnAbandonedCallThenHoldsNothing(t *testing.T) {
	notes := make(chan string, 4)
	cli, srv := pipePair(t, func(m string, _ transport.Params) { notes <- m })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	callCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cli.CallThen(callCtx, "m", nil, nil, func(error) {}) }()
	req, err := srv.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if err := <-done; err == nil {
		t.Fatal("an abandoned call succeeded")
	}
	srv.WriteResult(ctx, req.ID, nil)
	srv.WriteNotification(ctx, "after", nil)
	select {
	case n := <-notes:
		if n != "after" {
			t.Fatalf("got %s", n)
		}
	case <-ctx.Done():
		t.Fatal("a notification was held back by an abandoned call")
	}
}
