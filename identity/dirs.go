package identity

import (
	"os"
	"path/filepath"
)

// SystemStateDir is the state directory of a party running as root.
const SystemStateDir = "/var/lib/outpost"

// DefaultStateDir is where a party keeps its own key and state:
// /var/lib/outpost when running as root (effective uid 0), otherwise
// $XDG_STATE_HOME/outpost, or, when XDG_STATE_HOME is unset or not
// absolute, the platform's place (dirs_*.go): ~/.local/state/outpost on
// Linux and the BSDs, ~/Library/Application Support/outpost on macOS,
// %LocalAppData%\outpost on Windows. It returns "" if no home directory
// can be determined; callers should then require an explicit path.
func DefaultStateDir() string {
	if os.Geteuid() == 0 {
		return SystemStateDir
	}
	return userDir("XDG_STATE_HOME", nativeStateDir, ".local", "state")
}

// DefaultConfigDir is where a client keeps its key and known executors:
// $XDG_CONFIG_HOME/outpost, or, when XDG_CONFIG_HOME is unset or not
// absolute, ~/.config/outpost on Linux and the BSDs, and the user
// configuration directory (os.UserConfigDir) on macOS
// (~/Library/Application Support/outpost) and Windows
// (%AppData%\outpost). It returns "" if no home directory can be
// determined.
func DefaultConfigDir() string {
	return userDir("XDG_CONFIG_HOME", nativeConfigDir, ".config")
}

// userDir is $env/outpost when env holds an absolute path (on every
// platform, so that tests and wrappers can point outpost elsewhere), else
// native()/outpost where the platform has its own convention (native
// non-nil), else xdgDir's home fallback.
func userDir(env string, native func() (string, error), fallback ...string) string {
	if d := os.Getenv(env); native != nil && (d == "" || !filepath.IsAbs(d)) {
		if base, err := native(); err == nil && base != "" {
			return filepath.Join(base, "outpost")
		}
		return ""
	}
	return xdgDir(env, fallback...)
}

// xdgDir returns $env/outpost if env holds an absolute path (the XDG spec
// says relative ones are to be ignored), else ~/<fallback...>/outpost.
func xdgDir(env string, fallback ...string) string {
	if d := os.Getenv(env); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "outpost")
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ""
	}
	return filepath.Join(append(append([]string{home}, fallback...), "outpost")...)
}
