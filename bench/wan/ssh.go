package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/outpost-exec/outpost/bench/wan/netem"
	"github.com/outpost-exec/outpost/internal/peers"
)

// sshPeer is a throwaway sshd in the executor's namespace with temporary
// host and client keys (as bench/ssh.go does on loopback), and optionally
// a ControlMaster connection to it from the client's namespace.
type sshPeer struct {
	dir, addr, user string
	sshd, master    *proc
}

func startSSH(ctx context.Context, ns *netem.NS, dir, addr string) (*sshPeer, error) {
	sd, err := peers.PrepareSSHD(dir, addr, "22")
	if err != nil {
		return nil, err
	}
	s := &sshPeer{dir: dir, addr: addr, user: sd.User}
	if s.sshd, _, err = startProc(ctx, ns, "sshd", nil, false, sd.Bin, "-D", "-e", "-f", sd.Config); err != nil {
		return nil, err
	}
	return s, nil
}

// opts are every ssh and scp's options: this peer's key, no host key
// checks, no config files, aes128-gcm (as bench/ssh.go).
func (s *sshPeer) opts() []string {
	return []string{"-F", "/dev/null", "-i", filepath.Join(s.dir, "client"),
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
		"-o", "ConnectTimeout=20", "-c", "aes128-gcm@openssh.com"}
}

// argv is ssh running remote; with master over the ControlMaster
// connection (which must be up: it never makes one of its own).
func (s *sshPeer) argv(master bool, remote ...string) []string {
	args := append([]string{"ssh"}, s.opts()...)
	if master {
		args = append(args, "-o", "ControlMaster=no", "-o", "ControlPath="+filepath.Join(s.dir, "cm"))
	}
	return append(append(args, s.user+"@"+s.addr, "--"), remote...)
}

// scpArgv copies with scp; remote paths are prefixed with ":".
func (s *sshPeer) scpArgv(src, dst string) []string {
	fix := func(p string) string {
		if r, ok := strings.CutPrefix(p, ":"); ok {
			return s.user + "@" + s.addr + ":" + r
		}
		return p
	}
	return append(append([]string{"scp", "-q"}, s.opts()...), fix(src), fix(dst))
}

// startMaster opens the ControlMaster connection from ns as a process we
// own (not ControlPersist's daemon, which would leave our process group)
// and waits until it serves.
func (s *sshPeer) startMaster(ctx context.Context, ns *netem.NS) error {
	// sshd listens a moment after it starts.
	for deadline := time.Now().Add(20 * time.Second); ; {
		var c net.Conn
		err := ns.Do(func() (err error) {
			c, err = net.DialTimeout("tcp", net.JoinHostPort(s.addr, "22"), 5*time.Second)
			return
		})
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sshd on %s:22 not accepting: %v; stderr: %s", s.addr, err, s.sshd.stderr)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	argv := append(append([]string{"ssh"}, s.opts()...), "-M", "-N", "-o", "ControlPath="+filepath.Join(s.dir, "cm"), s.user+"@"+s.addr)
	var err error
	if s.master, _, err = startProc(ctx, ns, "ssh-master", nil, false, argv...); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		check := exec.CommandContext(ctx, "ssh", "-F", "/dev/null", "-o", "ControlPath="+filepath.Join(s.dir, "cm"), "-O", "check", "x")
		if check.Run() == nil {
			return nil
		}
		select {
		case <-s.master.done:
			return fmt.Errorf("ssh ControlMaster exited: %s", s.master.stderr)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ssh ControlMaster not up after 30 s: %s", s.master.stderr)
		}
	}
}

func (s *sshPeer) stop() {
	if s == nil {
		return
	}
	s.master.stop()
	s.sshd.stop()
}
