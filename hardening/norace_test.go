//go:build !race

package hardening

const memoryScale = 1
