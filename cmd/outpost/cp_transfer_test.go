package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/outpost-exec/outpost/client"
)

// The bar is drawn from client.Progress reports as it was from the
// bytes: one line per file of 1 MiB or more, redrawn at most every
// 200 ms, finished at 100% with a newline; smaller files draw nothing.
func TestCpProgressBarFollowsTheTransferReports(t *testing.T) {
	var out bytes.Buffer
	b := &progressBar{w: &out}
	feed := func(name string, size int64, chunks ...int64) {
		p := client.Progress{Path: "/srv/" + name, FileSize: size}
		b.update(p)
		for _, n := range chunks {
			p.FileBytes += n
			b.update(p)
		}
		p.Done = true
		b.update(p)
	}
	feed("small", 1000, 600, 400)
	if out.Len() != 0 {
		t.Fatalf("a small file drew %q", out.String())
	}
	feed("big.bin", 2<<20, 1<<20, 1<<20)
	line := regexp.MustCompile(`^\rbig\.bin {17} \[={15} {15}\]  50\.0% +[0-9.]+ MiB/s\rbig\.bin {17} \[={30}\] 100\.0% +[0-9.]+ MiB/s\n$`)
	if !line.MatchString(out.String()) {
		t.Fatalf("bar %q", out.String())
	}
}

func TestCpReportsWhatItSkips(t *testing.T) {
	url, _ := startServe(t, "--listen", "tcp://127.0.0.1:0", "--state-dir", t.TempDir())
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(src, 0o755)
	os.WriteFile(filepath.Join(src, "f"), []byte("f"), 0o640)
	os.Symlink("f", filepath.Join(src, "link"))
	cmd := exec.Command(outpostBin, "cp", "-r", "--target", url, src, ":"+filepath.Join(dir, "copy"))
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(dir, "cfg"))
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "outpost cp: skipping "+filepath.Join(src, "link")+" (not a regular file or directory)" {
		t.Fatalf("%v: %q", err, out)
	}
	if fi, err := os.Stat(filepath.Join(dir, "copy", "f")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("%v %v", fi, err)
	}
}
