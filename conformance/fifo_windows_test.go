package conformance

import "testing"

// mkfifo: Windows has no FIFOs, so the tests that list one skip.
func mkfifo(t *testing.T, path string) {
	t.Helper()
	t.Skip("no FIFOs on windows")
}
