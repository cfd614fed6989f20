// Package release holds the parts of `make release` (scripts/release.sh)
// and of the `go install …@latest` check (scripts/go-install-check.sh) that
// a shell script cannot do portably or reproducibly: byte-for-byte
// deterministic tar.gz and zip archives, a checksums file, an SPDX 2.3 SBOM
// read from a Go binary's embedded build information, and a file:// module
// proxy that serves this checkout as a module version.
//
// Why Go and not tar, gzip, zip and sha256sum: the same commit must give
// the same archive bytes on any maintainer's machine, and GNU tar's
// --sort/--mtime flags, gzip's header fields and zip's extra fields differ
// between implementations (macOS ships bsdtar and no sha256sum). Here the
// bytes depend only on the files, the commit time and the Go release.
//
// Everything is standard library only, so the release tooling adds no
// module to go.mod.
package release
