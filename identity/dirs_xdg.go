//go:build !darwin && !windows

package identity

// Linux and the BSDs follow the XDG base directory spec: xdgDir's
// fallbacks under the home directory.
var (
	nativeConfigDir func() (string, error)
	nativeStateDir  func() (string, error)
)
