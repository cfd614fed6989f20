//go:build !linux

package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
)

// IsHelper reports whether this process was started as the helper.
func IsHelper() bool { return filepath.Base(os.Args[0]) == HelperName }

// HelperMain refuses: sandboxing needs Linux.
func HelperMain() {
	fmt.Fprintln(os.Stderr, "outpost-sandbox: sandboxing needs Linux")
	os.Exit(126)
}

func canUnshareMount() bool { return false }
