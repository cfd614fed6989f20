package local_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/local"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestLocalAndProvider(t *testing.T) {
	t.Setenv("OUTPOST_EXEC_SERVER_URL", "")
	env, err := local.ProviderFromEnv().Environment(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	if _, ok := env.(*local.Environment); !ok {
		t.Fatalf("unset URL gave %T, want a local.Environment", env)
	}
	out, err := client.Command(env, "echo", "local").Output()
	if err != nil || string(out) != "local\n" {
		t.Fatalf("%q %v", out, err)
	}
	t.Setenv("OUTPOST_EXEC_SERVER_URL", "none")
	if _, err := local.ProviderFromEnv().Environment(ctxT(t)); !errors.Is(err, local.ErrDisabled) {
		t.Fatalf("none: %v", err)
	}

	key, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := executor.NewServer(executor.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	ln, err := srv.ListenNative("tcp://127.0.0.1:0", executor.NativeConfig{Key: key.Keypair()})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	clientKey, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	p := local.EnvironmentProvider{URL: ln.URL() + "#" + key.PublicKey().Fingerprint(),
		Config: client.Config{Key: clientKey, KnownExecutors: filepath.Join(t.TempDir(), "k")}}
	remote, err := p.Environment(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer remote.Close()
	if _, ok := remote.(*client.Remote); !ok {
		t.Fatalf("URL gave %T", remote)
	}
}

// The in-process executor's environment is this process's: a Cmd with a
// nil Env gets this process's HOME and PATH, as os/exec's would.
func TestCommandInheritsThisProcesssEnvironment(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	env, err := local.New(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	out, err := client.Command(env, "/bin/sh", "-c", `printf '%s\n%s' "$HOME" "$PATH"`).Output()
	if want := os.Getenv("HOME") + "\n" + os.Getenv("PATH"); err != nil || string(out) != want {
		t.Fatalf("got %q %v, want %q", out, err, want)
	}
}
