package sandbox

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"
)

// The helper can be a small binary of its own (cmd/outpost-sandbox)
// instead of the executor re-executing itself: it starts in a third of the
// time. Because the helper is a security boundary, the executor uses one
// only when it provably speaks the same protocol: Identity — a digest of
// this package's source, the versions of the modules it is built with and
// the Go release — must match the executor's own, and the file is pinned
// by an open descriptor, so replacing it on disk later changes nothing.

//go:embed *.go
var sources embed.FS

// identityArg asks a dedicated helper binary for its Identity.
const identityArg = "--identity"

// sandboxModules are the modules this package's code comes from.
var sandboxModules = []string{"golang.org/x/sys", "github.com/landlock-lsm/go-landlock", "kernel.org/pub/linux/libs/security/libcap/psx"}

// identity is "src:<digest> deps:<digest>": the digest of this package's
// source and the Go release, and the digest of the versions of the modules
// the package's code comes from ("deps:none" in a test binary, which
// records no modules).
var identity = sync.OnceValue(func() string {
	h := sha256.New()
	names, _ := fs.Glob(sources, "*.go")
	sort.Strings(names)
	for _, n := range names {
		b, _ := sources.ReadFile(n)
		fmt.Fprintf(h, "%s %d\n", n, len(b))
		h.Write(b)
	}
	fmt.Fprintf(h, "go %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	id := "src:" + hex.EncodeToString(h.Sum(nil))
	bi, ok := debug.ReadBuildInfo()
	if !ok || len(bi.Deps) == 0 {
		return id + " deps:none"
	}
	d := sha256.New()
	for _, m := range sandboxModules {
		fmt.Fprintf(d, "%s %s\n", m, moduleVersion(bi, m))
	}
	return id + " deps:" + hex.EncodeToString(d.Sum(nil))
})

// sameIdentity compares two identities: the sources always, the module
// versions whenever both binaries recorded them.
func sameIdentity(a, b string) bool {
	as, ad, _ := strings.Cut(a, " ")
	bs, bd, _ := strings.Cut(b, " ")
	if as == "" || as != bs {
		return false
	}
	return ad == bd || ad == "deps:none" || bd == "deps:none"
}

func moduleVersion(bi *debug.BuildInfo, path string) string {
	for _, d := range bi.Deps {
		if d.Path == path {
			if d.Replace != nil {
				d = d.Replace
			}
			return d.Version
		}
	}
	return "absent"
}

// Identity names the helper protocol this binary speaks.
func Identity() string { return identity() }

// DedicatedHelperMain is the main of cmd/outpost-sandbox.
func DedicatedHelperMain() {
	if len(os.Args) == 2 && os.Args[1] == identityArg {
		fmt.Println(Identity())
		os.Exit(0)
	}
	HelperMain()
}

// ErrHelperMismatch refuses a helper binary of another build.
var ErrHelperMismatch = errors.New("the sandbox helper binary is not of this executor's build")

// pinned keeps a dedicated helper's descriptor open for the process's life.
var pinned *os.File

// UseHelper makes the sandbox run commands through the dedicated helper
// binary at path, after checking that it speaks this build's protocol. The
// file is opened once and executed through its descriptor from then on.
// On an error nothing changes: the executor re-executes itself.
func UseHelper(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("sandbox helper: %w", err)
	}
	fdPath := fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	cmd := exec.Command(fdPath, identityArg)
	cmd.Args[0] = HelperName
	cmd.Env = []string{}
	done := make(chan struct{})
	var out []byte
	go func() { out, err = cmd.Output(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
		err = errors.New("no answer within 10 s")
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("sandbox helper %s: %w: asking its identity: %v", path, ErrHelperMismatch, err)
	}
	if got := strings.TrimSpace(string(out)); !sameIdentity(got, Identity()) {
		f.Close()
		return fmt.Errorf("sandbox helper %s: %w (its identity %.16s, ours %.16s)", path, ErrHelperMismatch, got, Identity())
	}
	if pinned != nil {
		pinned.Close()
	}
	pinned = f
	SetHelperBinary(fdPath)
	return nil
}

// helperFile keeps the descriptor of a helper named by SetHelperBinary.
var helperFile *os.File

// HelperPath is the helper the sandbox executes now.
func HelperPath() string {
	p, _ := self()
	return p
}
