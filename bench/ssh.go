package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// sshPeer is a throwaway sshd on loopback with temporary host and client
// keys, the way a user would run commands remotely without outpost.
type sshPeer struct {
	dir, port, user string
	sshd            *exec.Cmd
}

func startSSH(dir string) (*sshPeer, error) {
	sshdBin, err := exec.LookPath("sshd")
	if err != nil {
		if sshdBin, err = exec.LookPath("/usr/sbin/sshd"); err != nil {
			return nil, fmt.Errorf("sshd not found (apt-get install openssh-server)")
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	for _, k := range []string{"host", "client"} {
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(dir, k)).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("ssh-keygen: %v: %s", err, out)
		}
	}
	pub, err := os.ReadFile(filepath.Join(dir, "client.pub"))
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), pub, 0o600); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	u, err := user.Current()
	if err != nil {
		return nil, err
	}
	cfg := strings.Join([]string{
		"Port " + port,
		"ListenAddress 127.0.0.1",
		"HostKey " + filepath.Join(dir, "host"),
		"AuthorizedKeysFile " + filepath.Join(dir, "authorized_keys"),
		"PidFile " + filepath.Join(dir, "sshd.pid"),
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"PermitRootLogin prohibit-password",
		"StrictModes no",
		"UsePAM no",
		"MaxSessions 100",
		"MaxStartups 100",
		"LogLevel ERROR",
		"Subsystem sftp internal-sftp", // scp speaks SFTP since OpenSSH 9
	}, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "sshd_config"), []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	os.MkdirAll("/run/sshd", 0o755) // privilege separation directory
	cmd := exec.Command(sshdBin, "-D", "-e", "-f", filepath.Join(dir, "sshd_config"))
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &sshPeer{dir: dir, port: port, user: u.Username, sshd: cmd}
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
