package executor

// Installed plugins for capabilities/discoverV2, as codex 0.171 finds
// them: $CODEX_HOME/plugins/cache/<marketplace>/<name>/<version>/, one
// active version per package ("local" when present, else the highest,
// semver-aware), its manifest the first of .codex-plugin/plugin.json,
// .claude-plugin/plugin.json and .cursor-plugin/plugin.json. The plugin's
// MCP configuration is the file its manifest's mcpServers names ("./…"),
// the manifest itself when mcpServers is inline, else .mcp.json; its apps
// configuration the file apps names, else .app.json. Its skills are found
// as a standalone root's are, named "<namespace>:<name>" after the
// nearest plugin manifest above them. A package without a readable JSON
// manifest is left out with a warning.
//
// Bounds: at most maxPluginLocations packages; the cache is listed within
// maxSkillDirs directories and maxSkillEntries entries; a remote install
// record is at most maxRemoteInstallBytes.

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/outpost-exec/outpost/pathmap"
	"github.com/outpost-exec/outpost/protocol"
)

const (
	maxPluginLocations    = 512
	maxRemoteInstallBytes = 16 << 10
	maxRemotePluginID     = 1024
	remoteInstallFile     = ".codex-remote-plugin-install.json"
)

// manifestDirs are the plugin manifest directories, highest priority first.
var manifestDirs = []string{".codex-plugin", ".claude-plugin", ".cursor-plugin"}

func manifestPriority(dir string) int { return slices.Index(manifestDirs, filepath.Base(dir)) }

// installedPlugin is one package's active version.
type installedPlugin struct {
	id, version, root string
	remoteID          *string
}

// installedPlugins lists the cache's packages, by id; locWarn says a
// package's install record could not be read.
func (e codexEnv) installedPlugins() (out []installedPlugin, locWarn bool) {
	cache := filepath.Join(e.codexHome, "plugins", "cache")
	if ok, _ := statDir(cache); !ok {
		return nil, false
	}
	type pkg struct{ key, dir string }
	var pkgs []pkg
	entries := 0
	list := func(dir string) []string {
		ents, err := readDirBounded(dir, maxSkillEntries-entries)
		entries += len(ents)
		if err != nil {
			locWarn = true
		}
		var dirs []string
		for _, ent := range ents {
			p := filepath.Join(dir, ent.Name())
			if ok, _ := statDir(p); ok {
				dirs = append(dirs, ent.Name())
			}
		}
		return dirs
	}
	dirs := 1
	for _, market := range list(cache) {
		if dirs++; dirs > maxSkillDirs {
			locWarn = true
			break
		}
		for _, name := range list(filepath.Join(cache, market)) {
			if validSegment(market, false) && validSegment(name, true) {
				pkgs = append(pkgs, pkg{name + "@" + market, filepath.Join(cache, market, name)})
			}
		}
	}
	slices.SortFunc(pkgs, func(a, b pkg) int { return strings.Compare(a.key, b.key) })
	for _, p := range pkgs {
		version := activeVersion(p.dir)
		if version == "" {
			continue
		}
		if len(out) == maxPluginLocations {
			locWarn = true
			break
		}
		rid, err := e.remotePluginID(filepath.Join(p.dir, remoteInstallFile))
		if err != nil {
			locWarn = true
		}
		out = append(out, installedPlugin{id: p.key, version: version, root: filepath.Join(p.dir, version), remoteID: rid})
	}
	return out, locWarn
}

// readDirBounded lists at most n entries of dir.
func readDirBounded(dir string, n int) ([]os.DirEntry, error) {
	if n <= 0 {
		return nil, errors.New("too many entries")
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ents, err := f.ReadDir(n)
	if errors.Is(err, io.EOF) {
		err = nil // an empty directory
	}
	if len(ents) == n {
		if more, _ := f.ReadDir(1); len(more) > 0 {
			err = errors.New("too many entries")
		}
	}
	return ents, err
}

// validSegment checks a marketplace or plugin name as codex does: ASCII
// letters, digits, '_' and '-', and for a plugin name dots between
// non-empty parts.
func validSegment(s string, dots bool) bool {
	if s == "" {
		return false
	}
	if dots && (strings.HasPrefix(s, ".") || strings.HasSuffix(s, ".") || strings.Contains(s, "..")) {
		return false
	}
	for _, c := range s {
		if !(c < 0x80 && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || dots && c == '.')) {
			return false
		}
	}
	return true
}

// activeVersion is "local" when installed, else the highest version
// directory; "" when there is none.
func activeVersion(pkgDir string) string {
	ents, _ := readDirBounded(pkgDir, maxSkillEntries)
	var versions []string
	for _, ent := range ents {
		v := ent.Name()
		if ent.IsDir() && validVersion(v) {
			versions = append(versions, v)
		}
	}
	if slices.Contains(versions, "local") {
		return "local"
	}
	if len(versions) == 0 {
		return ""
	}
	slices.SortFunc(versions, compareVersions)
	return versions[len(versions)-1]
}

