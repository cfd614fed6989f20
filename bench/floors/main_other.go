//go:build !linux

// Command floors measures the cost of the parts of a sandboxed start
// (main_linux.go). Those parts (user, mount and PID namespaces) exist only
// on Linux, so elsewhere it says so and exits.
package main

import (
	"fmt"
	"os"
	"runtime"
)

func main() {
	fmt.Fprintf(os.Stderr, "floors: measures Linux namespaces and sandbox set-up; this is %s\n", runtime.GOOS)
	os.Exit(2)
}
