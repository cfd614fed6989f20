// Command outpost-sandbox is the sandbox helper as a binary of its own: an
// executor started with --sandbox-helper PATH runs every sandboxed command
// through it instead of re-executing itself, which saves the start-up of
// the whole outpost binary on each command. It is used only when it is of
// the executor's own build (see sandbox.UseHelper).
package main

import "github.com/outpost-exec/outpost/sandbox"

func main() { sandbox.DedicatedHelperMain() }
