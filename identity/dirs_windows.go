package identity

import "os"

// Windows: a client's key and pins roam with the profile (%AppData%,
// os.UserConfigDir); a party's own key and state stay on this machine
// (%LocalAppData%, which os.UserCacheDir returns on Windows).
var (
	nativeConfigDir = os.UserConfigDir
	nativeStateDir  = os.UserCacheDir
)
