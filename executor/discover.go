package executor

// capabilities/discoverV2: the plugins and skills installed on the
// executor, so codex can offer what lives where the commands run. As
// codex 0.171's server does, discovery reads the installed plugins
// (discover_plugins.go), then three fixed skill roots, in this order:
//
//	codex-home-skills  $CODEX_HOME/skills (default ~/.codex/skills)
//	user-agent-skills  ~/.agents/skills
//	system-skills      /etc/codex/skills
//
// A root that is not a directory is skipped. Under a root every SKILL.md
// that is a regular file (not a symlink) is a skill; directory symlinks
// are followed, as codex follows them, once each (a loop ends at the
// directory already seen) and never into the executor's hidden paths.
// Skills are listed in path order. A SKILL.md must start with YAML front
// matter between "---" lines with a description; name defaults to the
// directory's name and may have at most 64 characters; whitespace in
// both collapses to single spaces; metadata.short-description is the
// short description. agents/openai.yaml beside it adds dependencies.tools
// and policy; a metadata file that cannot be used adds neither, silently,
// as in codex. A root (or plugin) where anything could not be read or
// parsed adds one warning that discovery may be incomplete.
//
// A sandbox param (codex sends one when capabilityDiscoverySandbox is
// advertised) judges every capability read as fs/* calls are judged
// (discover_fs.go): what it denies is left out, with the warning. cwd is
// required but, as in codex 0.171, no project skills are read.
//
// Bounds, codex's: a root is walked maxSkillDepth deep, at most
// maxSkillDirs directories and maxSkillEntries entries; a file is at
// most maxSkillFileBytes and a root's files together maxSkillRootBytes;
// a response at most maxCapabilities plugins and skills,
// maxDiscoverWarnings warnings and maxDiscoverResponseBytes of JSON. The
// handler runs beside the read loop, at most Config.MaxConcurrentReads
// at once.

import (
	"encoding/json"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/outpost-exec/outpost/pathmap"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/sandbox"
	"github.com/outpost-exec/outpost/transport"
)

const (
	maxSkillDepth            = 6
	maxSkillDirs             = 2000
	maxSkillEntries          = 20000
	maxSkillFileBytes        = 1 << 20
	maxSkillRootBytes        = 16 << 20
	maxCapabilities          = 2048
	maxDiscoverWarnings      = 64
	maxDiscoverResponseBytes = 4 << 20
	maxSkillNameChars        = 64
	maxSkillDescChars        = 1024
)

// Warnings, codex's words.
const (
	warnIncomplete = "some capability metadata could not be loaded; discovery may be incomplete"
	warnLocations  = "some capability locations could not be resolved; discovery may be incomplete"
	warnSizeLimit  = "capability discovery size limit reached"
)

func (c *serverConn) capabilitiesDiscoverV2(m *transport.Message) (any, error) {
	var p protocol.DiscoverV2Params
	if err := decode(m, &p, true); err != nil {
		return nil, err
	}
	if p.Cwd == nil {
		return nil, invalidParams("missing field `cwd`")
	}
	if _, err := c.uriParam(*p.Cwd); err != nil {
		return nil, err
	}
	env := codexEnvFromProcess(c.srv.cfg.SandboxHidden)
	env.toClient = c.srv.mapper.ToClient
	if env.homeErr != nil {
		return nil, protocol.KindErrorf(protocol.KindInternal, protocol.CodeInternal, "failed to find Codex home: %v", env.homeErr)
	}
	if p.Sandbox != nil {
		// Refuse a malformed policy up front, in this method's name,
		// rather than as every read's failure.
		raw, err := json.Marshal(p.Sandbox)
		if err == nil {
			_, err = sandbox.ParseContext(raw)
		}
		if err != nil {
			return nil, invalidParams("invalid params for %s: sandbox: %v", m.Method, err)
		}
		env.capfs = sandboxFS{files: c.session.files, policy: p.Sandbox, mapper: c.srv.mapper}
	}
	return env.discover(), nil
}

type skillRoot struct{ id, path string }

func (e codexEnv) skillRoots() []skillRoot {
	roots := []skillRoot{{"codex-home-skills", filepath.Join(e.codexHome, "skills")}}
	if e.home != "" {
		roots = append(roots, skillRoot{"user-agent-skills", filepath.Join(e.home, ".agents", "skills")})
	}
	roots = append(roots, skillRoot{"system-skills", filepath.Join(e.systemDir, "skills")})
	var out []skillRoot
	for _, r := range roots {
		if !slices.ContainsFunc(out, func(o skillRoot) bool { return o.path == r.path }) {
			out = append(out, r)
		}
	}
	return out
}

