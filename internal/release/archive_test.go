package release

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// sources writes an executable and a plain file into a temp dir.
func sources(t *testing.T) []Member {
	t.Helper()
	dir := t.TempDir()
	exe := filepath.Join(dir, "tool")
	doc := filepath.Join(dir, "README.md")
	if err := os.WriteFile(exe, bytes.Repeat([]byte("binary "), 1000), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(doc, []byte("# read me\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return []Member{{Name: "tool", Path: exe}, {Name: "README.md", Path: doc}}
}

// TestArchivesAreDeterministic: the bytes depend on the files and the
// given time only — not on the members' order, their modes beyond the
// executable bit, or their file times.
func TestArchivesAreDeterministic(t *testing.T) {
	mtime := time.Date(2026, 12, 3, 14, 1, 11, 0, time.UTC)
	for _, format := range []Format{FormatTarGz, FormatZip} {
		ms := sources(t)
		var a, b bytes.Buffer
		if err := WriteArchive(&a, format, ms, mtime); err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			os.Chtimes(m.Path, time.Now(), time.Now().Add(-time.Hour))
		}
		os.Chmod(ms[0].Path, 0o751)
		os.Chmod(ms[1].Path, 0o664)
		if err := WriteArchive(&b, format, []Member{ms[1], ms[0]}, mtime.Add(500*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Fatalf("format %d: two archives of the same files differ", format)
		}
		var c bytes.Buffer
		if err := WriteArchive(&c, format, ms, mtime.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(a.Bytes(), c.Bytes()) {
			t.Fatalf("format %d: the time does not reach the archive", format)
		}
	}
}

type entry struct {
	name  string
	mode  os.FileMode
	mtime time.Time
	data  string
}

func readTarGz(t *testing.T, b []byte) []entry {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if gz.Name != "" || !gz.ModTime.IsZero() {
		t.Errorf("gzip header carries name %q, time %v", gz.Name, gz.ModTime)
	}
	tr := tar.NewReader(gz)
	var es []entry
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return es
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || h.Typeflag != tar.TypeReg {
			t.Errorf("%s: uid %d gid %d %q %q type %c", h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.Typeflag)
		}
		d, _ := io.ReadAll(tr)
		es = append(es, entry{h.Name, os.FileMode(h.Mode), h.ModTime.UTC(), string(d)})
	}
}

func readZip(t *testing.T, b []byte) []entry {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	var es []entry
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		d, _ := io.ReadAll(rc)
		rc.Close()
		es = append(es, entry{f.Name, f.Mode(), f.Modified.UTC(), string(d)})
	}
	return es
}

// TestArchiveContents: sorted members, 0755 for an executable and 0644
// otherwise, the given time, the files' bytes.
func TestArchiveContents(t *testing.T) {
	mtime := time.Date(2026, 12, 3, 14, 1, 10, 0, time.UTC) // even: a zip's DOS field has 2 s steps
	ms := sources(t)
	want := []entry{
		{"README.md", 0o644, mtime, "# read me\n"},
		{"tool", 0o755, mtime, string(bytes.Repeat([]byte("binary "), 1000))},
	}
	for _, format := range []Format{FormatTarGz, FormatZip} {
		var b bytes.Buffer
		if err := WriteArchive(&b, format, ms, mtime); err != nil {
			t.Fatal(err)
		}
		got := readTarGz
		if format == FormatZip {
			got = readZip
		}
		es := got(t, b.Bytes())
		if len(es) != len(want) {
			t.Fatalf("format %d: %d entries, want %d", format, len(es), len(want))
		}
		for i := range want {
			if es[i].name != want[i].name || es[i].mode != want[i].mode || !es[i].mtime.Equal(want[i].mtime) || es[i].data != want[i].data {
				t.Errorf("format %d entry %d: %s %v %v (%d bytes), want %s %v %v", format, i,
					es[i].name, es[i].mode, es[i].mtime, len(es[i].data), want[i].name, want[i].mode, want[i].mtime)
			}
		}
	}
}

func TestArchiveRefusesBadMembers(t *testing.T) {
	ms := sources(t)
	for _, bad := range [][]Member{
		{{Name: "../x", Path: ms[0].Path}},
		{{Name: "/abs", Path: ms[0].Path}},
		{{Name: "a//b", Path: ms[0].Path}},
		{{Name: `a\b`, Path: ms[0].Path}},
		{{Name: "x", Path: ms[0].Path}, {Name: "x", Path: ms[1].Path}},
		{{Name: "dir", Path: t.TempDir()}},
	} {
		err := WriteArchive(io.Discard, FormatTarGz, bad, time.Now())
		if !errors.Is(err, ErrBadMember) {
			t.Errorf("%v: err %v, want ErrBadMember", bad, err)
		}
	}
	if _, err := ParseFormat("x.tar.xz"); !errors.Is(err, ErrUnknownFormat) {
		t.Errorf("ParseFormat(x.tar.xz): %v", err)
	}
}
