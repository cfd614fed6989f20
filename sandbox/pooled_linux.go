//go:build linux

package sandbox

// Pre-started helpers: the clone into new user, mount and PID namespaces,
// the helper's exec and its Go runtime's start are what a sandboxed start
// spent before any per-command work (about 2 ms of the 3.6 measured). A
// pooled helper has done them before its command exists — and mounted its
// /proc, built the Landlock rulesets of the system paths, installed the
// seccomp filter of its shape and dropped the bounding capabilities every
// command loses — and waits on a socket for exactly one command.
//
// The executor starts it as HelperName --pooled [--deny-setid], with
//   - fd 3: its end of a Unix stream socket pair; fds 0–2: /dev/null;
//   - the namespaces and id maps of its shape (usernsAttr: the host id the
//     command will run as), a session of its own (it is its process group
//     and session leader, so pgid = pid as for any sandboxed command), the
//     parent-death signal, and — the engine's part — the command's cgroup.
//
// The messages on the socket:
//
//	helper → executor  ready     a 4-byte big-endian length and the
//	                             helper's Identity(), once all the above
//	                             is done
//	executor → helper  request   the same length prefix and a
//	                             pooledRequest (pooledwire.go); the sendmsg
//	                             carries SCM_RIGHTS: stdin, stdout, stderr,
//	                             then the Launch's detached mounts in order
//	helper → executor  taken     one byte, pooledTaken, once it holds the
//	                             descriptors (the terminal as its
//	                             controlling one)
//	executor → helper  proceed   one byte, pooledProceed, once the
//	                             placeholders of absent protected names are
//	                             made (Launch.Hold, about 0.15 ms a name on
//	                             ext4 here, made while the helper takes its
//	                             descriptors, places the workspaces and adds
//	                             its Landlock rules); the helper waits for
//	                             it before it protects those names
//	helper → executor  exit      one byte, pooledExit, and the 4-byte exit
//	                             status the helper is about to exit with,
//	                             once the command has exited and everything
//	                             else in its namespace is killed and reaped
//
// Until the executor sends proceed nothing of the command has run: a
// helper that does not say taken (it died, or it is stuck) is killed and
// the command starts the usual way. From taken on the command is the
// helper's, exactly as a freshly started helper's would be, and it goes on
// as a helper started for that command does (runCommand); the socket is
// close-on-exec, so the command never holds it. The exit message saves
// the executor the wait for the helper's own exit, which tears its
// namespaces down (about half a millisecond here). A helper serves one
// command and never another. (A helper's view of the mounts is a copy
// made when it started: the engine retires ready helpers whenever the
// executor's mount table changes.)

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// pooledArg starts the helper pre-started, waiting on fd 3;
// pooledDenySetIDArg after it says its commands' files land with another
// owner's ids (spec.DenySetID), which its seccomp filter, installed before
// any command, must know.
const (
	pooledArg          = "--pooled"
	pooledDenySetIDArg = "--deny-setid"
)

// pooledSocketFD is the pooled helper's end of its socket pair.
const pooledSocketFD = 3

// pooledTaken says the helper holds the command's descriptors.
const pooledTaken = 'k'

// pooledProceed tells the helper the placeholders are made.
const pooledProceed = 'g'

// pooledExit starts the helper's last message: the command's exit status
// (4 bytes, big-endian), sent once nothing else is left in its namespace.
const pooledExit = 'x'

// maxPooledRequest bounds a request frame: argv and environment (execve
// takes at most a few MiB of them anyway) plus the spec.
const maxPooledRequest = 8 << 20

// maxPooledFiles bounds the descriptors of one request: stdio and one
// detached mount per workspace or pinned directory.
const maxPooledFiles = 3 + 2*MaxProtectedPaths

// maxIdentityFrame bounds the ready frame.
const maxIdentityFrame = 4 << 10

// Errors of pooled helpers.
var (
	// ErrPooledHelperGone: the helper died, or did not answer in time;
	// the command did not start.
	ErrPooledHelperGone = errors.New("sandbox: pooled helper gone")
	// ErrPooledMismatch: this start cannot go through a pooled helper (a
	// request too large, a NUL byte); the helper is untouched and may
	// serve another.
	ErrPooledMismatch = errors.New("sandbox: start not suited to a pooled helper")
	// ErrPooledStale: the helper is of another shape (user namespace
	// mapping) or helper binary than the Launch needs now.
	ErrPooledStale = errors.New("sandbox: pooled helper of another shape or helper binary")
)