func validVersion(v string) bool {
	if v == "" || v == "." || v == ".." {
		return false
	}
	for _, c := range v {
		if !(c < 0x80 && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_.+", c))) {
			return false
		}
	}
	return true
}

// compareVersions orders by semver when both parse, else as text.
func compareVersions(a, b string) int {
	sa, okA := parseSemver(a)
	sb, okB := parseSemver(b)
	if !okA || !okB {
		return strings.Compare(a, b)
	}
	for i := range 3 {
		if sa.num[i] != sb.num[i] {
			if sa.num[i] < sb.num[i] {
				return -1
			}
			return 1
		}
	}
	// A pre-release sorts before its release; identifiers compare as
	// numbers when numeric, numbers before text.
	switch {
	case len(sa.pre) == 0 && len(sb.pre) == 0:
		return strings.Compare(sa.build, sb.build)
	case len(sa.pre) == 0:
		return 1
	case len(sb.pre) == 0:
		return -1
	}
	for i := 0; i < len(sa.pre) && i < len(sb.pre); i++ {
		x, y := sa.pre[i], sb.pre[i]
		nx, ex := strconv.ParseUint(x, 10, 64)
		ny, ey := strconv.ParseUint(y, 10, 64)
		switch {
		case ex == nil && ey == nil && nx != ny:
			if nx < ny {
				return -1
			}
			return 1
		case ex == nil && ey != nil:
			return -1
		case ex != nil && ey == nil:
			return 1
		case ex != nil && ey != nil && x != y:
			return strings.Compare(x, y)
		}
	}
	if c := len(sa.pre) - len(sb.pre); c != 0 {
		return c
	}
	return strings.Compare(sa.build, sb.build)
}

type semver struct {
	num   [3]uint64
	pre   []string
	build string
}

func parseSemver(s string) (semver, bool) {
	var v semver
	if i := strings.IndexByte(s, '+'); i >= 0 {
		s, v.build = s[:i], s[i+1:]
		if v.build == "" {
			return v, false
		}
	}
	if i := strings.IndexByte(s, '-'); i >= 0 {
		pre := s[i+1:]
		s = s[:i]
		if pre == "" {
			return v, false
		}
		v.pre = strings.Split(pre, ".")
		for _, id := range v.pre {
			if id == "" || len(id) > 1 && id[0] == '0' && strings.Trim(id, "0123456789") == "" {
				return v, false
			}
		}
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return v, false
	}
	for i, p := range parts {
		if p == "" || len(p) > 1 && p[0] == '0' {
			return v, false
		}
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return v, false
		}
		v.num[i] = n
	}
	return v, true
}

// remotePluginID reads a package's remote install record; absent is nil.
func (e codexEnv) remotePluginID(path string) (*string, error) {
	data, err := readBoundedFile(path, maxRemoteInstallBytes, e.hidden)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errHiddenPath) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rec struct {
		SchemaVersion  *int    `json:"schema_version"`
		RemotePluginID *string `json:"remote_plugin_id"`
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, err
	}
	if rec.SchemaVersion == nil || *rec.SchemaVersion != 1 || rec.RemotePluginID == nil || *rec.RemotePluginID == "" || len(*rec.RemotePluginID) > maxRemotePluginID {
		return nil, errors.New("invalid remote installation metadata")
	}
	return rec.RemotePluginID, nil
}

// readTextFile reads an optional UTF-8 file within a budget; absent is
// (nil, nil).
func (e codexEnv) readTextFile(path string, budget *int64) (*protocol.CapabilityTextFile, error) {
	data, err := e.fsys().readFile(path, min(maxSkillFileBytes, *budget))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errHiddenPath) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	*budget -= int64(len(data))
	if !utf8.Valid(data) {
		return nil, errors.New("not UTF-8")
	}
	return &protocol.CapabilityTextFile{Path: e.uri(path), Contents: string(data)}, nil
}

// firstManifest is the first readable manifest of the plugin root dir.
func (e codexEnv) firstManifest(dir string, budget *int64, incomplete *bool) (*protocol.CapabilityTextFile, string) {
	for _, md := range manifestDirs {
		p := filepath.Join(dir, md, "plugin.json")
		f, err := e.readTextFile(p, budget)
		if err != nil {
			*incomplete = true
			continue
		}
		if f != nil {
			return f, p
		}
	}
	return nil, ""
}

type pluginManifest struct {
	Name      *string         `json:"name"`
	Interface json.RawMessage `json:"interface"`
	MCP       json.RawMessage `json:"mcpServers"`
	Apps      json.RawMessage `json:"apps"`
}

