package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/protocol"
)

// Helper flags: the harness re-executes itself inside the client's
// namespace (a Go process cannot move all its threads into another
// network namespace, and the client library dials from goroutines of its
// own), passing the client token in WAN_HELPER_TOKEN rather than argv.
var (
	helperURL      = flag.String("helper-url", "", "internal: executor or relay URL")
	helperExecutor = flag.String("helper-executor", "", "internal: executor id at the relay")
	helperKnown    = flag.String("helper-known", "", "internal: known_executors file")
	helperN        = flag.Int("helper-n", 20, "internal: timed starts")
)

// warmResult is what the warm helper prints.
type warmResult struct {
	Ms []float64 `json:"ms"`
}

func runHelper(mode string) error {
	if mode != "warm" {
		return fmt.Errorf("unknown helper %q", mode)
	}
	if *helperURL == "" || *helperN < 1 || *helperN > 10000 {
		return errors.New("warm: -helper-url and a -helper-n in [1, 10000] are needed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	key, err := identity.Generate()
	if err != nil {
		return err
	}
	cfg := client.Config{Key: key, NoResume: true, KnownExecutors: *helperKnown, Executor: *helperExecutor, Token: os.Getenv("WAN_HELPER_TOKEN")}
	env, err := client.Dial(ctx, *helperURL, cfg)
	if err != nil {
		return fmt.Errorf("dial %s: %w", *helperURL, err)
	}
	defer env.Close()
	start := func() error {
		p, err := env.Start(ctx, protocol.ExecParams{Argv: []string{"/bin/true"}, Cwd: "file:///tmp", Env: map[string]string{"PATH": "/usr/bin:/bin"}})
		if err != nil {
			return err
		}
		for ev := range p.Events() {
			if ev.Kind == client.EventFailed {
				return ev.Err
			}
		}
		return nil
	}
	if err := start(); err != nil { // the first start pays for the session's setup
		return err
	}
	var res warmResult
	for range *helperN {
		t0 := time.Now()
		if err := start(); err != nil {
			return err
		}
		res.Ms = append(res.Ms, ms(time.Since(t0)))
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}