// PooledHelper is a helper started ahead of any command, waiting for one.
type PooledHelper struct {
	// Cmd is the helper process: wait for it as for a helper started per
	// command (it exits with the command's status).
	Cmd  *exec.Cmd
	conn *net.UnixConn
	user *User // its shape
	path string
}

// StartPooledHelper starts a helper for commands that run as user (nil:
// the executor's own ids). more adds to its clone attributes (the engine
// sets the cgroup). It returns at once; AwaitReady waits for the helper.
func StartPooledHelper(user *User, more func(*syscall.SysProcAttr)) (*PooledHelper, error) {
	bin, err := self()
	if err != nil {
		return nil, fmt.Errorf("%w: cannot locate the helper binary: %v", ErrCannotEnforce, err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: socket pair for a pooled helper: %w", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "pooled-helper")
	theirs := os.NewFile(uintptr(fds[1]), "pooled-helper-peer")
	defer theirs.Close()
	fc, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, fmt.Errorf("sandbox: pooled helper socket: %w", err)
	}
	args := []string{HelperName, pooledArg}
	if user != nil {
		args = append(args, pooledDenySetIDArg)
	}
	cmd := &exec.Cmd{Path: bin, Args: args, Env: []string{}, Dir: "/", ExtraFiles: []*os.File{theirs}}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	usernsAttr(cmd.SysProcAttr, user)
	if more != nil {
		more(cmd.SysProcAttr)
	}
	if err := cmd.Start(); err != nil {
		fc.Close()
		return nil, fmt.Errorf("sandbox: starting a pooled helper: %w", err)
	}
	return &PooledHelper{Cmd: cmd, conn: fc.(*net.UnixConn), user: copyUser(user), path: bin}, nil
}

// AwaitReady waits until the helper's runtime is up and checks that it is
// of this build. On an error the helper is of no use: Discard it.
func (h *PooledHelper) AwaitReady(timeout time.Duration) error {
	h.conn.SetReadDeadline(time.Now().Add(timeout))
	defer h.conn.SetReadDeadline(time.Time{})
	id, err := readFrame(h.conn, maxIdentityFrame)
	if err != nil {
		return fmt.Errorf("%w: waiting for it to start: %v", ErrPooledHelperGone, err)
	}
	if !sameIdentity(string(id), Identity()) {
		return fmt.Errorf("%w: %s", ErrHelperMismatch, h.path)
	}
	return nil
}

// Fits reports whether l can run in this helper: a helper in its own
// namespaces (not a full-access or namespace-less start), the same user
// mapping, and the helper binary the sandbox uses now.
func (h *PooledHelper) Fits(l Launch) bool {
	if !l.namespaced || h.path != HelperPath() {
		return false
	}
	return SameUser(h.user, l.User)
}

// Hand sends the helper its command: argv as Prepared.Argv (HelperName,
// "--", the command), the command's environment, its stdin, stdout and
// stderr (for a terminal, the terminal three times: it becomes the
// controlling one), and l's descriptors (the kernel holds copies once
// Hand returns). Then call l.Hold, Taken and Proceed. On an error the
// command did not start: start it another way, and Discard the helper
// (ErrPooledMismatch: it may serve another command).
func (h *PooledHelper) Hand(l Launch, argv, env []string, stdio [3]*os.File, tty bool, timeout time.Duration) error {
	if !h.Fits(l) {
		return ErrPooledStale
	}
	// A NUL in argv or the environment is refused by the usual start
	// with its own error: leave it to it.
	for _, list := range [][]string{argv, env} {
		for _, a := range list {
			if strings.IndexByte(a, 0) >= 0 {
				return fmt.Errorf("%w: a NUL byte in argv or the environment", ErrPooledMismatch)
			}
		}
	}
	req := pooledRequest{Spec: l.sp, Argv: argv, Env: lastOfEachName(env), Tty: tty, Files: 3 + len(l.Files)}
	if req.Files > maxPooledFiles {
		return fmt.Errorf("%w: %d descriptors, at most %d", ErrPooledMismatch, req.Files, maxPooledFiles)
	}
	body := req.encode(nil)
	if len(body) > maxPooledRequest {
		return fmt.Errorf("%w: a request of %d bytes, at most %d", ErrPooledMismatch, len(body), maxPooledRequest)
	}
	fds := make([]int, 0, req.Files)
	for _, f := range stdio {
		fds = append(fds, int(f.Fd()))
	}
	for _, f := range l.Files {
		fds = append(fds, int(f.Fd()))
	}
	frame := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body)))
	frame = append(frame, body...)
	deadline := time.Now().Add(timeout)
	h.conn.SetDeadline(deadline)
	defer h.conn.SetDeadline(time.Time{})
	n, _, err := h.conn.WriteMsgUnix(frame, unix.UnixRights(fds...), nil)
	if err == nil && n < len(frame) {
		_, err = h.conn.Write(frame[n:])
	}
	if err != nil {
		return fmt.Errorf("%w: sending the command: %v", ErrPooledHelperGone, err)
	}
	return nil
}

