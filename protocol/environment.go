package protocol

// codex's environment methods beyond environment/info: a liveness probe,
// the executor's own codex configuration, and the skills installed on
// the executor. Names and fields are codex 0.171's.
//
// Errors: a malformed request is CodeInvalidParams (-32602, KindInvalid);
// a configuration file that cannot be read or parsed CodeInternal
// (-32603), its message naming the file. Skill discovery never fails for
// what it finds on disk: a file it cannot use is left out and a warning
// says discovery may be incomplete.
const (
	// MethodEnvironmentStatus answers whether the executor can serve
	// requests on this connection.
	MethodEnvironmentStatus = "environment/status"
	// MethodEnvironmentConfigRead returns the executor's codex
	// configuration layers, projected onto the TOML paths asked for.
	MethodEnvironmentConfigRead = "environmentConfig/read"
	// MethodCapabilitiesDiscoverV2 lists the skills and plugins installed
	// on the executor.
	MethodCapabilitiesDiscoverV2 = "capabilities/discoverV2"
)

// EnvironmentStatusReady is the one status codex 0.171 defines: the
// connection is initialized and the executor can handle requests. An
// executor that cannot (it is shutting down) answers with an error, which
// codex's client reports as a disconnected environment.
const EnvironmentStatusReady = "ready"

// EnvironmentStatus is environment/status's result.
type EnvironmentStatus struct {
	Status string `json:"status" msgpack:"status"`
}

// EnvironmentConfigReadParams ask for the executor's configuration as it
// applies in Cwd. Each path is a list of TOML keys (["mcp_servers"]); a
// layer keeps only the values under the paths asked for and is left out
// when nothing remains. At least one path is required, and no path may be
// empty. All three fields are required, as codex has them.
type EnvironmentConfigReadParams struct {
	Cwd               *string    `json:"cwd" msgpack:"cwd"`
	ConfigPaths       [][]string `json:"configPaths" msgpack:"configPaths"`
	RequirementsPaths [][]string `json:"requirementsPaths" msgpack:"requirementsPaths"`
}

// EnvironmentConfigReadResult is environmentConfig/read's result. Paths
// are file: URIs; Hostname is the executor's (lower-case), for
// host-scoped requirements.
type EnvironmentConfigReadResult struct {
	UserHomeDir  *string                     `json:"userHomeDir" msgpack:"userHomeDir"`
	CodexHomeDir string                      `json:"codexHomeDir" msgpack:"codexHomeDir"`
	Hostname     *string                     `json:"hostname" msgpack:"hostname"`
	Config       EnvironmentConfigLayerStack `json:"config" msgpack:"config"`
	Requirements EnvironmentConfigLayerStack `json:"requirements" msgpack:"requirements"`
}

// EnvironmentConfigLayerStack is a list of layers, lowest precedence
// first. CloudInsertionIndex is where a caller inserts cloud-provided
// layers: after the system layer when it is present.
type EnvironmentConfigLayerStack struct {
	Layers              []EnvironmentConfigLayer `json:"layers" msgpack:"layers"`
	CloudInsertionIndex int                      `json:"cloudInsertionIndex" msgpack:"cloudInsertionIndex"`
}

// EnvironmentConfigLayer is one configuration source. Source names it as
// codex does ("user (/home/u/.codex/config.toml)"); BaseDir is the
// directory its relative paths are read against; Toml is the projected
// document, serialized again (not the file's text).
type EnvironmentConfigLayer struct {
	Source  string `json:"source" msgpack:"source"`
	BaseDir string `json:"baseDir" msgpack:"baseDir"`
	Toml    string `json:"toml" msgpack:"toml"`
}

// DiscoverV2Params ask for the capabilities installed on the executor.
// Cwd is required (codex 0.171 does not yet read project skills).
// Sandbox, when present, is the fs/* sandbox context: every read of a
// capability file is judged by it as an fs/* call would be.
type DiscoverV2Params struct {
	Cwd     *string `json:"cwd" msgpack:"cwd"`
	Sandbox any     `json:"sandbox,omitempty" msgpack:"sandbox,omitempty"`
}