func (e codexEnv) discover() protocol.DiscoverV2Result {
	res := protocol.DiscoverV2Result{Plugins: []protocol.ExecutorPlugin{}, Skills: []protocol.ExecutorSkill{}, Warnings: []string{}}
	b := &responseBudget{}
	// Installed plugins first, then the standalone roots, as codex
	// orders its locations.
	plugins, locWarn := e.installedPlugins()
	if locWarn {
		res.Warnings = append(res.Warnings, warnLocations)
	}
	addWarning := func() {
		if len(res.Warnings) < maxDiscoverWarnings {
			res.Warnings = append(res.Warnings, warnIncomplete)
		}
	}
	for _, pl := range plugins {
		if b.full() {
			b.truncated = true
			break
		}
		p, incomplete := e.loadPlugin(pl)
		if incomplete {
			addWarning()
		}
		if p != nil && b.admitPlugin(p) {
			res.Plugins = append(res.Plugins, *p)
		}
	}
	for _, root := range e.skillRoots() {
		if b.full() {
			b.truncated = true
			break
		}
		if ok, err := e.fsys().isDir(root.path); !ok {
			if err != nil && e.rootVisible(root.path) {
				addWarning()
			}
			continue
		}
		skills, incomplete := e.scanSkills(root.path, &protocol.SkillDiscoveryRoot{ID: root.id, Path: e.uri(root.path)})
		if incomplete {
			addWarning()
		}
		for _, s := range skills {
			if b.admitSkill(s) {
				res.Skills = append(res.Skills, s)
			}
		}
	}
	slices.SortStableFunc(res.Plugins, func(a, b protocol.ExecutorPlugin) int {
		if c := strings.Compare(a.ID, b.ID); c != 0 {
			return c
		}
		return strings.Compare(a.Root, b.Root)
	})
	if b.truncated {
		res.Warnings = slices.Insert(res.Warnings[:min(len(res.Warnings), maxDiscoverWarnings-1)], 0, warnSizeLimit)
	}
	return res
}

// responseBudget bounds a response: capabilities (a plugin and each of
// its skills count one) and bytes of JSON.
type responseBudget struct {
	capabilities, bytes int
	truncated           bool
}

func (b *responseBudget) full() bool {
	return b.capabilities >= maxCapabilities || b.bytes >= maxDiscoverResponseBytes
}

func (b *responseBudget) admit(n int, v any) bool {
	raw, _ := json.Marshal(v)
	if b.capabilities+n > maxCapabilities || b.bytes+len(raw) > maxDiscoverResponseBytes {
		b.truncated = true
		return false
	}
	b.capabilities += n
	b.bytes += len(raw)
	return true
}

func (b *responseBudget) admitSkill(s protocol.ExecutorSkill) bool { return b.admit(1, s) }

func (b *responseBudget) admitPlugin(p *protocol.ExecutorPlugin) bool {
	if left := maxCapabilities - b.capabilities - 1; len(p.Skills) > left {
		p.Skills = p.Skills[:max(left, 0)]
		b.truncated = true
	}
	return b.admit(1+len(p.Skills), p)
}

// scanSkills finds and parses the skills under root. A skill's name is
// qualified by the nearest plugin manifest's name above it (a plugin's
// skills, which have no discovery root).
func (e codexEnv) scanSkills(root string, discoveryRoot *protocol.SkillDiscoveryRoot) ([]protocol.ExecutorSkill, bool) {
	w := &skillWalk{fsys: e.fsys(), seen: map[string]bool{}}
	w.walk(root, 0)
	slices.SortFunc(w.found, func(a, b string) int { return strings.Compare(pathmap.URI(a), pathmap.URI(b)) })
	budget := int64(maxSkillRootBytes)
	namespaces := e.pluginNamespaces(root, w.manifests, &budget, &w.incomplete)
	var out []protocol.ExecutorSkill
	for _, path := range w.found {
		data, err := e.fsys().readFile(path, min(maxSkillFileBytes, budget))
		if err != nil {
			w.incomplete = true
			continue
		}
		budget -= int64(len(data))
		if !utf8.Valid(data) {
			w.incomplete = true
			continue
		}
		s, err := parseSkill(string(data), path)
		if err != nil {
			w.incomplete = true
			continue
		}
		s.Path = e.uri(path)
		for d := filepath.Dir(path); ; d = filepath.Dir(d) {
			if ns, ok := namespaces[d]; ok {
				s.Name = ns + ":" + s.Name
				break
			}
			if d == "/" {
				break
			}
		}
		if utf8.RuneCountInString(s.Name) > 2*maxSkillNameChars+1 {
			w.incomplete = true // codex: the qualified name is too long
			continue
		}
		s.DiscoveryRoot = discoveryRoot
		meta := filepath.Join(filepath.Dir(path), "agents", "openai.yaml")
		if md, err := e.fsys().readFile(meta, min(maxSkillFileBytes, budget)); err == nil {
			budget -= int64(len(md))
			if utf8.Valid(md) {
				s.Dependencies, s.Policy = parseSkillMetadata(string(md))
			}
		} else if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, errHiddenPath) {
			w.incomplete = true
		}
		out = append(out, s)
	}
	return out, w.incomplete
}

