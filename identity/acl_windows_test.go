package identity

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/windows"
)

// These run on Windows, and on Linux under Wine (wine_linux_test.go runs
// this package's windows/amd64 test binary there, with -test.run
// '^TestACL').

// aclTempDir is t.TempDir, removed file by file: Wine 8 cannot run
// os.RemoveAll of Go 1.26 (the FileDispositionInformationEx it asks for
// fails with "Invalid function"), and t.TempDir's clean-up uses it.
func aclTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "outpost-acl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var paths []string
		filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
			paths = append(paths, p)
			return nil
		})
		for i := len(paths) - 1; i >= 0; i-- {
			os.Remove(paths[i])
		}
	})
	return dir
}

// grantEveryone adds an entry granting Everyone mask on path, keeping the
// entries it has.
func grantEveryone(t *testing.T, path string, mask windows.ACCESS_MASK) {
	t.Helper()
	sd, err := windows.GetNamedSecurityInfo(path, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		t.Fatal(err)
	}
	old, _, err := sd.DACL()
	if err != nil {
		t.Fatal(err)
	}
	everyone, err := windows.CreateWellKnownSid(windows.WinWorldSid)
	if err != nil {
		t.Fatal(err)
	}
	acl, err := windows.ACLFromEntries([]windows.EXPLICIT_ACCESS{{
		AccessPermissions: mask,
		AccessMode:        windows.GRANT_ACCESS,
		Inheritance:       windows.NO_INHERITANCE,
		Trustee: windows.TRUSTEE{
			TrusteeForm:  windows.TRUSTEE_IS_SID,
			TrusteeType:  windows.TRUSTEE_IS_WELL_KNOWN_GROUP,
			TrusteeValue: windows.TrusteeValueFromSID(everyone),
		},
	}}, old)
	if err != nil {
		t.Fatal(err)
	}
	if err := windows.SetNamedSecurityInfo(path, windows.SE_FILE_OBJECT,
		windows.DACL_SECURITY_INFORMATION|windows.PROTECTED_DACL_SECURITY_INFORMATION, nil, nil, acl, nil); err != nil {
		t.Fatal(err)
	}
}

// A key file outpost creates is readable by the current user alone, and
// loads again.
func TestACLKeyFileIsCreatedPrivateToTheUser(t *testing.T) {
	path := filepath.Join(aclTempDir(t), "client.key")
	k, created, err := LoadOrCreate(path)
	if err != nil || !created {
		t.Fatalf("LoadOrCreate: created=%v, %v", created, err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if who, err := untrustedAccess(f, aclReadRights|aclWriteRights); err != nil || who != "" {
		t.Fatalf("a new key file: untrusted access by %q (%v)", who, err)
	}
	k2, err := Load(path)
	if err != nil || k2.Public != k.Public {
		t.Fatalf("Load of the new key file: %v", err)
	}
}

// A key file Everyone may read is refused as insecure, naming the
// trustee; read access through GENERIC_ALL or WRITE_DAC counts too. Write
// access alone to someone else does not make it readable, but a trust
// file they may write is refused.
func TestACLKeyFileReadableByOthersIsRefused(t *testing.T) {
	for _, mask := range []windows.ACCESS_MASK{windows.FILE_READ_DATA, windows.GENERIC_READ, windows.GENERIC_ALL, windows.WRITE_DAC} {
		path := filepath.Join(aclTempDir(t), "client.key")
		if _, _, err := LoadOrCreate(path); err != nil {
			t.Fatal(err)
		}
		grantEveryone(t, path, mask)
		if _, err := Load(path); !errors.Is(err, ErrInsecureKeyFile) {
			t.Errorf("mask %#x: Load = %v, want ErrInsecureKeyFile", mask, err)
		}
		if _, _, err := LoadOrCreate(path); !errors.Is(err, ErrInsecureKeyFile) {
			t.Errorf("mask %#x: LoadOrCreate = %v, want ErrInsecureKeyFile (and no new key)", mask, err)
		}
	}
}

// A key file with no DACL at all (which grants everyone everything) is
// refused.
func TestACLKeyFileWithoutADACLIsRefused(t *testing.T) {
	path := filepath.Join(aclTempDir(t), "client.key")
	if _, _, err := LoadOrCreate(path); err != nil {
		t.Fatal(err)
	}
	if err := windows.SetNamedSecurityInfo(path, windows.SE_FILE_OBJECT,
		windows.DACL_SECURITY_INFORMATION|windows.PROTECTED_DACL_SECURITY_INFORMATION, nil, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); !errors.Is(err, ErrInsecureKeyFile) {
		t.Fatalf("Load of a key file without a DACL = %v, want ErrInsecureKeyFile", err)
	}
}

// A known-executors file others may change is refused when read and when
// pinned to; one they may only read is accepted.
func TestACLTrustFileWritableByOthersIsRefused(t *testing.T) {
	path := filepath.Join(aclTempDir(t), "known_executors")
	known, err := OpenKnownExecutors(path)
	if err != nil {
		t.Fatal(err)
	}
	key, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	if err := known.Pin("exec-1", key.PublicKey()); err != nil {
		t.Fatal(err)
	}
	grantEveryone(t, path, windows.FILE_READ_DATA)
	if _, err := OpenKnownExecutors(path); err != nil {
		t.Fatalf("a known-executors file others may read: %v", err)
	}
	grantEveryone(t, path, windows.FILE_APPEND_DATA)
	if _, err := OpenKnownExecutors(path); err == nil {
		t.Fatal("a known-executors file others may append to was read")
	}
	if err := known.Pin("exec-2", key.PublicKey()); err == nil {
		t.Fatal("pinned into a known-executors file others may append to")
	}
}
