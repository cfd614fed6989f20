package executor

// environmentConfig/read: the codex configuration kept on the executor,
// so codex can use MCP servers (and other settings) configured where the
// commands run. As codex 0.171's server does, the layers are, lowest
// precedence first:
//
//	system   /etc/codex/config.toml
//	user     $CODEX_HOME/config.toml (default ~/.codex/config.toml)
//	project  .codex/config.toml in each directory from the project root
//	         down to cwd, for a trusted project only
//
// and the requirements layer /etc/codex/requirements.toml. The project
// root is the nearest ancestor of cwd holding a root marker
// (project_root_markers from the system and user layers, default
// [".git"]; a .git directory counts only with a HEAD), else cwd. A
// project is trusted when the user (or system) config marks the
// directory, the project root or the git checkout trusted under
// [projects."<path>"] trust_level = "trusted". Project layers lose the
// keys codex never takes from a repository (model_provider, notify, …).
// Each layer keeps only the TOML paths asked for and is left out when
// nothing remains; its text is the projection, serialized again.
//
// The legacy /etc/codex/managed_config.toml is a config layer after the
// project layers, governs the project root and trust with the system and
// user layers, and is read again as requirements: its approval_policy,
// approvals_reviewer and sandbox_mode become allowed_* lists.
//
// Not read (codex reads them; outpost does not yet): linked worktrees'
// root-checkout hooks, and macOS managed preferences.
//
// Bounds: one file at most maxConfigFileBytes, one request at most
// maxConfigRequestBytes of files and maxProjectDirs directories above
// cwd; the handler runs beside the read loop (longPoll), at most
// Config.MaxConcurrentReads at once.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/outpost-exec/outpost/pathmap"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

const (
	// maxConfigFileBytes bounds one config or requirements file.
	maxConfigFileBytes = 4 << 20
	// maxConfigRequestBytes bounds the files one request reads together.
	maxConfigRequestBytes = 16 << 20
	// maxProjectDirs bounds the directories from cwd up to the project
	// root that are searched for .codex/config.toml.
	maxProjectDirs = 256
	// maxConfigPaths bounds the TOML paths one request may ask for, and
	// maxConfigPathSegments the keys in one path.
	maxConfigPaths        = 256
	maxConfigPathSegments = 64
)

// codexSystemDir is codex's system configuration directory on Unix; a
// variable so tests can point it at a temporary directory.
var codexSystemDir = "/etc/codex"

// projectDenylist are top-level keys a project layer may not set (codex's
// PROJECT_LOCAL_CONFIG_DENYLIST): they would let a repository redirect
// the model, credentials or telemetry.
var projectDenylist = []string{
	"openai_base_url", "chatgpt_base_url", "apps_mcp_product_sku", "responses_api_metadata",
	"model_provider", "model_providers", "notify", "profile", "profiles",
	"experimental_realtime_webrtc_call_base_url", "experimental_realtime_ws_base_url", "otel",
}

func (c *serverConn) environmentConfigRead(m *transport.Message) (any, error) {
	var p protocol.EnvironmentConfigReadParams
	if err := decode(m, &p, true); err != nil {
		return nil, err
	}
	switch {
	case p.Cwd == nil:
		return nil, invalidParams("missing field `cwd`")
	case p.ConfigPaths == nil:
		return nil, invalidParams("missing field `configPaths`")
	case p.RequirementsPaths == nil:
		return nil, invalidParams("missing field `requirementsPaths`")
	case len(p.ConfigPaths) == 0 && len(p.RequirementsPaths) == 0:
		return nil, invalidParams("at least one config or requirements path is required")
	case len(p.ConfigPaths)+len(p.RequirementsPaths) > maxConfigPaths:
		return nil, invalidParams("at most %d config and requirements paths may be asked for", maxConfigPaths)
	}
	for _, path := range append(append([][]string{}, p.ConfigPaths...), p.RequirementsPaths...) {
		if len(path) == 0 {
			return nil, invalidParams("TOML paths must contain at least one key segment")
		}
		if len(path) > maxConfigPathSegments {
			return nil, invalidParams("a TOML path may have at most %d key segments", maxConfigPathSegments)
		}
	}
	cwd, err := c.uriParam(*p.Cwd)
	if err != nil {
		return nil, err
	}
	env := codexEnvFromProcess(c.srv.cfg.SandboxHidden)
	env.toClient = c.srv.mapper.ToClient
	return env.readConfig(cwd, p.ConfigPaths, p.RequirementsPaths)
}

