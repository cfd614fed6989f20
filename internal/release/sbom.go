package release

import (
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"
)

// The SBOM is SPDX 2.3 JSON (https://spdx.github.io/spdx-spec/v2.3/), one
// document per release archive. It is read from the build information the
// Go linker embeds in every binary (what `go version -m -json` prints;
// debug/buildinfo is the library behind it, and reads a binary of any
// GOOS/GOARCH), so it names exactly the module versions compiled in, not
// what go.mod would allow. Its shape:
//
//	DOCUMENT DESCRIBES the archive (a package, with the archive's SHA-256)
//	archive CONTAINS each binary (a package, with the binary's SHA-256)
//	binary GENERATED_FROM the main module (github.com/outpost-exec/outpost)
//	binary CONTAINS every module linked into it, and the Go standard library
//	main module DEPENDS_ON every dependency module
//
// Each module carries its version, a purl (pkg:golang/<path>@<version>) and,
// when the binary recorded one, its go.sum checksum: the "h1:" hash is a
// base64 SHA-256 (of the module's file list and file hashes, not of a
// download), given as the package's SHA256 checksum in hex, as syft does,
// and verbatim in the package's comment.

// SBOMInput is what an SBOM describes besides the binaries' build info.
type SBOMInput struct {
	// Archive is the release archive's file name; ArchiveSHA256 its hex
	// SHA-256; ArchiveURL where it is published ("" for NOASSERTION).
	Archive       string
	ArchiveSHA256 string
	ArchiveURL    string
	// Version is the release version (no leading "v": 1.2.0, or
	// 0.0.0-20261203143000-a4768bc12345 for an untagged commit); Commit the
	// full commit hash.
	Version string
	Commit  string
	// Created is the document's creation time: the commit time, so the
	// same commit gives the same SBOM.
	Created time.Time
	// Binaries are the archive's Go binaries, by name in the archive.
	Binaries []Member
}

// ErrNoBuildInfo: a file that is not a Go binary with module build info.
var ErrNoBuildInfo = errors.New("no Go module build information")

// Repository is where the main module's source lives, for its SPDX download
// location and the document namespace.
const Repository = "https://github.com/outpost-exec/outpost"

type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
	Comment  string   `json:"comment,omitempty"`
}

type spdxPackage struct {
	Name                  string            `json:"name"`
	SPDXID                string            `json:"SPDXID"`
	VersionInfo           string            `json:"versionInfo,omitempty"`
	DownloadLocation      string            `json:"downloadLocation"`
	FilesAnalyzed         bool              `json:"filesAnalyzed"`
	Checksums             []spdxChecksum    `json:"checksums,omitempty"`
	ExternalRefs          []spdxExternalRef `json:"externalRefs,omitempty"`
	PrimaryPackagePurpose string            `json:"primaryPackagePurpose,omitempty"`
	Comment               string            `json:"comment,omitempty"`
}

type spdxChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxExternalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	SPDXElementID      string `json:"spdxElementId"`
	RelationshipType   string `json:"relationshipType"`
	RelatedSPDXElement string `json:"relatedSpdxElement"`
}

