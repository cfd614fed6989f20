package main

import (
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/outpost-exec/outpost/internal/peers"
)

// sshPeer is a throwaway sshd on loopback with temporary host and client
// keys, the way a user would run commands remotely without outpost.
type sshPeer struct {
	dir, port, user string
	sshd            *exec.Cmd
}

func startSSH(dir string) (*sshPeer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	sd, err := peers.PrepareSSHD(dir, "127.0.0.1", port)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(sd.Bin, "-D", "-e", "-f", sd.Config)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &sshPeer{dir: dir, port: port, user: sd.User, sshd: cmd}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err := s.command(false, "true").Run(); err == nil {
			return s, nil
		} else if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("sshd on 127.0.0.1:%s did not accept the client key: %v", port, err)
		}
	}
}

// command is ssh running remote on the peer; with master it shares one
// ControlMaster connection.
func (s *sshPeer) command(master bool, remote ...string) *exec.Cmd {
	args := []string{"-F", "/dev/null", "-i", filepath.Join(s.dir, "client"), "-p", s.port,
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
		"-c", "aes128-gcm@openssh.com"}
	if master {
		args = append(args, "-o", "ControlMaster=auto", "-o", "ControlPath="+filepath.Join(s.dir, "cm"), "-o", "ControlPersist=120")
	}
	args = append(args, s.user+"@127.0.0.1", "--")
	return exec.Command("ssh", append(args, remote...)...)
}

// scp copies a local file to path on the peer (aes128-gcm, like ssh).
func (s *sshPeer) scp(local, remote string) *exec.Cmd {
	return exec.Command("scp", "-q", "-F", "/dev/null", "-i", filepath.Join(s.dir, "client"), "-P", s.port,
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
		"-c", "aes128-gcm@openssh.com", local, s.user+"@127.0.0.1:"+remote)
}

// scpFrom copies remote (on the server) to local.
func (s *sshPeer) scpFrom(remote, local string) *exec.Cmd {
	return exec.Command("scp", "-q", "-F", "/dev/null", "-i", filepath.Join(s.dir, "client"), "-P", s.port,
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
		"-c", "aes128-gcm@openssh.com", s.user+"@127.0.0.1:"+remote, local)
}

func (s *sshPeer) stop() {
	exec.Command("ssh", "-F", "/dev/null", "-o", "ControlPath="+filepath.Join(s.dir, "cm"), "-O", "exit", "x").Run()
	s.sshd.Process.Kill()
	s.sshd.Wait()
}