// uriParam resolves a file: URI through the path mappings; codex's
// server accepts only URIs here.
func (c *serverConn) uriParam(s string) (string, error) {
	if i := strings.IndexByte(s, ':'); i <= 0 || strings.ContainsAny(s[:i], "/\\") {
		return "", invalidParams("invalid URI: relative URL without a base")
	}
	p, err := c.srv.translate(s)
	if err != nil {
		return "", invalidParams("%v", err)
	}
	return p, nil
}

func invalidParams(format string, args ...any) error {
	return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, format, args...)
}

// codexEnv is where codex's files are on this executor.
type codexEnv struct {
	home      string // "" when unknown
	codexHome string
	homeErr   error // why codexHome could not be found
	systemDir string
	hidden    []string
	// capfs reads capability files (discover_fs.go); nil is localFS.
	capfs capFS
	// toClient maps an executor path to the client's (the server's path
	// mappings), for the paths a result reports; nil is the identity.
	toClient func(string) string
}

// uri renders an executor path for a result: through the path mappings,
// as a file: URI.
func (e codexEnv) uri(p string) string {
	if e.toClient != nil {
		p = e.toClient(p)
	}
	return pathmap.URI(p)
}

func (e codexEnv) fsys() capFS {
	if e.capfs == nil {
		return localFS{hidden: e.hidden}
	}
	return e.capfs
}

// codexEnvFromProcess finds codex's home as codex does: CODEX_HOME when
// set (an existing directory, canonicalized), else ~/.codex.
func codexEnvFromProcess(hidden []string) codexEnv {
	e := codexEnv{systemDir: codexSystemDir, hidden: hidden}
	if h, err := os.UserHomeDir(); err == nil && filepath.IsAbs(h) {
		e.home = filepath.Clean(h)
	}
	if v := os.Getenv("CODEX_HOME"); v != "" {
		fi, err := os.Stat(v)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			e.homeErr = fmt.Errorf("CODEX_HOME points to %q, but that path does not exist", v)
		case err != nil:
			e.homeErr = fmt.Errorf("failed to read CODEX_HOME %q: %v", v, err)
		case !fi.IsDir():
			e.homeErr = fmt.Errorf("CODEX_HOME points to %q, but that path is not a directory", v)
		default:
			real, err := filepath.EvalSymlinks(v)
			if err == nil {
				real, err = filepath.Abs(real)
			}
			if err != nil {
				e.homeErr = fmt.Errorf("failed to canonicalize CODEX_HOME %q: %v", v, err)
			}
			e.codexHome = real
		}
		return e
	}
	if e.home == "" {
		e.homeErr = errors.New("could not find home directory")
		return e
	}
	e.codexHome = filepath.Join(e.home, ".codex")
	return e
}

// configLayer is one layer before projection.
type configLayer struct {
	source  string
	baseDir string
	toml    *tomlTable
}

// configReader reads one request's files within its byte budget.
type configReader struct {
	env  codexEnv
	left int64
}

// read parses path; a missing file is (nil, nil).
func (r *configReader) read(path string) (*tomlTable, error) {
	data, err := r.readBytes(path)
	if data == nil || err != nil {
		return nil, err
	}
	return parseTOML(string(data))
}

// readBytes reads path within the request's budget; a missing file is
// (nil, nil).
func (r *configReader) readBytes(path string) ([]byte, error) {
	data, err := readBoundedFile(path, min(maxConfigFileBytes, max(r.left, 0)), r.env.hidden)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errHiddenPath) {
		// A hidden file is as good as absent: saying more would tell a
		// client what the executor hides.
		return nil, nil
	}
	if errors.Is(err, errFileTooLarge) && r.left < maxConfigFileBytes {
		return nil, fmt.Errorf("%s: the files of one request may total at most %d bytes", path, maxConfigRequestBytes)
	}
	if err != nil {
		return nil, err
	}
	r.left -= int64(len(data))
	if data == nil {
		data = []byte{} // present, empty
	}
	return data, nil
}

