package executor

import (
	"net/url"
	"os"
	"sort"
	"strings"
	"testing"
)

// codex 0.171 reads the environment from initialize's answer, and refuses
// all of it if one path is not a file: URI (then it falls back to its own
// login shell). Every path is a URI; every capability flag is sent; the
// flags of what outpost lacks are false.
func TestInitializeCarriesEnvironmentInfoWithURIs(t *testing.T) {
	ts := newTestServer(t, nil, WSConfig{})
	r := dialRaw(t, ts.url, nil)
	res := r.result("initialize", map[string]any{"clientName": "codex"})
	info, ok := res["environmentInfo"].(map[string]any)
	if !ok {
		t.Fatalf("initialize answered %v", res)
	}
	for _, k := range []string{"cwd", "userHomeDir", "tempDir"} {
		u, err := url.Parse(info[k].(string))
		if err != nil || u.Scheme != "file" || !strings.HasPrefix(u.Path, "/") {
			t.Errorf("%s = %v, not a file: URI", k, info[k])
		}
	}
	if tmp, _ := url.Parse(info["tempDir"].(string)); tmp.Path != os.TempDir() {
		t.Errorf("tempDir %v, want %s", info["tempDir"], os.TempDir())
	}
	for _, k := range []string{"prependPathDirs", "temporaryDirectories"} {
		if _, ok := info[k].([]any); !ok {
			t.Errorf("%s = %v, want a list", k, info[k])
		}
	}
	if info["platformOs"] != "linux" || info["executorVersion"] == "" || info["providerId"] == "" {
		t.Errorf("info %v", info)
	}
	caps, _ := info["capabilities"].(map[string]any)
	var names []string
	for k := range caps {
		names = append(names, k)
	}
	sort.Strings(names)
	// codex 0.171's sixteen flags (its own server sends each).
	want := []string{"capabilityDiscoverySandbox", "capabilityDiscoveryV2", "credentialMasking", "credentialMaskingCustomProviders",
		"environmentConfigRead", "fileWriteStreaming", "fsWatchMissing", "httpHeaderEnvVars", "linuxApprovedRootWritePreservesRestrictions",
		"linuxRootWritePreservesDevices", "networkProxyLaunch", "networkProxyReviewDomains", "networkProxyTransparentTcp",
		"sandboxedFileStreaming", "shellSnapshotV2", "windowsMxc"}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Errorf("capabilities %v\nwant %v", names, want)
	}
	// Not implemented here: never advertised.
	for _, k := range []string{"networkProxyLaunch", "networkProxyReviewDomains", "networkProxyTransparentTcp", "credentialMasking", "shellSnapshotV2", "windowsMxc"} {
		if caps[k] != false {
			t.Errorf("%s = %v, but outpost does not implement it", k, caps[k])
		}
	}
	r.send(map[string]any{"method": "initialized"})
	again := r.result("environment/info", nil)
	if again["cwd"] != info["cwd"] || again["shell"] == nil {
		t.Errorf("environment/info %v differs from initialize's %v", again, info)
	}
}
