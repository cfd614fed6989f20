package executor

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// The shell environment/info names, detected as codex 0.171's own server
// detects it — the user's login shell from the password database, not
// $SHELL — because codex runs every command of the model's through that
// shell ("bash -lc …"): a differing answer would run them differently
// here than on codex's server.
//
// The login shell counts when it is one codex knows by its exact path
// (codex trusts no look-alike such as /tmp/bash); otherwise bash found
// on PATH, else /bin/sh. Only /etc/passwd is read: a static executor has
// no NSS, so a user known only to LDAP gets the fallback.

// knownShells are the login shells codex recognises, by exact path, and
// the names it gives them.
var knownShells = map[string]string{
	"/bin/zsh": "zsh", "/usr/bin/zsh": "zsh", "/usr/local/bin/zsh": "zsh", "/opt/homebrew/bin/zsh": "zsh",
	"/bin/bash": "bash", "/usr/bin/bash": "bash", "/usr/local/bin/bash": "bash", "/opt/homebrew/bin/bash": "bash",
	"/bin/sh": "sh", "/usr/bin/sh": "sh",
	"/bin/pwsh": "powershell", "/usr/bin/pwsh": "powershell", "/usr/local/bin/pwsh": "powershell", "/opt/homebrew/bin/pwsh": "powershell",
}

// detectShell returns the shell for uid, reading the password database
// at passwd and finding bash with lookPath.
func detectShell(passwd string, uid int, lookPath func(string) (string, error)) (name, path string) {
	if sh := loginShellOf(passwd, uid); sh != "" {
		if n, ok := knownShells[sh]; ok {
			if _, err := os.Stat(sh); err == nil {
				return n, sh
			}
		}
	}
	if p, err := lookPath("bash"); err == nil {
		return "bash", p
	}
	return "sh", "/bin/sh"
}

// loginShellOf is uid's login shell in a passwd(5) file, "" when it has
// none or the file cannot be read. Lines are bounded by bufio's default
// (64 KiB): a longer one ends the scan.
func loginShellOf(passwd string, uid int) string {
	f, err := os.Open(passwd)
	if err != nil {
		return ""
	}
	defer f.Close()
	want := strconv.Itoa(uid)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) == 7 && fields[2] == want {
			return fields[6]
		}
	}
	return ""
}

// executorShell is this process's shell, as environment/info reports it.
func executorShell() (name, path string) {
	return detectShell("/etc/passwd", os.Geteuid(), exec.LookPath)
}
