package identity

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// KeyFileHeader is the first line of a key file.
const KeyFileHeader = "outpost-x25519-private-key v1"

// keyFilePrefix is the version-independent part of KeyFileHeader.
const keyFilePrefix = "outpost-x25519-private-key "

// maxKeyFileSize bounds what Load reads; a real key file is 75 bytes.
const maxKeyFileSize = 4096

// Errors wrapped by Load and LoadOrCreate, for errors.Is.
var (
	// ErrInsecureKeyFile: the key file is a symlink or not a regular file,
	// is accessible by group or others, or is owned by another user.
	ErrInsecureKeyFile = errors.New("insecure key file")
	// ErrCorruptKeyFile: the key file's contents are not a valid key.
	ErrCorruptKeyFile = errors.New("corrupt key file")
)

// Load reads the key file at path. It refuses (wrapping
// ErrInsecureKeyFile) a symlink, anything but a regular file, a file whose
// mode grants any access to group or others (anything wider than 0600),
// and a file not owned by the effective uid. A missing file gives an error
// satisfying errors.Is(err, fs.ErrNotExist); bad contents wrap
// ErrCorruptKeyFile. Every error names path.
func Load(path string) (Key, error) {
	// Lstat first, for a clear message about symlinks; the open below does
	// not follow one either, should the path be swapped in between.
	fi, err := os.Lstat(path)
	if err != nil {
		return Key{}, fmt.Errorf("identity: key file: %w", err)
	}
	if err := checkKeyFileInfo(path, fi); err != nil {
		return Key{}, err
	}
	f, err := openNoFollow(path)
	if err != nil {
		if isSymlinkLoop(err) {
			return Key{}, fmt.Errorf("identity: key file %s is a symlink; refusing it (%w)", path, ErrInsecureKeyFile)
		}
		return Key{}, fmt.Errorf("identity: key file: %w", err)
	}
	defer f.Close()
	fi, err = f.Stat()
	if err != nil {
		return Key{}, fmt.Errorf("identity: key file: %w", err)
	}
	if err := checkKeyFileInfo(path, fi); err != nil {
		return Key{}, err
	}
	if err := checkKeyFileACL(f, path); err != nil {
		return Key{}, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFileSize+1))
	if err != nil {
		return Key{}, fmt.Errorf("identity: key file: %w", err)
	}
	if len(data) > maxKeyFileSize {
		return Key{}, fmt.Errorf("identity: key file %s is corrupt: larger than %d bytes (%w)", path, maxKeyFileSize, ErrCorruptKeyFile)
	}
	k, err := parseKeyFile(data)
	if err != nil {
		return Key{}, fmt.Errorf("identity: key file %s is corrupt: %v (%w)", path, err, ErrCorruptKeyFile)
	}
	return k, nil
}

// checkKeyFileInfo enforces the key file's type, mode and owner (mode
// and owner only where the platform has them: see modeBitsGuard).
func checkKeyFileInfo(path string, fi fs.FileInfo) error {
	mode := fi.Mode()
	switch {
	case mode&fs.ModeSymlink != 0:
		return fmt.Errorf("identity: key file %s is a symlink; refusing it: keep the key in a regular file (%w)", path, ErrInsecureKeyFile)
	case !mode.IsRegular():
		return fmt.Errorf("identity: key file %s is not a regular file (mode %v) (%w)", path, mode, ErrInsecureKeyFile)
	case modeBitsGuard && mode.Perm()&^0o600 != 0:
		return fmt.Errorf("identity: key file %s has permissions %04o, which let group or others access it; run: chmod 600 %s (%w)",
			path, uint32(mode.Perm()), path, ErrInsecureKeyFile)
	}
	if uid, ok := fileOwner(fi); ok && uid != os.Geteuid() {
		return fmt.Errorf("identity: key file %s is owned by uid %d, not by the current user (uid %d) (%w)",
			path, uid, os.Geteuid(), ErrInsecureKeyFile)
	}
	return nil
}

