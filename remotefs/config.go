package remotefs

// Paths translates between a client's paths and this machine's: file:
// URIs and absolute paths, through the executor's prefix mappings. A
// *pathmap.Mapper is one.
type Paths interface {
	// ToExecutor maps a client's path to a clean native one.
	ToExecutor(clientPath string) (string, error)
	// ToClient maps a native path back to the client's spelling.
	ToClient(executorPath string) string
}

// Config is what the file system needs from the executor that serves it.
type Config struct {
	// Paths translates every path a call names (required).
	Paths Paths
	// Hidden are the executor's own secrets, access none under every
	// policy an fs call carries (see executor.Config.SandboxHidden).
	Hidden []string
	// MaxFileBytes bounds a whole-file fs/readFile or fs/writeFile.
	MaxFileBytes int64
	// MaxFileHandles bounds a session's open handles.
	MaxFileHandles int
}
