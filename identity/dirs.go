package identity

import (
	"os"
	"path/filepath"
)

// SystemStateDir is the state directory of a party running as root.
const SystemStateDir = "/var/lib/outpost"

// DefaultStateDir is where a party keeps its own key and state:
// /var/lib/outpost when running as root (effective uid 0), otherwise
// $XDG_STATE_HOME/outpost, or ~/.local/state/outpost when XDG_STATE_HOME
// is unset or not absolute. It returns "" if no home directory can be
// determined; callers should then require an explicit path.
func DefaultStateDir() string {
	if os.Geteuid() == 0 {
		return SystemStateDir
	}
	return xdgDir("XDG_STATE_HOME", ".local", "state")
}

// DefaultConfigDir is where a client keeps its key and known executors:
// $XDG_CONFIG_HOME/outpost, or ~/.config/outpost when XDG_CONFIG_HOME is
// unset or not absolute. It returns "" if no home directory can be
// determined.
func DefaultConfigDir() string {
	return xdgDir("XDG_CONFIG_HOME", ".config")
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
