package main

// raiseNofile: Windows has no per-process descriptor limit to raise; the
// handles a process may hold are bounded only by memory, so the wanted
// number is what it gets.
func raiseNofile(want uint64) uint64 { return want }

// syncDisks: Windows has no system-wide sync; the runs are then not
// compared from the same page-cache state (the benchmark's Linux numbers
// are the ones published).
func syncDisks() {}