// skillWalk is one root's bounded walk.
type skillWalk struct {
	fsys       capFS
	seen       map[string]bool // directories entered, by capFS key
	dirs       int
	entries    int
	incomplete bool
	found      []string // SKILL.md paths
	manifests  []string // plugin manifests (<dir>/.codex-plugin/plugin.json, …)
}

// walk lists dir (at depth below the root) and descends, within the
// walk's bounds.
func (w *skillWalk) walk(dir string, depth int) {
	if depth > maxSkillDepth {
		return
	}
	if w.dirs == maxSkillDirs {
		w.incomplete = true
		return
	}
	ents, key, err := w.fsys.list(dir, maxSkillEntries-w.entries)
	if errors.Is(err, errHiddenPath) {
		return
	}
	if key != "" && w.seen[key] {
		return // a symlink loop, or a directory linked twice
	}
	if err != nil {
		w.incomplete = true
		if ents == nil {
			return
		}
	}
	w.seen[key] = true
	w.dirs++
	w.entries += len(ents)
	var subdirs []string
	for _, ent := range ents {
		p := filepath.Join(dir, ent.name)
		switch {
		case ent.dir:
			subdirs = append(subdirs, p)
		case ent.symlink:
			// A symlink to a directory is walked; a symlinked SKILL.md
			// is not a skill (codex lists it as a link).
			if ok, _ := w.fsys.isDir(p); ok {
				subdirs = append(subdirs, p)
			}
		case ent.regular && ent.name == "SKILL.md":
			w.found = append(w.found, p)
		case ent.regular && ent.name == "plugin.json" && manifestPriority(dir) >= 0:
			w.manifests = append(w.manifests, p)
		}
	}
	slices.Sort(subdirs)
	for _, d := range subdirs {
		w.walk(d, depth+1)
	}
}

// parseSkill reads SKILL.md's front matter.
func parseSkill(contents, path string) (protocol.ExecutorSkill, error) {
	front, ok := frontMatter(contents)
	if !ok {
		return protocol.ExecutorSkill{}, errors.New("missing YAML frontmatter delimited by ---")
	}
	doc, err := parseYAML(front)
	if err != nil {
		return protocol.ExecutorSkill{}, err
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return protocol.ExecutorSkill{}, errors.New("front matter is not a mapping")
	}
	name, _, err := yamlString(m["name"])
	if err != nil {
		return protocol.ExecutorSkill{}, err
	}
	desc, _, err := yamlString(m["description"])
	if err != nil {
		return protocol.ExecutorSkill{}, err
	}
	meta, err := yamlMap(m["metadata"])
	if err != nil {
		return protocol.ExecutorSkill{}, err
	}
	short, _, err := yamlString(meta["short-description"])
	if err != nil {
		return protocol.ExecutorSkill{}, err
	}
	name = singleLine(name)
	if name == "" {
		name = singleLine(filepath.Base(filepath.Dir(path)))
		if name == "" {
			name = "skill"
		}
	}
	if utf8.RuneCountInString(name) > maxSkillNameChars {
		return protocol.ExecutorSkill{}, errors.New("invalid name: too long")
	}
	desc = singleLine(desc)
	if desc == "" {
		return protocol.ExecutorSkill{}, errors.New("missing field `description`")
	}
	s := protocol.ExecutorSkill{Name: name, Description: desc, Path: pathmap.URI(path)}
	if short = singleLine(short); short != "" {
		s.ShortDescription = &short
	}
	return s, nil
}