// manifestName is a manifest's name, or its plugin directory's.
func manifestName(contents, root string) (string, bool) {
	var m pluginManifest
	if err := json.Unmarshal([]byte(contents), &m); err != nil {
		return "", false
	}
	if m.Name != nil && strings.TrimSpace(*m.Name) != "" {
		return *m.Name, true
	}
	return filepath.Base(root), true
}

// pluginNamespaces maps plugin root directories to their names: the
// root's own manifest (or its nearest ancestor's), then each manifest
// the walk found, the first per directory by priority.
func (e codexEnv) pluginNamespaces(root string, found []string, budget *int64, incomplete *bool) map[string]string {
	out := map[string]string{}
	seen := map[string]bool{}
	for d := root; ; d = filepath.Dir(d) {
		if f, _ := e.firstManifest(d, budget, incomplete); f != nil {
			seen[d] = true
			if name, ok := manifestName(f.Contents, d); ok {
				out[d] = name
			}
			break
		}
		if d == "/" {
			break
		}
	}
	slices.SortFunc(found, func(a, b string) int {
		ra, rb := filepath.Dir(filepath.Dir(a)), filepath.Dir(filepath.Dir(b))
		if c := strings.Compare(pathmap.URI(ra), pathmap.URI(rb)); c != 0 {
			return c
		}
		return manifestPriority(filepath.Dir(a)) - manifestPriority(filepath.Dir(b))
	})
	for _, m := range found {
		r := filepath.Dir(filepath.Dir(m))
		if seen[r] {
			continue
		}
		seen[r] = true
		f, err := e.readTextFile(m, budget)
		if err != nil {
			*incomplete = true
			continue
		}
		if f == nil {
			continue
		}
		if name, ok := manifestName(f.Contents, r); ok {
			out[r] = name
		}
	}
	return out
}

// declaredPath resolves a manifest's "./relative" file; ok false when
// the declaration is not such a path.
func declaredPath(root string, raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	rel, ok := strings.CutPrefix(s, "./")
	if !ok || rel == "" {
		return "", false
	}
	for _, part := range strings.FieldsFunc(rel, func(r rune) bool { return r == '/' || r == '\\' }) {
		if part == ".." {
			return "", false
		}
	}
	return filepath.Join(root, rel), true
}

// loadPlugin reads one installed plugin; nil when it has no readable
// manifest. incomplete says something could not be read or parsed.
func (e codexEnv) loadPlugin(pl installedPlugin) (*protocol.ExecutorPlugin, bool) {
	budget := int64(maxSkillRootBytes)
	incomplete := false
	if ok, err := e.fsys().isDir(pl.root); !ok {
		return nil, err == nil || e.rootVisible(pl.root)
	}
	manifest, _ := e.firstManifest(pl.root, &budget, &incomplete)
	if manifest == nil {
		return nil, true
	}
	var m pluginManifest
	if err := json.Unmarshal([]byte(manifest.Contents), &m); err != nil {
		return nil, true
	}
	name := filepath.Base(pl.root)
	if m.Name != nil && strings.TrimSpace(*m.Name) != "" {
		name = *m.Name
	}
	display := name
	var iface struct {
		DisplayName *string `json:"displayName"`
	}
	if json.Unmarshal(m.Interface, &iface) == nil && iface.DisplayName != nil && strings.TrimSpace(*iface.DisplayName) != "" {
		display = *iface.DisplayName
	}
	p := &protocol.ExecutorPlugin{
		ID: pl.id, DisplayName: display, RemotePluginID: pl.remoteID, Version: pl.version,
		Root: e.uri(pl.root), Files: protocol.PluginFiles{Manifest: *manifest},
	}
	if trimmed := strings.TrimSpace(string(m.MCP)); strings.HasPrefix(trimmed, "{") {
		// Inline servers: codex hands over the inline value, compacted,
		// under the manifest's path.
		var buf bytes.Buffer
		if json.Compact(&buf, m.MCP) == nil {
			p.Files.MCPConfig = &protocol.CapabilityTextFile{Path: manifest.Path, Contents: buf.String()}
		}
	} else {
		path, ok := declaredPath(pl.root, m.MCP)
		if !ok {
			path = filepath.Join(pl.root, ".mcp.json")
		}
		f, err := e.readTextFile(path, &budget)
		incomplete = incomplete || err != nil
		p.Files.MCPConfig = f
	}
	path, ok := declaredPath(pl.root, m.Apps)
	if !ok {
		path = filepath.Join(pl.root, ".app.json")
	}
	f, err := e.readTextFile(path, &budget)
	incomplete = incomplete || err != nil
	p.Files.AppsConfig = f
	skills, skillsIncomplete := e.scanSkills(pl.root, nil)
	p.Skills = skills
	if p.Skills == nil {
		p.Skills = []protocol.ExecutorSkill{}
	}
	return p, incomplete || skillsIncomplete
}
