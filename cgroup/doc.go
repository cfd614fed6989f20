// Package cgroup gives every command the executor starts a cgroup v2 of
// its own.
//
// A process group does not hold a command's tree together: any descendant
// can call setsid(2) and leave it, and a kill of the group then misses it.
// Cgroup membership is inherited at fork and cannot be left without write
// access to the cgroup tree, so killing a command's cgroup reaches every
// process the command started. Where the memory and pids controllers can
// be delegated to us, the command's cgroup also carries memory.max and
// pids.max.
//
// # Layout
//
// M is where cgroup2 is mounted, X the executor's own cgroup (from
// /proc/self/cgroup), <pid> the executor's process id:
//
//	M/X/outpost-<pid>/          the executor's cgroup for commands
//	M/X/outpost-<pid>/cmd-<n>/  one per command, with its limits
//	M/X/outpost-<pid>-self/     the executor itself, only if it had to move
//	M/X/outpost-<pid>.<k>/      the k-th Manager of one process (tests)
//
// Limits need the controllers enabled in M/X/cgroup.subtree_control. The
// kernel refuses that (EBUSY) while M/X holds processes, unless M/X is
// the root of the hierarchy; the executor then moves itself into
// outpost-<pid>-self, as systemd expects of a unit with Delegate=yes. If
// other processes share M/X, limits cannot be had; commands still get a
// cgroup each, for the kill.
//
// A command is born in its cgroup (clone3 with CLONE_INTO_CGROUP, Linux
// 5.7), so neither it nor anything it forks ever runs outside. The whole
// cgroup is killed with cgroup.kill (Linux 5.14), or by killing its
// members until it is empty on older kernels.
//
// # Bounds
//
// A finished command whose background processes still run keeps its
// cgroup until they end (one sweeper goroutine per Manager removes it
// within Config.SweepEvery of that); at most Config.MaxLingering such
// cgroups are kept, and past that the oldest is killed. Manager.Close kills them all,
// so nothing a command started outlives the executor. Directories left by
// an executor that died (its pid gone) are killed and removed by the next
// Open in the same cgroup.
package cgroup
