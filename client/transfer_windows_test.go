package client

import "testing"

// Names that pass the executor-side listing checks but would leave the
// destination, or reach a device or stream, on Windows.
func TestWindowsLocalNameRefusesWhatWindowsSplitsOrReserves(t *testing.T) {
	for _, n := range []string{`..\evil`, `a\b`, `C:`, `x:stream`, `NUL`, `con`, `..`, ``} {
		if windowsLocalName(n) {
			t.Errorf("%q accepted", n)
		}
	}
	for _, n := range []string{`a`, `.hidden`, `file.txt`, `dir name`} {
		if !windowsLocalName(n) {
			t.Errorf("%q refused", n)
		}
	}
}
