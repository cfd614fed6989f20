package executor

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestDetectShellFollowsCodexsRules(t *testing.T) {
	passwd := filepath.Join(t.TempDir(), "passwd")
	os.WriteFile(passwd, []byte("root:x:0:0:root:/root:/bin/bash\n"+
		"sh:x:1000:1000::/home/sh:/bin/sh\n"+
		"nologin:x:1001:1001::/nonexistent:/usr/sbin/nologin\n"+
		"lookalike:x:1002:1002::/h:/tmp/bash\n"+
		"broken:x:1003\n"), 0o644)
	bash := func(string) (string, error) { return "/usr/bin/bash", nil }
	none := func(string) (string, error) { return "", errors.New("not found") }
	for _, c := range []struct {
		uid        int
		look       func(string) (string, error)
		name, path string
	}{
		{0, bash, "bash", "/bin/bash"},
		{1000, bash, "sh", "/bin/sh"},
		{1001, bash, "bash", "/usr/bin/bash"}, // not a shell: bash on PATH
		{1002, bash, "bash", "/usr/bin/bash"}, // a look-alike path is not trusted
		{1003, none, "sh", "/bin/sh"},         // a short line: no entry
		{4242, none, "sh", "/bin/sh"},         // unknown user, no bash
	} {
		n, p := detectShell(passwd, c.uid, c.look)
		if n != c.name || p != c.path {
			t.Errorf("uid %d: %s %s, want %s %s", c.uid, n, p, c.name, c.path)
		}
	}
	if n, p := detectShell(filepath.Join(t.TempDir(), "missing"), 0, none); n != "sh" || p != "/bin/sh" {
		t.Errorf("no passwd file: %s %s", n, p)
	}
}
