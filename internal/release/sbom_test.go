package release

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSBOMRefusesAFileWithoutBuildInfo(t *testing.T) {
	p := filepath.Join(t.TempDir(), "outpost")
	os.WriteFile(p, []byte("#!/bin/sh\necho not a Go binary\n"), 0o755)
	_, err := SBOM(SBOMInput{Archive: "a.tar.gz", ArchiveSHA256: strings.Repeat("0", 64), Version: "1.0.0",
		Created: time.Unix(0, 0), Binaries: []Member{{Name: "outpost", Path: p}}})
	if !errors.Is(err, ErrNoBuildInfo) {
		t.Fatalf("err %v, want ErrNoBuildInfo", err)
	}
}

func TestSBOMNames(t *testing.T) {
	if got := goPurl("github.com/BurntSushi/toml", "v1.6.0+incompatible"); got != "pkg:golang/github.com/BurntSushi/toml@v1.6.0%2Bincompatible" {
		t.Errorf("purl %s", got)
	}
	if got := proxyZipURL("github.com/BurntSushi/toml", "v1.6.0"); got != "https://proxy.golang.org/github.com/!burnt!sushi/toml/@v/v1.6.0.zip" {
		t.Errorf("proxy URL %s", got)
	}
	if hex, ok := h1Hex("h1:KjPQoQCEFdZDiP03phOvGi11+SVVhBG2wOWAorLsstg="); !ok || hex != "2a33d0a1008415d64388fd37a613af1a2d75f925558411b6c0e580a2b2ecb2d8" {
		t.Errorf("h1Hex: %s %v", hex, ok)
	}
	if _, ok := h1Hex("h2:abc"); ok {
		t.Error("h1Hex accepted another hash")
	}
	ids := newIDs()
	a, b := ids.make("Go-a/b@v1"), ids.make("Go-a-b@v1")
	if a == b || a != "SPDXRef-Go-a-b-v1" {
		t.Errorf("ids %s %s", a, b)
	}
}
