package pathmap

import (
	"errors"
	"fmt"
	"os"
)

// NativeDir resolves a client's directory — a file: URI or an absolute
// path, through translate (a Mapper's ToExecutor; nil: Native) — to an
// existing directory on this machine: a start request's cwd, or the cwd a
// sandbox policy is judged against. Empty means fallback.
func NativeDir(cwd, fallback string, translate func(string) (string, error)) (string, error) {
	if cwd == "" {
		return fallback, nil
	}
	if translate == nil {
		translate = Native
	}
	p, err := translate(cwd)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("cwd %q: %w", cwd, errors.Unwrap(err))
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("cwd %q: not a directory", cwd)
	}
	return p, nil
}
