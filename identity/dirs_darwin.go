package identity

import "os"

// macOS keeps per-user application data, keys included, in
// ~/Library/Application Support (os.UserConfigDir); there is no separate
// place for state.
var (
	nativeConfigDir = os.UserConfigDir
	nativeStateDir  = os.UserConfigDir
)
