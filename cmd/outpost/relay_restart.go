package main

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"
)

// A relay restarted on the same host starts while the old process drains
// (a supervisor that signals the old one and starts the new one at once,
// or an operator who does): the old one may run on for --drain-timeout
// with its clients' open streams, and the new one must be able to bind
// the same ports meanwhile.
//
//   - The main port (--listen) and --ws-listen are closed at the start of
//     the drain (Listener.StopAccepting): open connections keep running on
//     their own sockets, and the new process can bind the port at once
//     (Go sets SO_REUSEADDR on listeners, so the old connections' sockets
//     do not hold the address).
//   - The admin endpoint (--admin-listen) is closed at the start of the
//     drain too (it used to stay up until the process exited, which made
//     the new relay fail with `bind: address already in use`). The
//     draining relay's /metrics, /peers and /readyz go with it; its logs
//     say how the drain ends. A load balancer's health check on that port
//     then reaches the new relay, which serves the main port now.
//   - SO_REUSEPORT was the other way, and is not used: both processes
//     would hold each port at once, and the kernel would split new
//     connections between them — half the health checks answered by the
//     draining relay's 503, half the clients sent to a relay that refuses
//     them — and any process of the same user could bind beside them.
//
// The new process may still start a moment before the old one has acted
// on its signal; so a bind that finds its address in use is tried again,
// for at most bindWait, before it fails.

// bindWait bounds how long a relay waits for a port held by the process
// it replaces: acting on a signal takes that one milliseconds, so 2 s is
// ample, and a port truly taken (another program, a relay that is not
// draining) costs a mistaken start 2 s before its error.
const bindWait = 2 * time.Second

// bindRetryEvery is how often a bind is tried again meanwhile.
const bindRetryEvery = 50 * time.Millisecond

// bindRetrying runs bind until it succeeds, fails for another reason than
// an address in use, or bindWait has passed (its last error). what names
// the flag in the one line it prints while it waits.
func bindRetrying[T any](what string, stderr io.Writer, bind func() (T, error)) (T, error) {
	deadline := time.Now().Add(bindWait)
	said := false
	for {
		v, err := bind()
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			return v, err
		}
		if !said {
			fmt.Fprintf(stderr, "outpost: %s: the address is in use; waiting up to %s for it (a relay being replaced here frees it when its drain begins)\n", what, bindWait)
			said = true
		}
		time.Sleep(bindRetryEvery)
	}
}
