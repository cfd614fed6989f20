// Command outpost-release is the Go half of scripts/release.sh and
// scripts/go-install-check.sh (package internal/release says why Go):
//
//	outpost-release archive -o OUT -mtime UNIX NAME=PATH...
//	    a deterministic OUT (.tar.gz or .zip by its name)
//	outpost-release sbom -archive PATH -version V -commit C -created UNIX [-url U] NAME=PATH...
//	    the SPDX 2.3 JSON SBOM of the archive at PATH, whose Go binaries are
//	    NAME (in the archive) at PATH, on stdout
//	outpost-release checksums FILE...
//	    checksums.txt (sha256sum's format) on stdout
//	outpost-release modproxy -dir DIR -proxy PROXY -version V -time UNIX < files
//	    DIR as module version V in the file:// proxy PROXY; files is the
//	    NUL-separated list `git ls-files -z` prints
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/outpost-exec/outpost/internal/release"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "archive":
		err = archive(os.Args[2:])
	case "sbom":
		err = sbom(os.Args[2:])
	case "checksums":
		var s string
		if s, err = release.Checksums(os.Args[2:]); err == nil {
			_, err = io.WriteString(os.Stdout, s)
		}
	case "modproxy":
		err = modproxy(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "outpost-release:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: outpost-release archive|sbom|checksums|modproxy ... (see the command's doc comment)")
	os.Exit(2)
}

// members parses NAME=PATH arguments.
func members(args []string) ([]release.Member, error) {
	var ms []release.Member
	for _, a := range args {
		name, p, ok := strings.Cut(a, "=")
		if !ok || name == "" || p == "" {
			return nil, fmt.Errorf("%q is not NAME=PATH", a)
		}
		ms = append(ms, release.Member{Name: name, Path: p})
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("no files named")
	}
	return ms, nil
}

func archive(args []string) error {
	fs := flag.NewFlagSet("archive", flag.ExitOnError)
	out := fs.String("o", "", "the archive to write (.tar.gz or .zip)")
	mtime := fs.Int64("mtime", 0, "every member's modification time, Unix seconds (the commit time)")
	fs.Parse(args)
	format, err := release.ParseFormat(*out)
	if err != nil {
		return err
	}
	ms, err := members(fs.Args())
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := release.WriteArchive(&buf, format, ms, time.Unix(*mtime, 0)); err != nil {
		return err
	}
	return os.WriteFile(*out, buf.Bytes(), 0o644)
}

func sbom(args []string) error {
	fs := flag.NewFlagSet("sbom", flag.ExitOnError)
	archive := fs.String("archive", "", "the release archive")
	version := fs.String("version", "", "the release version (no leading v)")
	commit := fs.String("commit", "", "the full commit hash")
	created := fs.Int64("created", 0, "the document's creation time, Unix seconds (the commit time)")
	url := fs.String("url", "", "where the archive is published (default NOASSERTION)")
	fs.Parse(args)
	ms, err := members(fs.Args())
	if err != nil {
		return err
	}
	sum, err := release.FileSHA256(*archive)
	if err != nil {
		return err
	}
	doc, err := release.SBOM(release.SBOMInput{
		Archive:       filepath.Base(*archive),
		ArchiveSHA256: sum,
		ArchiveURL:    *url,
		Version:       *version,
		Commit:        *commit,
		Created:       time.Unix(*created, 0),
		Binaries:      ms,
	})
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(doc)
	return err
}

func modproxy(args []string) error {
	fs := flag.NewFlagSet("modproxy", flag.ExitOnError)
	dir := fs.String("dir", ".", "the module's root directory")
	proxy := fs.String("proxy", "", "the proxy's root directory")
	version := fs.String("version", "", "the module version to serve (vX.Y.Z or a pseudo-version)")
	at := fs.Int64("time", 0, "the version's time, Unix seconds (the commit time)")
	fs.Parse(args)
	var files []string
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(nil, 1<<20)
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		if i := bytes.IndexByte(data, 0); i >= 0 {
			return i + 1, data[:i], nil
		}
		if atEOF && len(data) > 0 {
			return len(data), data, nil
		}
		return 0, nil, nil
	})
	for sc.Scan() {
		files = append(files, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return err
	}
	keep, excluded, err := release.ModuleFiles(*dir, files)
	if err != nil {
		return err
	}
	for _, e := range excluded {
		fmt.Fprintf(os.Stderr, "modproxy: left out %s: %s\n", e.File, e.Reason)
	}
	mod, err := release.WriteFileProxy(*proxy, *dir, keep, *version, time.Unix(*at, 0), release.DefaultModZipConfig())
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "modproxy: %s@%s, %d files, in %s\n", mod, *version, len(keep), *proxy)
	return nil
}