func loadErr(err error) error {
	return protocol.KindErrorf(protocol.KindInternal, protocol.CodeInternal, "failed to load executor-local config: %v", err)
}

// readRequiredLayer reads a system or user file: missing is empty, a
// parse error names the file and where.
func (r *configReader) readRequiredLayer(path string) (*tomlTable, error) {
	t, err := r.read(path)
	var pe *tomlParseError
	switch {
	case errors.As(err, &pe):
		return nil, loadErr(fmt.Errorf("%s:%v", path, pe))
	case err != nil:
		return nil, loadErr(err)
	case t == nil:
		t = newTomlTable()
	}
	return t, nil
}

func (e codexEnv) readConfig(cwd string, configPaths, requirementsPaths [][]string) (any, error) {
	if e.homeErr != nil {
		return nil, protocol.KindErrorf(protocol.KindInternal, protocol.CodeInternal, "failed to find Codex home: %v", e.homeErr)
	}
	r := &configReader{env: e, left: maxConfigRequestBytes}
	systemFile := filepath.Join(e.systemDir, "config.toml")
	system, err := r.readRequiredLayer(systemFile)
	if err != nil {
		return nil, err
	}
	userFile := filepath.Join(e.codexHome, "config.toml")
	user, err := r.readRequiredLayer(userFile)
	if err != nil {
		return nil, err
	}
	managedFile := filepath.Join(e.systemDir, "managed_config.toml")
	managed, err := r.read(managedFile)
	var mpe *tomlParseError
	switch {
	case errors.As(err, &mpe):
		return nil, loadErr(fmt.Errorf("%s:%v", managedFile, mpe))
	case err != nil:
		return nil, loadErr(err)
	}
	discovery := newTomlTable()
	mergeTOML(discovery, system)
	mergeTOML(discovery, user)
	if managed != nil {
		// Managed values also govern the project root and trust.
		mergeTOML(discovery, managed)
	}

	layers := []configLayer{
		{source: "system (" + systemFile + ")", baseDir: e.systemDir, toml: system},
		{source: "user (" + userFile + ")", baseDir: e.codexHome, toml: user},
	}
	projects, err := r.projectLayers(cwd, discovery)
	if err != nil {
		return nil, loadErr(err)
	}
	layers = append(layers, projects...)
	if managed != nil {
		layers = append(layers, configLayer{source: "legacy managed_config.toml (" + managedFile + ")", baseDir: e.systemDir, toml: managed})
	}

	var reqLayers []configLayer
	reqFile := filepath.Join(e.systemDir, "requirements.toml")
	req, err := r.read(reqFile)
	var pe *tomlParseError
	switch {
	case errors.As(err, &pe):
		return nil, loadErr(fmt.Errorf("%s:%v", reqFile, pe))
	case err != nil:
		return nil, loadErr(err)
	case req != nil:
		reqLayers = append(reqLayers, configLayer{source: reqFile, baseDir: e.systemDir, toml: req})
	}
	reqCloud := 0
	if req != nil {
		reqCloud = 1
	}
	if managed != nil {
		legacy, err := legacyRequirements(managed)
		if err != nil {
			return nil, loadErr(err)
		}
		reqLayers = append(reqLayers, configLayer{source: managedFile, baseDir: e.systemDir, toml: legacy})
	}

	res := protocol.EnvironmentConfigReadResult{
		CodexHomeDir: e.uri(e.codexHome),
		Config:       e.projectStack(layers, 1, configPaths),
		Requirements: e.projectStack(reqLayers, reqCloud, requirementsPaths),
	}
	if e.home != "" {
		u := e.uri(e.home)
		res.UserHomeDir = &u
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		h = strings.ToLower(strings.TrimSuffix(h, "."))
		res.Hostname = &h
	}
	return res, nil
}