// LoadOrCreate loads the key file at path as Load does. If the file does
// not exist it creates the parent directory (mode 0700) if needed,
// generates a key and writes it with mode 0600, atomically: the key is
// written to a temporary file in the same directory, synced, and then
// hard-linked to path, which fails rather than overwrite a file another
// process created meanwhile; in that case the other file is loaded and
// returned. created reports whether this call wrote the file.
func LoadOrCreate(path string) (k Key, created bool, err error) {
	k, err = Load(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return k, false, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Key{}, false, fmt.Errorf("identity: create key directory: %w", err)
	}
	k, err = Generate()
	if err != nil {
		return Key{}, false, err
	}
	won, err := writeNewFile(path, marshalKeyFile(k))
	if err != nil {
		return Key{}, false, fmt.Errorf("identity: write key file %s: %w", path, err)
	}
	if !won {
		// Someone else created it first: theirs is the key.
		k, err = Load(path)
		return k, false, err
	}
	return k, true, nil
}

// writeNewFile atomically creates path (mode 0600) holding data. It
// reports won=false, and writes nothing, if path already exists.
func writeNewFile(path string, data []byte) (won bool, err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return false, err
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName) // after a successful link, removes only the temp name
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return false, err
	}
	if err := restrictToUser(tmp); err != nil {
		tmp.Close()
		return false, err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Close(); err != nil {
		return false, err
	}
	// link(2) never replaces an existing file, unlike rename(2).
	if err := os.Link(tmpName, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return false, nil
		}
		// No hard links here (some network and FUSE file systems):
		// fall back to an exclusive create of the final name.
		return writeExclusive(path, data)
	}
	syncDir(dir)
	return true, nil
}

// writeExclusive creates path with O_EXCL and writes data to it. A
// concurrent reader may briefly see a partial file; it is used only where
// link(2) is unavailable.
func writeExclusive(path string, data []byte) (won bool, err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return false, nil
		}
		return false, err
	}
	err = restrictToUser(f)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return false, err
	}
	syncDir(filepath.Dir(path))
	return true, nil
}

// syncDir makes a new directory entry durable, where the file system
// supports it; failures are ignored (the data itself is already synced).
func syncDir(dir string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	_ = d.Sync()
	d.Close()
}

// marshalKeyFile returns the key file contents for k.
func marshalKeyFile(k Key) []byte {
	return []byte(KeyFileHeader + "\n" + base64.StdEncoding.EncodeToString(k.Private[:]) + "\n")
}

// parseKeyFile parses key file contents: the header line and the base64
// private key, each optionally followed by "\r" or spaces, with or without
// a final newline.
func parseKeyFile(data []byte) (Key, error) {
	text := strings.TrimSuffix(string(data), "\n")
	if text == "" {
		return Key{}, errors.New("file is empty")
	}
	lines := strings.Split(text, "\n")
	header := strings.TrimRight(lines[0], " \t\r")
	if header != KeyFileHeader {
		if strings.HasPrefix(header, keyFilePrefix) {
			return Key{}, fmt.Errorf("unsupported key file version %q (this build reads %q)", header, KeyFileHeader)
		}
		return Key{}, fmt.Errorf("first line is %s, want %q", quoteShort(header), KeyFileHeader)
	}
	if len(lines) < 2 {
		return Key{}, errors.New("missing the private key line")
	}
	if len(lines) > 2 {
		return Key{}, fmt.Errorf("%d lines, want 2", len(lines))
	}
	line := strings.TrimRight(lines[1], " \t\r")
	b, err := base64.StdEncoding.Strict().DecodeString(line)
	if err != nil || strings.ContainsAny(line, "\r\n") {
		return Key{}, errors.New("private key line is not valid standard base64")
	}
	if len(b) != KeySize {
		return Key{}, fmt.Errorf("private key is %d bytes, want %d", len(b), KeySize)
	}
	var priv [KeySize]byte
	copy(priv[:], b)
	k, err := KeyFromPrivate(priv)
	if err != nil {
		return Key{}, errors.New(strings.TrimPrefix(err.Error(), "identity: "))
	}
	return k, nil
}
