package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/client"
)

// One line for the whole copy: bytes of the total, rate, time left,
// files of the total; redrawn at most every 200 ms, ended with a
// newline when the last file is done.
func TestCpProgressIsOneLineForTheWholeCopy(t *testing.T) {
	var out bytes.Buffer
	clock := time.Unix(0, 0)
	b := &progressBar{w: &out, now: func() time.Time { return clock }}
	const total = 3 << 20
	p := client.Progress{Size: total, FileCount: 2, Path: "/srv/a", FileSize: 1 << 20}
	b.update(p) // drawn: the first report
	clock = clock.Add(100 * time.Millisecond)
	p.Bytes, p.FileBytes = 512<<10, 512<<10
	b.update(p) // too soon: not drawn
	clock = clock.Add(900 * time.Millisecond)
	p.Bytes, p.FileBytes = 1<<20, 1<<20
	b.update(p) // 1 MiB in 1 s: 2 s left
	p.Done, p.Files = true, 1
	b.update(p) // a file done, not the last: too soon
	p = client.Progress{Size: total, FileCount: 2, Path: "/srv/b", FileSize: 2 << 20, Bytes: 1 << 20, Files: 1}
	clock = clock.Add(time.Second)
	p.Bytes, p.FileBytes, p.Done, p.Files = total, 2<<20, true, 2
	b.update(p) // the last: drawn and ended
	want := "\r0 B / 3.0 MiB   0% 0 B/s ETA --:-- 0/2 files\x1b[K" +
		"\r1.0 MiB / 3.0 MiB  33% 1.0 MiB/s ETA 0:02 0/2 files\x1b[K" +
		"\r3.0 MiB / 3.0 MiB 100% 1.5 MiB/s ETA 0:00 2/2 files\x1b[K\n"
	if out.String() != want {
		t.Fatalf("drew %q\nwant  %q", out.String(), want)
	}
	b.finish() // nothing open: nothing more
	if out.String() != want {
		t.Fatalf("finish drew %q", out.String())
	}
}

// cpCmd runs outpost cp against an executor (stderr not a terminal: no
// progress line).
func cpCmd(t *testing.T, dir string, args ...string) *exec.Cmd {
	cmd := exec.Command(outpostBin, append([]string{"cp"}, args...)...)
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(dir, "cfg"))
	return cmd
}

// Symlinks are copied as symlinks, -L follows them; a link that cannot
// be made fails the copy with a non-zero exit; nothing is printed when
// all went well and stderr is no terminal.
func TestCpCopiesSymlinksAsSymlinksOrFollowsThem(t *testing.T) {
	url, _ := startServe(t, "--listen", "tcp://127.0.0.1:0", "--state-dir", t.TempDir())
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(src, 0o755)
	os.WriteFile(filepath.Join(src, "f"), []byte("f"), 0o640)
	os.Symlink("f", filepath.Join(src, "link"))
	out, err := cpCmd(t, dir, "-r", "--target", url, src, ":"+filepath.Join(dir, "copy")).CombinedOutput()
	if err != nil || len(out) != 0 {
		t.Fatalf("%v: %q", err, out)
	}
	if l, err := os.Readlink(filepath.Join(dir, "copy", "link")); err != nil || l != "f" {
		t.Fatalf("%q %v", l, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "copy", "f")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("%v %v", fi, err)
	}
	out, err = cpCmd(t, dir, "-r", "-L", "--target", url, ":"+src, filepath.Join(dir, "followed")).CombinedOutput()
	if err != nil || len(out) != 0 {
		t.Fatalf("-L: %v: %q", err, out)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "followed", "link")); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("-L: %v %v", fi, err)
	}
	// A directory holds the link's name: the link cannot be made.
	os.MkdirAll(filepath.Join(dir, "blocked", "src", "link", "full"), 0o755)
	cmd := cpCmd(t, dir, "-r", "--target", url, src, ":"+filepath.Join(dir, "blocked"))
	out, err = cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() == 0 || !strings.Contains(string(out), filepath.Join(src, "link")) {
		t.Fatalf("exit %d (%v): %q", cmd.ProcessState.ExitCode(), err, out)
	}
}

// EXECUTOR:rel is in the remote user's home, and a single file to a
// missing parent makes it, as -r does.
func TestCpRelativeRemotePathsAndMissingParents(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home) // the executor's, started below
	url, _ := startServe(t, "--listen", "tcp://127.0.0.1:0", "--state-dir", t.TempDir())
	dir := t.TempDir()
	f := filepath.Join(dir, "rel.txt")
	os.WriteFile(f, []byte("rel"), 0o644)
	for _, dst := range []string{":rel.txt", ":~/missing/sub/", ":" + filepath.Join(home, "abs", "missing", "x.txt")} {
		if out, err := cpCmd(t, dir, "--target", url, f, dst).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %q", dst, err, out)
		}
	}
	for _, p := range []string{"rel.txt", "missing/sub/rel.txt", "abs/missing/x.txt"} {
		if b, err := os.ReadFile(filepath.Join(home, p)); err != nil || string(b) != "rel" {
			t.Fatalf("%s: %q %v", p, b, err)
		}
	}
	if out, err := cpCmd(t, dir, "--target", url, ":rel.txt", filepath.Join(dir, "new", "back.txt")).CombinedOutput(); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "new", "back.txt")); string(b) != "rel" {
		t.Fatalf("back %q", b)
	}
}
