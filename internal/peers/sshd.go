package peers

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
)

// SSHD is a throwaway sshd's set-up in a directory of its own: temporary
// host and client keys (dir/host, dir/client), the client's key
// authorised, and a config listening on addr:port only. The benchmarks
// compare outpost with it as a user would run commands remotely without
// outpost.
type SSHD struct {
	Bin    string // the sshd binary
	Config string // its config file
	User   string // who the client logs in as: the current user
}

// PrepareSSHD writes the keys and the config for an sshd on addr:port
// into dir. It does not start it.
func PrepareSSHD(dir, addr, port string) (SSHD, error) {
	bin, err := exec.LookPath("sshd")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/sshd"); err != nil {
			return SSHD{}, fmt.Errorf("sshd not found (apt-get install openssh-server)")
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return SSHD{}, err
	}
	for _, k := range []string{"host", "client"} {
		os.Remove(filepath.Join(dir, k)) // ssh-keygen asks before overwriting
		os.Remove(filepath.Join(dir, k+".pub"))
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(dir, k)).CombinedOutput(); err != nil {
			return SSHD{}, fmt.Errorf("ssh-keygen: %v: %s", err, out)
		}
	}
	pub, err := os.ReadFile(filepath.Join(dir, "client.pub"))
	if err != nil {
		return SSHD{}, err
	}
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), pub, 0o600); err != nil {
		return SSHD{}, err
	}
	u, err := user.Current()
	if err != nil {
		return SSHD{}, err
	}
	cfg := strings.Join([]string{
		"Port " + port,
		"ListenAddress " + addr,
		"HostKey " + filepath.Join(dir, "host"),
		"AuthorizedKeysFile " + filepath.Join(dir, "authorized_keys"),
		"PidFile " + filepath.Join(dir, "sshd.pid"),
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"PermitRootLogin prohibit-password",
		"StrictModes no",
		"UsePAM no",
		"UseDNS no",
		"MaxSessions 100",
		"MaxStartups 100",
		"LogLevel ERROR",
		"Subsystem sftp internal-sftp", // scp speaks SFTP since OpenSSH 9
	}, "\n") + "\n"
	config := filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		return SSHD{}, err
	}
	os.MkdirAll("/run/sshd", 0o755) // privilege separation directory
	return SSHD{Bin: bin, Config: config, User: u.Username}, nil
}
