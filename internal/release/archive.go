package release

import (
	"archive/tar"
	"archive/zip"
	"compress/flate"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"
)

// Format is an archive format: FormatTarGz for every platform but
// Windows, FormatZip there (GoReleaser's convention, and what Windows's
// Explorer opens).
type Format int

const (
	FormatTarGz Format = iota
	FormatZip
)

// ParseFormat maps an archive file name's extension to its Format.
func ParseFormat(name string) (Format, error) {
	switch {
	case strings.HasSuffix(name, ".tar.gz"):
		return FormatTarGz, nil
	case strings.HasSuffix(name, ".zip"):
		return FormatZip, nil
	}
	return 0, fmt.Errorf("%s: %w", name, ErrUnknownFormat)
}

// ErrUnknownFormat: an archive name that ends in neither .tar.gz nor .zip.
var ErrUnknownFormat = errors.New("archive name ends in neither .tar.gz nor .zip")

// ErrBadMember: an archive member whose name is not a plain relative
// path, appears twice, or whose source is not a regular file.
var ErrBadMember = errors.New("bad archive member")

// Member is one file of an archive: Name inside it, read from Path.
type Member struct {
	Name string
	Path string
}

// WriteArchive writes members to w in format, deterministically: members
// sorted by name, each a regular file with mode 0755 if its source is
// executable by anyone and 0644 otherwise, owned by uid and gid 0 with no
// user or group names, and modified at mtime (truncated to the second; a
// zip stores it to 2 s in the MS-DOS field plus to the second in UTC in the
// extended-timestamp field). The gzip header carries no name and no time.
// Nothing else of the machine — umask, owner, file times, locale, the time
// of day — reaches the bytes.
func WriteArchive(w io.Writer, format Format, members []Member, mtime time.Time) error {
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	for i, m := range ms {
		if m.Name == "" || path.IsAbs(m.Name) || path.Clean(m.Name) != m.Name || strings.HasPrefix(m.Name, "../") || strings.Contains(m.Name, `\`) {
			return fmt.Errorf("%w: name %q", ErrBadMember, m.Name)
		}
		if i > 0 && ms[i-1].Name == m.Name {
			return fmt.Errorf("%w: %q twice", ErrBadMember, m.Name)
		}
	}
	mtime = mtime.Truncate(time.Second).UTC()
	switch format {
	case FormatTarGz:
		return writeTarGz(w, ms, mtime)
	case FormatZip:
		return writeZip(w, ms, mtime)
	}
	return ErrUnknownFormat
}

// open opens a member's source and returns it with its size and the mode
// it gets in the archive.
func open(m Member) (*os.File, int64, os.FileMode, error) {
	f, err := os.Open(m.Path)
	if err != nil {
		return nil, 0, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, 0, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, 0, fmt.Errorf("%w: %s is not a regular file", ErrBadMember, m.Path)
	}
	mode := os.FileMode(0o644)
	if st.Mode().Perm()&0o111 != 0 {
		mode = 0o755
	}
	return f, st.Size(), mode, nil
}

func writeTarGz(w io.Writer, ms []Member, mtime time.Time) error {
	gz, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	// gzip.Writer's zero Header: no name, MTIME 0, OS "unknown".
	tw := tar.NewWriter(gz)
	for _, m := range ms {
		if err := func() error {
			f, size, mode, err := open(m)
			if err != nil {
				return err
			}
			defer f.Close()
			hdr := &tar.Header{
				Typeflag: tar.TypeReg,
				Name:     m.Name,
				Size:     size,
				Mode:     int64(mode),
				ModTime:  mtime,
				Format:   tar.FormatUSTAR, // no PAX records (which could carry atime/ctime)
			}
			if err := tw.WriteHeader(hdr); err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
			n, err := io.Copy(tw, f)
			if err == nil && n != size {
				err = fmt.Errorf("%s changed size while being archived", m.Path)
			}
			return err
		}(); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

func writeZip(w io.Writer, ms []Member, mtime time.Time) error {
	zw := zip.NewWriter(w)
	zw.RegisterCompressor(zip.Deflate, func(out io.Writer) (io.WriteCloser, error) {
		return flate.NewWriter(out, flate.BestCompression)
	})
	for _, m := range ms {
		if err := func() error {
			f, _, mode, err := open(m)
			if err != nil {
				return err
			}
			defer f.Close()
			hdr := &zip.FileHeader{Name: m.Name, Method: zip.Deflate, Modified: mtime}
			hdr.SetMode(mode) // Unix permissions, so unzip keeps the executable bit
			zf, err := zw.CreateHeader(hdr)
			if err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
			_, err = io.Copy(zf, f)
			return err
		}(); err != nil {
			return err
		}
	}
	return zw.Close()
}