// projectStack keeps what paths select of each layer; the cloud index
// counts the kept layers below it.
func (e codexEnv) projectStack(layers []configLayer, cloud int, paths [][]string) protocol.EnvironmentConfigLayerStack {
	sel := newTomlSelector(paths)
	out := protocol.EnvironmentConfigLayerStack{Layers: []protocol.EnvironmentConfigLayer{}}
	for i, l := range layers {
		t := projectTOML(l.toml, sel)
		if t == nil {
			continue
		}
		if i < cloud {
			out.CloudInsertionIndex++
		}
		out.Layers = append(out.Layers, protocol.EnvironmentConfigLayer{
			Source:  l.source,
			BaseDir: e.uri(l.baseDir),
			Toml:    marshalTOML(t),
		})
	}
	return out
}

// projectLayers reads the trusted project layers from the project root
// down to cwd.
func (r *configReader) projectLayers(cwd string, discovery *tomlTable) ([]configLayer, error) {
	markers := []string{".git"}
	if v, ok := discovery.get("project_root_markers"); ok {
		arr, ok := v.([]any)
		if !ok {
			return nil, errors.New("project_root_markers must be an array of strings")
		}
		markers = markers[:0]
		for _, m := range arr {
			s, ok := m.(string)
			if !ok {
				return nil, errors.New("project_root_markers must be an array of strings")
			}
			markers = append(markers, s)
		}
	}
	trust, err := trustLevels(discovery)
	if err != nil {
		return nil, err
	}
	root := findProjectRoot(cwd, markers)
	checkout := findGitCheckout(cwd)

	// cwd and its ancestors up to the project root, root first.
	var dirs []string
	for d := cwd; ; d = filepath.Dir(d) {
		dirs = append(dirs, d)
		if d == root || d == "/" || len(dirs) == maxProjectDirs {
			break
		}
	}
	codexHomeReal := realPath(r.env.codexHome)
	var out []configLayer
	for i := len(dirs) - 1; i >= 0; i-- {
		dir := dirs[i]
		dotCodex := filepath.Join(dir, ".codex")
		if ok, _ := statDir(dotCodex); !ok {
			continue
		}
		if dotCodex == r.env.codexHome || realPath(dotCodex) == codexHomeReal {
			continue // the user layer, already read
		}
		trusted := trustedDir(trust, dir, root, checkout)
		file := filepath.Join(dotCodex, "config.toml")
		if !trusted {
			// codex reads it (a read error is an error) but uses nothing
			// of it: an untrusted repository's file is not even parsed.
			if _, err := r.readBytes(file); err != nil {
				return nil, fmt.Errorf("Failed to read project config file %s: %w", file, err)
			}
			continue
		}
		t, err := r.read(file)
		var pe *tomlParseError
		switch {
		case errors.As(err, &pe):
			return nil, fmt.Errorf("Error parsing project config file %s: %v", file, pe)
		case err != nil:
			return nil, fmt.Errorf("Failed to read project config file %s: %w", file, err)
		}
		if t == nil {
			t = newTomlTable()
		}
		sanitizeProjectConfig(t)
		out = append(out, configLayer{source: "project (" + file + ")", baseDir: dotCodex, toml: t})
	}
	return out, nil
}

// sanitizeProjectConfig drops what a repository may not configure.
func sanitizeProjectConfig(t *tomlTable) {
	for _, k := range projectDenylist {
		t.remove(k)
	}
	if f, ok := t.vals["features"].(*tomlTable); ok {
		f.remove("respect_system_proxy")
	}
	if tui, ok := t.vals["tui"].(*tomlTable); ok {
		if km, ok := tui.vals["keymap"].(*tomlTable); ok {
			if chat, ok := km.vals["chat"].(*tomlTable); ok {
				chat.remove("previous_permission_mode")
				chat.remove("next_permission_mode")
			}
		}
	}
}