// DiscoverV2Result is capabilities/discoverV2's result.
type DiscoverV2Result struct {
	Plugins  []ExecutorPlugin `json:"plugins" msgpack:"plugins"`
	Skills   []ExecutorSkill  `json:"skills" msgpack:"skills"`
	Warnings []string         `json:"warnings" msgpack:"warnings"`
}

// ExecutorPlugin is an installed plugin package: its active version
// under $CODEX_HOME/plugins/cache/<marketplace>/<name>/, its manifest
// and MCP and apps configuration (as text), and its skills.
type ExecutorPlugin struct {
	ID             string          `json:"id" msgpack:"id"` // <name>@<marketplace>
	DisplayName    string          `json:"displayName" msgpack:"displayName"`
	RemotePluginID *string         `json:"remotePluginId" msgpack:"remotePluginId"`
	Version        string          `json:"version" msgpack:"version"`
	Root           string          `json:"root" msgpack:"root"`
	Files          PluginFiles     `json:"files" msgpack:"files"`
	Skills         []ExecutorSkill `json:"skills" msgpack:"skills"`
}

// PluginFiles are a plugin's manifest and configuration files.
type PluginFiles struct {
	Manifest   CapabilityTextFile  `json:"manifest" msgpack:"manifest"`
	MCPConfig  *CapabilityTextFile `json:"mcpConfig" msgpack:"mcpConfig"`
	AppsConfig *CapabilityTextFile `json:"appsConfig" msgpack:"appsConfig"`
}

// CapabilityTextFile is a file's path and UTF-8 contents.
type CapabilityTextFile struct {
	Path     string `json:"path" msgpack:"path"`
	Contents string `json:"contents" msgpack:"contents"`
}

// ExecutorSkill is one SKILL.md's metadata (not its instructions).
type ExecutorSkill struct {
	Name             string  `json:"name" msgpack:"name"`
	Description      string  `json:"description" msgpack:"description"`
	ShortDescription *string `json:"shortDescription" msgpack:"shortDescription"`
	Path             string  `json:"path" msgpack:"path"` // the SKILL.md file
	// DiscoveryRoot is set for a standalone skill, absent for a plugin's.
	DiscoveryRoot *SkillDiscoveryRoot `json:"discoveryRoot,omitempty" msgpack:"discoveryRoot,omitempty"`
	Dependencies  *SkillDependencies  `json:"dependencies" msgpack:"dependencies"`
	Policy        *SkillPolicy        `json:"policy" msgpack:"policy"`
}

// SkillDiscoveryRoot is the fixed root a skill was found under:
// "codex-home-skills" ($CODEX_HOME/skills), "user-agent-skills"
// (~/.agents/skills) or "system-skills" (/etc/codex/skills).
type SkillDiscoveryRoot struct {
	ID   string `json:"id" msgpack:"id"`
	Path string `json:"path" msgpack:"path"`
}

// SkillDependencies are the tools a skill declares in agents/openai.yaml.
type SkillDependencies struct {
	Tools []SkillToolDependency `json:"tools" msgpack:"tools"`
}

// SkillToolDependency is one declared tool; Type and Value are required.
type SkillToolDependency struct {
	Type              string  `json:"type" msgpack:"type"`
	Value             string  `json:"value" msgpack:"value"`
	Description       *string `json:"description" msgpack:"description"`
	Transport         *string `json:"transport" msgpack:"transport"`
	Command           *string `json:"command" msgpack:"command"`
	URL               *string `json:"url" msgpack:"url"`
	OAuthCallbackPort *int    `json:"oauthCallbackPort" msgpack:"oauthCallbackPort"`
}

// SkillPolicy is a skill's invocation policy from agents/openai.yaml.
type SkillPolicy struct {
	AllowImplicitInvocation *bool    `json:"allowImplicitInvocation" msgpack:"allowImplicitInvocation"`
	Products                []string `json:"products" msgpack:"products"`
}