// Taken waits until the helper holds the command's descriptors. On an
// error the command did not start (ErrPooledHelperGone): Discard the
// helper and start the command another way.
func (h *PooledHelper) Taken(timeout time.Duration) error {
	h.conn.SetReadDeadline(time.Now().Add(timeout))
	defer h.conn.SetReadDeadline(time.Time{})
	var b [1]byte
	if _, err := io.ReadFull(h.conn, b[:]); err != nil || b[0] != pooledTaken {
		return fmt.Errorf("%w: no answer to the command: %v", ErrPooledHelperGone, err)
	}
	return nil
}

// Proceed tells the helper that l's placeholders are made (Launch.Hold):
// it may protect them now. Without it the helper waits; a helper gone
// meanwhile ends the command as a killed helper does.
func (h *PooledHelper) Proceed() {
	h.conn.SetWriteDeadline(time.Now().Add(time.Second))
	h.conn.Write([]byte{pooledProceed})
	h.conn.SetWriteDeadline(time.Time{})
}

// Exited waits for the exit status of the command handed to the helper;
// ok is false if the helper ended without one (killed): then its own wait
// status says how it ended. Either way, Cmd.Wait reaps the helper.
func (h *PooledHelper) Exited() (code int, ok bool) {
	defer h.conn.Close()
	var msg [5]byte
	if _, err := io.ReadFull(h.conn, msg[:]); err != nil || msg[0] != pooledExit {
		return 0, false
	}
	return int(binary.BigEndian.Uint32(msg[1:])), true
}

// lastOfEachName keeps, of each NAME=value, the last (as os/exec does for
// a helper started per command: the executor's markers, appended after the
// client's variables, win), in the order of those last ones.
func lastOfEachName(env []string) []string {
	seen := make(map[string]bool, len(env))
	out := make([]string, 0, len(env))
	for i := len(env) - 1; i >= 0; i-- {
		if env[i] == "" {
			continue
		}
		name, _, _ := strings.Cut(env[i], "=")
		if !seen[name] {
			seen[name] = true
			out = append(out, env[i])
		}
	}
	slices.Reverse(out)
	return out
}

// Discard kills a helper that will not run a command and reaps it.
func (h *PooledHelper) Discard() {
	h.conn.Close()
	h.Cmd.Process.Kill()
	h.Cmd.Wait()
}

