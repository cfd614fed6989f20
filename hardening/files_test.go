//go:build linux

package hardening

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCpOneGiBThroughTheRelayRoundTripsWithBoundedMemory sends a 1 GiB
// file up through a relay to a joined executor and back with outpost cp
// (real processes), and checks the digest and every process's peak memory:
// streamed transfers must not hold the file.
func TestCpOneGiBThroughTheRelayRoundTripsWithBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 2 GiB; skipped with -short")
	}
	dir := t.TempDir()
	rl := startDaemon(t, "relay", true, "relay", "serve", "--listen", "tcp://127.0.0.1:0", "--state-dir", filepath.Join(dir, "relay"))
	joinTok := tokenCreate(t, filepath.Join(dir, "relay"), "--join")
	clientTok := tokenCreate(t, filepath.Join(dir, "relay"), "--client")
	ex := startDaemon(t, "executor", false, "executor", "join", "--relay", rl.url, "--token", joinTok, "--id", "files", "--state-dir", filepath.Join(dir, "exec"))

	src := filepath.Join(dir, "src.bin")
	want := writeRandomFile(t, src, 1<<30)
	remote := filepath.Join(dir, "remote")
	os.MkdirAll(remote, 0o755)
	cp := func(args ...string) (maxRSSKiB int64, wall time.Duration) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			cmd := exec.Command(outpostBin, append([]string{"cp", "-q", "--relay", rl.url, "--token", clientTok}, args...)...)
			cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(dir, "cfg"))
			start := time.Now()
			out, err := cmd.CombinedOutput()
			if err == nil {
				return cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss, time.Since(start)
			}
			if time.Now().After(deadline) {
				t.Fatalf("outpost cp %v: %v\n%s", args, err, out)
			}
			time.Sleep(100 * time.Millisecond) // the executor may still be joining
		}
	}
	upRSS, upWall := cp(src, "files:"+filepath.Join(remote, "up.bin"))
	down := filepath.Join(dir, "down.bin")
	downRSS, downWall := cp("files:"+filepath.Join(remote, "up.bin"), down)
	if got := fileDigest(t, down); got != want {
		t.Fatalf("round trip digest %s, want %s", got, want)
	}
	t.Logf("1 GiB up in %v (%.0f MB/s, cp peak RSS %d MiB), down in %v (%.0f MB/s, %d MiB)",
		upWall.Round(time.Millisecond), float64(1<<30)/upWall.Seconds()/1e6, upRSS>>10,
		downWall.Round(time.Millisecond), float64(1<<30)/downWall.Seconds()/1e6, downRSS>>10)
	for name, kib := range map[string]int64{"cp up": upRSS, "cp down": downRSS, "relay": peakRSSKiB(rl), "executor": peakRSSKiB(ex)} {
		t.Logf("%s peak RSS %d MiB", name, kib>>10)
		// Far below the file's size: nothing holds the file.
		if kib > memoryScale*128<<10 {
			t.Errorf("%s peaked at %d MiB moving a 1 GiB file", name, kib>>10)
		}
	}
}

func writeRandomFile(t *testing.T, name string, size int) string {
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	rng := rand.NewChaCha8([32]byte{7})
	buf := make([]byte, 1<<20)
	for written := 0; written < size; written += len(buf) {
		rng.Read(buf)
		f.Write(buf)
		h.Write(buf)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func fileDigest(t *testing.T, name string) string {
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil))
}

// peakRSSKiB is a daemon's VmHWM.
func peakRSSKiB(d *daemon) int64 {
	data, _ := os.ReadFile("/proc/" + itoa(d.cmd.Process.Pid) + "/status")
	return statusField(string(data), "VmHWM:")
}

func itoa(n int) string { return strconv.Itoa(n) }

// statusField reads a "Name:   N kB" line of /proc/PID/status.
func statusField(status, name string) int64 {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, name); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}