// SBOM builds the SPDX 2.3 JSON document for in. The output depends only on
// in and the binaries' bytes.
func SBOM(in SBOMInput) ([]byte, error) {
	if in.Archive == "" || in.Version == "" || len(in.Binaries) == 0 {
		return nil, errors.New("sbom: archive, version and at least one binary are required")
	}
	if len(in.ArchiveSHA256) != 64 {
		return nil, fmt.Errorf("sbom: archive SHA-256 %q is not 64 hex digits", in.ArchiveSHA256)
	}
	doc := spdxDocument{
		SPDXVersion:       "SPDX-2.3",
		DataLicense:       "CC0-1.0",
		SPDXID:            "SPDXRef-DOCUMENT",
		Name:              in.Archive,
		DocumentNamespace: Repository + "/spdx/" + in.Archive + "-" + in.ArchiveSHA256,
		CreationInfo: spdxCreationInfo{
			Created:  in.Created.UTC().Format(time.RFC3339),
			Creators: []string{"Tool: outpost-release-" + in.Version},
			Comment:  "Read from the Go build information embedded in each binary (go version -m).",
		},
	}
	ids := newIDs()
	archiveID := ids.make("Archive-" + in.Archive)
	doc.Packages = append(doc.Packages, spdxPackage{
		Name:                  in.Archive,
		SPDXID:                archiveID,
		VersionInfo:           in.Version,
		DownloadLocation:      orNoAssertion(in.ArchiveURL),
		Checksums:             []spdxChecksum{{"SHA256", in.ArchiveSHA256}},
		PrimaryPackagePurpose: "ARCHIVE",
	})
	rel := func(a, kind, b string) {
		doc.Relationships = append(doc.Relationships, spdxRelationship{a, kind, b})
	}
	rel(doc.SPDXID, "DESCRIBES", archiveID)

	modules := map[string]string{} // path@version -> SPDXID
	var mainID string
	var depIDs []string
	module := func(m *debug.Module, isMain bool) string {
		version := m.Version
		if isMain {
			version = "v" + in.Version
		}
		sum := m.Sum
		replaced := ""
		if m.Replace != nil {
			replaced = fmt.Sprintf(" Replaced by %s %s.", m.Replace.Path, m.Replace.Version)
			sum = m.Replace.Sum
		}
		key := m.Path + "@" + version
		if id, ok := modules[key]; ok {
			return id
		}
		id := ids.make("Go-" + key)
		modules[key] = id
		p := spdxPackage{
			Name:                  m.Path,
			SPDXID:                id,
			VersionInfo:           version,
			DownloadLocation:      proxyZipURL(m.Path, version),
			ExternalRefs:          []spdxExternalRef{{"PACKAGE-MANAGER", "purl", goPurl(m.Path, version)}},
			PrimaryPackagePurpose: "LIBRARY",
		}
		if isMain {
			p.DownloadLocation = "git+" + Repository + ".git"
			if in.Commit != "" {
				p.DownloadLocation += "@" + in.Commit
			}
			p.PrimaryPackagePurpose = "SOURCE"
		}
		if digest, ok := h1Hex(sum); ok {
			p.Checksums = []spdxChecksum{{"SHA256", digest}}
			p.Comment = "Go module checksum " + sum + " (go.sum)."
		}
		p.Comment = strings.TrimSpace(p.Comment + replaced)
		doc.Packages = append(doc.Packages, p)
		if isMain {
			mainID = id
		} else {
			depIDs = append(depIDs, id)
		}
		return id
	}

	bins := slices.Clone(in.Binaries)
	slices.SortFunc(bins, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	goVersions := map[string]string{}
	for _, b := range bins {
		bi, err := buildinfo.ReadFile(b.Path)
		if err != nil {
			return nil, fmt.Errorf("sbom: %s: %w: %v", b.Path, ErrNoBuildInfo, err)
		}
		if bi.Main.Path == "" {
			return nil, fmt.Errorf("sbom: %s: %w (built outside module mode?)", b.Path, ErrNoBuildInfo)
		}
		sum, err := FileSHA256(b.Path)
		if err != nil {
			return nil, fmt.Errorf("sbom: %w", err)
		}
		binID := ids.make("Binary-" + b.Name)
		doc.Packages = append(doc.Packages, spdxPackage{
			Name:                  filepath.Base(b.Name),
			SPDXID:                binID,
			VersionInfo:           in.Version,
			DownloadLocation:      "NOASSERTION",
			Checksums:             []spdxChecksum{{"SHA256", sum}},
			PrimaryPackagePurpose: "APPLICATION",
			Comment:               "Go package " + bi.Path + ", built by " + bi.GoVersion + " with " + settings(bi) + ".",
		})
		rel(archiveID, "CONTAINS", binID)
		rel(binID, "GENERATED_FROM", module(&bi.Main, true))
		for _, d := range bi.Deps {
			rel(binID, "CONTAINS", module(d, false))
		}
		std, ok := goVersions[bi.GoVersion]
		if !ok {
			std = ids.make("Go-stdlib@" + bi.GoVersion)
			goVersions[bi.GoVersion] = std
			doc.Packages = append(doc.Packages, spdxPackage{
				Name:                  "stdlib",
				SPDXID:                std,
				VersionInfo:           bi.GoVersion,
				DownloadLocation:      "https://go.dev/dl/",
				ExternalRefs:          []spdxExternalRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/stdlib@" + purlEscape(bi.GoVersion)}},
				PrimaryPackagePurpose: "LIBRARY",
				Comment:               "The Go standard library and runtime.",
			})
		}
		rel(binID, "CONTAINS", std)
	}
	for _, id := range depIDs {
		rel(mainID, "DEPENDS_ON", id)
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// settings lists the build settings that shape a binary (GOOS, GOARCH,
// CGO_ENABLED, -trimpath, -ldflags, ...), in the binary's order.
func settings(bi *buildinfo.BuildInfo) string {
	var s []string
	for _, kv := range bi.Settings {
		s = append(s, kv.Key+"="+kv.Value)
	}
	if len(s) == 0 {
		return "no recorded settings"
	}
	return strings.Join(s, " ")
}

func orNoAssertion(s string) string {
	if s == "" {
		return "NOASSERTION"
	}
	return s
}

// h1Hex turns a go.sum "h1:<base64 SHA-256>" into hex.
func h1Hex(sum string) (string, bool) {
	b64, ok := strings.CutPrefix(sum, "h1:")
	if !ok {
		return "", false
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(b) != 32 {
		return "", false
	}
	return hex.EncodeToString(b), true
}

// goPurl is the package URL of a Go module version: each path segment and
// the version percent-encoded (purl's rule), case kept (Go module paths
// are case-sensitive).
func goPurl(path, version string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		segs[i] = purlEscape(s)
	}
	return "pkg:golang/" + strings.Join(segs, "/") + "@" + purlEscape(version)
}

func purlEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// proxyZipURL is where proxy.golang.org serves a module version's zip.
func proxyZipURL(path, version string) string {
	return "https://proxy.golang.org/" + caseEscape(path) + "/@v/" + caseEscape(version) + ".zip"
}

// caseEscape is the module proxy's case encoding: each upper-case letter
// becomes "!" and its lower case, so paths differing only in case stay
// apart on case-insensitive file systems.
func caseEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// ids hands out SPDX identifiers: "SPDXRef-" and the name with every
// character SPDX does not allow (letters, digits, '.', '-') made '-',
// numbered on the rare collision.
type spdxIDs struct{ seen map[string]int }

func newIDs() *spdxIDs { return &spdxIDs{seen: map[string]int{}} }

func (s *spdxIDs) make(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-') {
			b[i] = '-'
		}
	}
	id := "SPDXRef-" + string(b)
	s.seen[id]++
	if n := s.seen[id]; n > 1 {
		id = fmt.Sprintf("%s-%d", id, n)
	}
	return id
}