// readFrame reads one length-prefixed frame of at most max bytes.
func readFrame(r io.Reader, max int) ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(head[:])
	if n > uint32(max) {
		return nil, fmt.Errorf("a frame of %d bytes, at most %d", n, max)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// --- helper side -------------------------------------------------------------

// pooledMain is a pre-started helper: it readies itself, waits for its one
// command on fd 3 and runs it. It never returns. Before it says taken it
// fails silently (the executor starts the command the usual way); after,
// the command's stderr says why anything failed, as for any helper.
func pooledMain() {
	if os.Getpid() != 1 {
		helperFail("a pooled helper must be the init of its own PID namespace")
	}
	caught := catchSignals()
	sock := os.NewFile(pooledSocketFD, "pooled-helper")
	// Warm what the command's set-up uses first, while nobody waits: the
	// request's decoder, the build identity.
	decodePooledRequest(pooledRequest{Spec: spec{ReadOnly: []string{"/a"}, Mounts: []mountSpec{{Path: "/b", FD: 3}}}, Argv: []string{"a"}, Env: []string{"A=b"}, Files: 4}.encode(nil))
	id := Identity()
	pre := prebuild(len(os.Args) > 2 && os.Args[2] == pooledDenySetIDArg)
	pre.placeholdersMade = func() error {
		var b [1]byte
		if _, err := io.ReadFull(sock, b[:]); err != nil || b[0] != pooledProceed {
			return fmt.Errorf("pooled helper: the executor did not finish the set-up: %v", err)
		}
		return nil
	}
	<-caught
	ready := binary.BigEndian.AppendUint32(nil, uint32(len(id)))
	if _, err := sock.Write(append(ready, id...)); err != nil {
		os.Exit(helperExitCode)
	}
	req, fds, err := receiveRequest(sock)
	if err != nil {
		// Nothing was taken: the executor starts the command the usual
		// way, with nothing of this helper's on the command's stderr.
		os.Exit(helperExitCode)
	}
	for i := range 3 {
		if err := unix.Dup3(fds[i], i, 0); err != nil {
			os.Exit(helperExitCode)
		}
		unix.Close(fds[i])
	}
	// The spec numbers a mount's descriptor as a per-command helper
	// inherits it (3, 4, …); here they arrived wherever the kernel put
	// them.
	for i := range req.Spec.Mounts {
		if fd := req.Spec.Mounts[i].FD; fd != 0 {
			if fd < 3 || fd >= len(fds) {
				os.Exit(helperExitCode)
			}
			req.Spec.Mounts[i].FD = fds[fd]
		}
	}
	if req.Tty {
		if err := unix.IoctlSetInt(0, unix.TIOCSCTTY, 0); err != nil {
			os.Exit(helperExitCode)
		}
	}
	if _, err := sock.Write([]byte{pooledTaken}); err != nil {
		os.Exit(helperExitCode)
	}
	// What the command's PATH lookup reads: this process's environment.
	os.Unsetenv("PATH")
	for _, kv := range req.Env {
		if v, ok := cutEnv(kv, "PATH"); ok {
			os.Setenv("PATH", v)
		}
	}
	runCommand(req.Spec, req.Argv[1:], req.Env, caught, func(code int) {
		sock.Write(binary.BigEndian.AppendUint32([]byte{pooledExit}, uint32(code)))
	}, pre)
}

func cutEnv(kv, key string) (string, bool) {
	if len(kv) > len(key) && kv[:len(key)] == key && kv[len(key)] == '=' {
		return kv[len(key)+1:], true
	}
	return "", false
}

// receiveRequest reads the request frame and the descriptors sent with it
// (close-on-exec until placed).
func receiveRequest(sock *os.File) (pooledRequest, []int, error) {
	var req pooledRequest
	fd := int(sock.Fd())
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4*maxPooledFiles))
	var n, oobn, flags int
	var err error
	for {
		n, oobn, flags, _, err = unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return req, nil, fmt.Errorf("reading the request: %w", err)
	}
	if flags&unix.MSG_CTRUNC != 0 {
		return req, nil, errors.New("too many descriptors with the request")
	}
	var fds []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return req, nil, fmt.Errorf("reading the request's descriptors: %w", err)
		}
		for _, m := range msgs {
			got, err := unix.ParseUnixRights(&m)
			if err != nil {
				return req, nil, fmt.Errorf("reading the request's descriptors: %w", err)
			}
			fds = append(fds, got...)
		}
	}
	if n < 4 {
		return req, fds, fmt.Errorf("a request of %d bytes", n)
	}
	size := binary.BigEndian.Uint32(buf[:4])
	if size > maxPooledRequest {
		return req, fds, fmt.Errorf("a request of %d bytes, at most %d", size, maxPooledRequest)
	}
	body := buf[4:n]
	if int(size) > len(body) {
		// The rest follows as plain stream bytes.
		body = append(make([]byte, 0, size), body...)
		rest := make([]byte, int(size)-len(body))
		if _, err := io.ReadFull(sock, rest); err != nil {
			return req, fds, fmt.Errorf("reading the request: %w", err)
		}
		body = append(body, rest...)
	} else if int(size) < len(body) {
		return req, fds, errors.New("bytes after the request")
	}
	if req, err = decodePooledRequest(body); err != nil {
		return req, fds, err
	}
	if len(fds) != req.Files || len(fds) < 3 {
		return req, fds, fmt.Errorf("%d descriptors with a request that names %d", len(fds), req.Files)
	}
	if len(req.Argv) < 2 {
		return req, fds, errors.New("no command in the request")
	}
	return req, fds, nil
}
