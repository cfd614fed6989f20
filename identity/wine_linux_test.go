package identity

import (
	"os"
	"strings"
	"testing"

	"github.com/outpost-exec/outpost/internal/wine"
)

// TestMain removes the Wine prefix TestWindowsUnderWine made.
func TestMain(m *testing.M) {
	code := m.Run()
	wine.Cleanup()
	os.Exit(code)
}

// TestWindowsUnderWine runs this package's windows/amd64 ACL tests
// (acl_windows_test.go) under Wine, against Wine's security descriptors.
// Wine derives a file's descriptor from its Unix mode until one is set
// (a 0644 file grants Everyone read), so a key file written by anything
// but outpost looks as readable there as it is. The rest of the package's
// tests do not run there: t.TempDir's clean-up fails under Wine 8 (see
// aclTempDir).
func TestWindowsUnderWine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Windows test binary and a Wine prefix")
	}
	p := wine.Shared(t)
	exe := wine.BuildTest(t, t.TempDir(), "github.com/outpost-exec/outpost/identity")
	cmd := p.Command(exe, "-test.v", "-test.count=1", "-test.run", "^TestACL")
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the Windows tests under Wine: %v\n%s", err, out)
	}
	for _, name := range []string{"TestACLKeyFileIsCreatedPrivateToTheUser", "TestACLKeyFileReadableByOthersIsRefused", "TestACLKeyFileWithoutADACLIsRefused", "TestACLTrustFileWritableByOthersIsRefused"} {
		if !strings.Contains(string(out), "--- PASS: "+name) {
			t.Errorf("%s did not pass under Wine:\n%s", name, out)
		}
	}
}