// frontMatter is the text between a first line "---" and the next
// "---" line; absent when either is missing or nothing is between.
func frontMatter(contents string) (string, bool) {
	lines := strings.Split(contents, "\n")
	if strings.TrimSpace(strings.TrimSuffix(lines[0], "\r")) != "---" {
		return "", false
	}
	for i := 1; i < len(lines); i++ {
		if strings.TrimSpace(strings.TrimSuffix(lines[i], "\r")) == "---" {
			if i == 1 {
				return "", false
			}
			return strings.Join(lines[1:i], "\n"), true
		}
	}
	return "", false
}

func singleLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// parseSkillMetadata reads agents/openai.yaml's dependencies and policy;
// a file that does not fit codex's schema gives neither.
func parseSkillMetadata(contents string) (*protocol.SkillDependencies, *protocol.SkillPolicy) {
	doc, err := parseYAML(contents)
	if err != nil {
		return nil, nil
	}
	m, err := yamlMap(doc)
	if err != nil {
		return nil, nil
	}
	deps, err := parseDependencies(m["dependencies"])
	if err != nil {
		return nil, nil
	}
	pol, err := parsePolicy(m["policy"])
	if err != nil {
		return nil, nil
	}
	return deps, pol
}

func parseDependencies(v any) (*protocol.SkillDependencies, error) {
	m, err := yamlMap(v)
	if err != nil || m == nil {
		return nil, err
	}
	tools, err := yamlSeq(m["tools"])
	if err != nil {
		return nil, err
	}
	var out []protocol.SkillToolDependency
	for _, t := range tools {
		tm, err := yamlMap(t)
		if err != nil {
			return nil, err
		}
		var fields [6]*string
		for i, k := range []string{"type", "value", "description", "transport", "command", "url"} {
			s, ok, err := yamlString(tm[k])
			if err != nil {
				return nil, err
			}
			if ok {
				fields[i] = &s
			}
		}
		var port *int
		if om, err := yamlMap(tm["oauth"]); err != nil {
			return nil, err
		} else if om != nil {
			pv, ok := om["callbackPort"]
			if !ok {
				pv = om["callback_port"]
			}
			if pv != nil {
				ps, ok := pv.(yScalar)
				n, err := parsePort(ps.s)
				if !ok || !ps.plain || err != nil {
					return nil, errors.New("invalid oauth callback port")
				}
				port = n
			}
		}
		limits := [6]int{maxSkillNameChars, maxSkillDescChars, maxSkillDescChars, maxSkillNameChars, maxSkillDescChars, maxSkillDescChars}
		for i := range fields {
			fields[i] = boundedField(fields[i], limits[i])
		}
		if fields[0] == nil || fields[1] == nil {
			continue // type and value are required: the tool is ignored
		}
		out = append(out, protocol.SkillToolDependency{
			Type: *fields[0], Value: *fields[1], Description: fields[2], Transport: fields[3],
			Command: fields[4], URL: fields[5], OAuthCallbackPort: port,
		})
	}
	if len(out) == 0 {
		return nil, nil
	}
	return &protocol.SkillDependencies{Tools: out}, nil
}

// boundedField collapses whitespace and drops an empty or too long value.
func boundedField(s *string, limit int) *string {
	if s == nil {
		return nil
	}
	v := singleLine(*s)
	if v == "" || utf8.RuneCountInString(v) > limit {
		return nil
	}
	return &v
}

func parsePort(s string) (*int, error) {
	n := 0
	if s == "" || len(s) > 5 {
		return nil, errors.New("invalid port")
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return nil, errors.New("invalid port")
		}
		n = n*10 + int(c-'0')
	}
	if n > 65535 {
		return nil, errors.New("invalid port")
	}
	return &n, nil
}

func parsePolicy(v any) (*protocol.SkillPolicy, error) {
	if v == nil {
		return nil, nil
	}
	m, err := yamlMap(v)
	if err != nil {
		return nil, err
	}
	if m == nil {
		// "policy:" with nothing: serde reads null as no policy.
		return nil, nil
	}
	allow, err := yamlBool(m["allow_implicit_invocation"])
	if err != nil {
		return nil, err
	}
	prods, err := yamlSeq(m["products"])
	if err != nil {
		return nil, err
	}
	out := &protocol.SkillPolicy{AllowImplicitInvocation: allow, Products: []string{}}
	for _, p := range prods {
		s, ok, err := yamlString(p)
		if err != nil || !ok {
			return nil, errors.New("invalid product")
		}
		switch s {
		case "chatgpt", "CHATGPT":
			s = "chatgpt"
		case "codex", "CODEX":
			s = "codex"
		case "atlas", "ATLAS":
			s = "atlas"
		default:
			return nil, errors.New("unknown product " + s)
		}
		out.Products = append(out.Products, s)
	}
	return out, nil
}