// trustLevels reads [projects."<path>"] trust_level.
func trustLevels(discovery *tomlTable) (map[string]string, error) {
	out := map[string]string{}
	v, ok := discovery.get("projects")
	if !ok {
		return out, nil
	}
	projects, ok := v.(*tomlTable)
	if !ok {
		return nil, errors.New("invalid type for `projects`: expected a table")
	}
	for _, k := range projects.keys {
		p, ok := projects.vals[k].(*tomlTable)
		if !ok {
			return nil, fmt.Errorf("invalid type for `projects.%s`: expected a table", k)
		}
		if lv, ok := p.vals["trust_level"]; ok {
			s, ok := lv.(string)
			if !ok || (s != "trusted" && s != "untrusted") {
				return nil, fmt.Errorf("invalid value for `projects.%s.trust_level`: expected `trusted` or `untrusted`", k)
			}
			out[k] = s
		}
	}
	return out, nil
}

// trustedDir decides a directory's trust as codex does: its own entry,
// else the project root's, else the git checkout's.
func trustedDir(trust map[string]string, dir, root, checkout string) bool {
	for _, cand := range []string{dir, root, checkout} {
		if cand == "" {
			continue
		}
		for _, key := range trustKeys(cand) {
			if lv, ok := trust[key]; ok {
				return lv == "trusted"
			}
		}
	}
	return false
}

// trustKeys are the spellings a trust entry may use for p: its real
// path first, then as given.
func trustKeys(p string) []string {
	if real := realPath(p); real != p {
		return []string{real, p}
	}
	return []string{p}
}

func realPath(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// findProjectRoot is the nearest ancestor of cwd holding a marker, else
// cwd; a .git directory without HEAD is no marker.
func findProjectRoot(cwd string, markers []string) string {
	if len(markers) == 0 {
		return cwd
	}
	n := 0
	for d := cwd; n < maxProjectDirs; d = filepath.Dir(d) {
		n++
		for _, m := range markers {
			if isMarker(d, m) {
				return d
			}
		}
		if d == "/" {
			break
		}
	}
	return cwd
}

func isMarker(dir, marker string) bool {
	p := filepath.Join(dir, marker)
	fi, err := os.Stat(p)
	if err != nil {
		return false
	}
	if marker == ".git" && fi.IsDir() && !exists(filepath.Join(p, "HEAD")) {
		return false
	}
	return true
}

// findGitCheckout is the nearest directory at or above cwd (its parent
// when cwd is not a directory) with a .git; "" when there is none.
func findGitCheckout(cwd string) string {
	base := cwd
	if ok, _ := statDir(cwd); !ok {
		base = filepath.Dir(cwd)
	}
	n := 0
	for d := base; n < maxProjectDirs; d = filepath.Dir(d) {
		n++
		if isMarker(d, ".git") {
			return d
		}
		if d == "/" {
			break
		}
	}
	return ""
}

// legacyRequirements reads managed_config.toml as codex's legacy
// requirements: each managed value becomes the one allowed value (with
// "user" beside "auto_review", and read-only always allowed).
func legacyRequirements(managed *tomlTable) (*tomlTable, error) {
	out := newTomlTable()
	bad := func(field string, v any) error {
		return fmt.Errorf("Failed to parse config requirements as TOML: unknown variant %v for `%s`", v, field)
	}
	if v, ok := managed.get("approval_policy"); ok {
		switch x := v.(type) {
		case string:
			switch x {
			case "untrusted", "on-request", "never":
			case "on-failure":
				x = "on-request"
			default:
				return nil, bad("approval_policy", x)
			}
			out.set("allowed_approval_policies", []any{x})
		case *tomlTable:
			out.set("allowed_approval_policies", []any{x}) // granular
		default:
			return nil, bad("approval_policy", x)
		}
	}
	if v, ok := managed.get("approvals_reviewer"); ok {
		switch v {
		case "user":
			out.set("allowed_approvals_reviewers", []any{"user"})
		case "auto_review", "guardian_subagent":
			out.set("allowed_approvals_reviewers", []any{"auto_review", "user"})
		default:
			return nil, bad("approvals_reviewer", v)
		}
	}
	if v, ok := managed.get("sandbox_mode"); ok {
		switch v {
		case "read-only":
			out.set("allowed_sandbox_modes", []any{"read-only"})
		case "workspace-write", "danger-full-access":
			out.set("allowed_sandbox_modes", []any{"read-only", v})
		default:
			return nil, bad("sandbox_mode", v)
		}
	}
	return out, nil
}
