//go:build race

package hardening

// The race detector multiplies memory use; bounds are scaled by this.
const memoryScale = 4
