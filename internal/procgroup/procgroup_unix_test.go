//go:build unix

package procgroup

import (
	"context"
	"os/exec"
	"syscall"
	"testing"
)

// Kill reaches the whole group: a second member (joined to the leader's
// group here, so that this test reaps both and needs no polling) dies with
// the leader, which a kill of the leader's pid alone would not do.
func TestKillEndsTheLeaderAndItsGroup(t *testing.T) {
	leader := exec.Command("sleep", "300")
	Own(leader)
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	member := exec.Command("sleep", "300")
	member.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: leader.Process.Pid}
	if err := member.Start(); err != nil {
		leader.Process.Kill()
		leader.Wait()
		t.Fatal(err)
	}
	if !Alive(leader.Process.Pid) || !Alive(member.Process.Pid) {
		t.Fatal("leader or member not alive after start")
	}
	if err := Kill(leader.Process.Pid); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*exec.Cmd{leader, member} {
		err := c.Wait()
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("pid %d: wait %v, want the kill's exit error", c.Process.Pid, err)
		}
		if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("pid %d ended with %v, want SIGKILL", c.Process.Pid, ee)
		}
	}
	if Alive(leader.Process.Pid) {
		t.Fatal("Alive after the leader was reaped")
	}
}

// KillOnCancel kills the group when the command's context ends.
func TestKillOnCancelKillsWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "sleep", "300")
	KillOnCancel(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cancel()
	err := cmd.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok {
		t.Fatalf("wait: %v, want the kill's exit error", err)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("ended with %v, want SIGKILL", ee)
	}
}
