//go:build amd64 || arm64

package sandbox

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/outpost-exec/outpost/internal/testdeps"
)

// Installing a seccomp filter cannot be undone, so every filtered operation
// runs in a child: the test binary re-executes itself with
// -test.run=^TestSeccompHelperProcess$ and these environment variables. The
// child installs the filter (unless filter=none), performs the operation and
// prints one "SECCOMP-RESULT: <result>" line, where <result> is "ok", an
// errno name such as "EPERM", or a free-form description.
const (
	envSeccompOp     = "OUTPOST_SECCOMP_TEST_OP"
	envSeccompFilter = "OUTPOST_SECCOMP_TEST_FILTER" // none | base | denynet
	seccompResultTag = "SECCOMP-RESULT: "
	// helperTTYFD is the fd number under which a pty slave is passed to the
	// child (ExtraFiles[0]).
	helperTTYFD = 3
)

func TestSeccompHelperProcess(t *testing.T) {
	op := os.Getenv(envSeccompOp)
	if op == "" {
		return // not a helper invocation
	}
	result := func() string {
		switch f := os.Getenv(envSeccompFilter); f {
		case "none":
		case "base", "denynet":
			if err := prepareSeccompOp(op); err != nil {
				return "setup-error: " + err.Error()
			}
			if err := InstallSeccomp(SeccompOptions{DenyNetwork: f == "denynet"}); err != nil {
				return "install-error: " + err.Error()
			}
		default:
			return "setup-error: bad filter " + f
		}
		return runSeccompOp(op)
	}()
	fmt.Printf("%s%s\n", seccompResultTag, result)
	os.Exit(0)
}

// errnoResult renders a syscall outcome.
func errnoResult(err error) string {
	if err == nil {
		return "ok"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if name := unix.ErrnoName(errno); name != "" {
			return name
		}
		return fmt.Sprintf("errno-%d", int(errno))
	}
	return "error: " + err.Error()
}

func rawResult(r, _ uintptr, errno syscall.Errno) string {
	if errno != 0 {
		return errnoResult(errno)
	}
	if int(r) >= 0 {
		unix.Close(int(r)) // most probed calls return an fd
	}
	return "ok"
}

func socketResult(domain, typ int) string {
	fd, err := unix.Socket(domain, typ|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
	}
	return errnoResult(err)
}

func socketpairResult(domain, typ int) string {
	fds, err := unix.Socketpair(domain, typ|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
	}
	return errnoResult(err)
}

// lockedThreads holds OS threads created before the filter is installed
// (scenario "tsync"); each runs the function it receives and reports back.
var lockedThreads struct {
	work []chan func() string
	res  chan string
}

// prepareSeccompOp runs before InstallSeccomp in the filtered child.
func prepareSeccompOp(op string) error {
	if op != "tsync" {
		return nil
	}
	const n = 6
	lockedThreads.res = make(chan string)
	ready := make(chan struct{})
	for i := 0; i < n; i++ {
		ch := make(chan func() string)
		lockedThreads.work = append(lockedThreads.work, ch)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread stays dedicated
			ready <- struct{}{}
			for f := range ch {
				lockedThreads.res <- f()
			}
		}()
	}
	for i := 0; i < n; i++ {
		<-ready
	}
	return nil
}

func runSeccompOp(op string) string {
	switch op {
	case "socket-inet-stream":
		return socketResult(unix.AF_INET, unix.SOCK_STREAM)
	case "socket-inet6-dgram":
		return socketResult(unix.AF_INET6, unix.SOCK_DGRAM)
	case "socket-netlink":
		return socketResult(unix.AF_NETLINK, unix.SOCK_RAW)
	case "socket-packet":
		return socketResult(unix.AF_PACKET, unix.SOCK_RAW)
	case "socket-unix":
		return socketResult(unix.AF_UNIX, unix.SOCK_STREAM)
	case "socketpair-unix":
		return socketpairResult(unix.AF_UNIX, unix.SOCK_STREAM)
	case "socketpair-inet":
		return socketpairResult(unix.AF_INET, unix.SOCK_STREAM)
	case "socket-inet-highbits":
		// The kernel reads the domain as an int: 1<<32|AF_INET is AF_INET.
		return rawResult(unix.RawSyscall(unix.SYS_SOCKET, 1<<32|unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0))
	case "ptrace-traceme":
		_, _, errno := unix.RawSyscall(unix.SYS_PTRACE, unix.PTRACE_TRACEME, 0, 0)
		return errnoResult(errnoOrNil(errno))
	case "process-vm-readv", "process-vm-writev":
		src := make([]byte, 7)
		copy(src, "seccomp") // writable: a []byte literal may live in read-only data
		dst := make([]byte, len(src))
		local := []unix.Iovec{{Base: &dst[0]}}
		local[0].SetLen(len(dst))
		remote := []unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&src[0])), Len: len(src)}}
		var err error
		if op == "process-vm-readv" {
			_, err = unix.ProcessVMReadv(os.Getpid(), local, remote, 0)
		} else {
			_, err = unix.ProcessVMWritev(os.Getpid(), local, remote, 0)
		}
		runtime.KeepAlive(src)
		return errnoResult(err)
	case "io-uring-setup":
		var params [120]byte // struct io_uring_params, zeroed
		return rawResult(unix.RawSyscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params)), 0))
	case "io-uring-enter":
		return rawResult(unix.RawSyscall6(unix.SYS_IO_URING_ENTER, ^uintptr(0), 0, 0, 0, 0, 0))
	case "io-uring-register":
		return rawResult(unix.RawSyscall6(unix.SYS_IO_URING_REGISTER, ^uintptr(0), 0, 0, 0, 0, 0))
	case "tiocsti", "tiocsti-highbits":
		c := byte('x')
		req := uintptr(unix.TIOCSTI)
		if op == "tiocsti-highbits" {
			req |= 1 << 32 // the kernel truncates the request to unsigned int
		}
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, helperTTYFD, req, uintptr(unsafe.Pointer(&c)))
		return errnoResult(errnoOrNil(errno))
	case "tioclinux":
		sub := byte(12) // TIOCL_GETSHIFTSTATE; irrelevant on a pty
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, helperTTYFD, unix.TIOCLINUX, uintptr(unsafe.Pointer(&sub)))
		return errnoResult(errnoOrNil(errno))
	case "tiocgwinsz":
		_, err := unix.IoctlGetWinsize(helperTTYFD, unix.TIOCGWINSZ)
		return errnoResult(err)
	case "exec-true":
		if err := exec.Command("/bin/true").Run(); err != nil {
			return "error: " + err.Error()
		}
		return "ok"
	case "exec-sh-denied-socket":
		// The exec'd program is this test binary again, started through
		// sh -c, and it does not install a filter itself.
		cmd := exec.Command("/bin/sh", "-c", `exec "$0" -test.run='^TestSeccompHelperProcess$'`, os.Args[0])
		cmd.Env = append(os.Environ(), envSeccompOp+"=socket-inet-stream", envSeccompFilter+"=none", helperGORACE())
		out, err := cmd.Output()
		if err != nil {
			return fmt.Sprintf("error: %v (output %q)", err, out)
		}
		res, ok := parseSeccompResult(out)
		if !ok {
			return fmt.Sprintf("error: no result line in %q", out)
		}
		return res
	case "tsync":
		return tsyncOp()
	case "x32-getpid":
		if runtime.GOARCH != "amd64" {
			return "unsupported"
		}
		return rawResult(unix.RawSyscall(x32SyscallBit|unix.SYS_GETPID, 0, 0, 0))
	case "i386-socket":
		return i386Socket()
	}
	return "setup-error: unknown op " + op
}

func errnoOrNil(errno syscall.Errno) error {
	if errno == 0 {
		return nil
	}
	return errno
}

// tsyncOp checks that threads that existed before InstallSeccomp (locked in
// prepareSeccompOp) and threads created afterwards are all filtered, and that
// a multi-threaded Go program keeps working.
func tsyncOp() string {
	var problems []string
	// Every thread must report the filter mode and no_new_privs.
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil || len(tasks) < 2 {
		return fmt.Sprintf("error: expected several threads, got %d (%v)", len(tasks), err)
	}
	for _, st := range tasks {
		data, err := os.ReadFile(st)
		if err != nil {
			continue // thread exited
		}
		if !bytes.Contains(data, []byte("\nSeccomp:\t2\n")) || !bytes.Contains(data, []byte("\nNoNewPrivs:\t1\n")) {
			problems = append(problems, st+": not filtered or no NoNewPrivs")
		}
	}
	// Threads created before the filter must have it (TSYNC).
	for i, ch := range lockedThreads.work {
		ch <- func() string { return socketResult(unix.AF_INET, unix.SOCK_STREAM) }
		if r := <-lockedThreads.res; r != "EPERM" {
			problems = append(problems, fmt.Sprintf("pre-existing thread %d: socket(AF_INET) = %s", i, r))
		}
	}
	// New goroutines on new threads work and are filtered.
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			sum := 0
			for j := 0; j < 10000; j++ {
				sum += j
			}
			var msgs []string
			if r := socketResult(unix.AF_UNIX, unix.SOCK_STREAM); r != "ok" {
				msgs = append(msgs, "socket(AF_UNIX) = "+r)
			}
			if r := socketResult(unix.AF_INET, unix.SOCK_STREAM); r != "EPERM" {
				msgs = append(msgs, "socket(AF_INET) = "+r)
			}
			if sum != 49995000 {
				msgs = append(msgs, "bad sum")
			}
			mu.Lock()
			problems = append(problems, msgs...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(problems) > 0 {
		return "error: " + strings.Join(problems, "; ")
	}
	return "ok"
}

// i386Socket issues socket(AF_INET, SOCK_STREAM, 0) through the i386 compat
// entry point (int $0x80, syscall 359) from this 64-bit process, which the
// kernel reports with AUDIT_ARCH_I386. Go has no way to do that, so a few
// bytes of machine code are placed in an executable mapping and called
// through a func value. int $0x80 clobbers r8-r15 (r14 is Go's g register),
// so the stub saves them.
func i386Socket() string {
	if runtime.GOARCH != "amd64" {
		return "unsupported"
	}
	mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return "setup-error: mmap: " + err.Error()
	}
	const resultOff = 512
	resultAddr := uint64(uintptr(unsafe.Pointer(&mem[resultOff])))
	code := []byte{
		0x41, 0x50, 0x41, 0x51, 0x41, 0x52, 0x41, 0x53, // push r8..r11
		0x41, 0x54, 0x41, 0x55, 0x41, 0x56, 0x41, 0x57, // push r12..r15
		0x53, 0x55, // push rbx; push rbp
		0xb8, 0x67, 0x01, 0x00, 0x00, // mov eax, 359 (i386 socket)
		0xbb, 0x02, 0x00, 0x00, 0x00, // mov ebx, AF_INET
		0xb9, 0x01, 0x00, 0x00, 0x00, // mov ecx, SOCK_STREAM
		0x31, 0xd2, // xor edx, edx
		0xcd, 0x80, // int 0x80
		0x48, 0xbf, 0, 0, 0, 0, 0, 0, 0, 0, // movabs rdi, resultAddr
		0x89, 0x07, // mov [rdi], eax
		0x5d, 0x5b, // pop rbp; pop rbx
		0x41, 0x5f, 0x41, 0x5e, 0x41, 0x5d, 0x41, 0x5c, // pop r15..r12
		0x41, 0x5b, 0x41, 0x5a, 0x41, 0x59, 0x41, 0x58, // pop r11..r8
		0xc3, // ret
	}
	binary.LittleEndian.PutUint64(code[bytes.Index(code, []byte{0x48, 0xbf})+2:], resultAddr)
	copy(mem, code)
	entry := uintptr(unsafe.Pointer(&mem[0]))
	closure := &entry
	fn := *(*func())(unsafe.Pointer(&closure))
	fn()
	ret := int32(binary.LittleEndian.Uint32(mem[resultOff:]))
	if ret >= 0 {
		unix.Close(int(ret))
		return "ok"
	}
	return errnoResult(syscall.Errno(-ret))
}

func parseSeccompResult(out []byte) (string, bool) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), seccompResultTag); ok {
			return rest, true
		}
	}
	return "", false
}

// helperOpts tweaks the child process.
type helperOpts struct {
	tty *os.File // passed as fd 3 and made the controlling terminal
}

// runSeccompHelper runs op in a child under filter (none|base|denynet) and
// returns its result line. A child killed by a signal yields "signal: <sig>".
func runSeccompHelper(t *testing.T, filter, op string, ho helperOpts) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSeccompHelperProcess$")
	cmd.Env = append(os.Environ(), envSeccompOp+"="+op, envSeccompFilter+"="+filter, helperGORACE())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if ho.tty != nil {
		cmd.ExtraFiles = []*os.File{ho.tty}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: helperTTYFD}
	}
	out, err := cmd.Output()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) && exitErr.ProcessState != nil {
		if ws, ok := exitErr.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "signal: " + ws.Signal().String()
		}
	}
	if err != nil {
		t.Fatalf("helper %s/%s failed: %v\nstdout: %s\nstderr: %s", filter, op, err, out, stderr.Bytes())
	}
	res, ok := parseSeccompResult(out)
	if !ok {
		t.Fatalf("helper %s/%s printed no result line\nstdout: %s\nstderr: %s", filter, op, out, stderr.Bytes())
	}
	if strings.HasPrefix(res, "setup-error") || strings.HasPrefix(res, "install-error") {
		t.Fatalf("helper %s/%s: %s", filter, op, res)
	}
	return res
}

func requireSeccomp(t *testing.T) {
	t.Helper()
	if !SeccompSupported() {
		testdeps.Missing(t, "sandbox", "seccomp filters are not supported by this kernel (SeccompSupported() == false)")
	}
}

func expectHelper(t *testing.T, filter, op, want string, ho helperOpts) {
	t.Helper()
	if got := runSeccompHelper(t, filter, op, ho); got != want {
		t.Errorf("%s under filter %q: got %s, want %s", op, filter, got, want)
	}
}

func TestSeccompDenyNetworkBlocksNonUnixSockets(t *testing.T) {
	t.Parallel()
	requireSeccomp(t)
	for _, op := range []string{
		"socket-inet-stream", "socket-inet6-dgram", "socket-netlink", "socket-packet",
		"socketpair-inet", "socket-inet-highbits",
	} {
		t.Run(op, func(t *testing.T) { expectHelper(t, "denynet", op, "EPERM", helperOpts{}) })
	}
}

func TestSeccompDenyNetworkStillAllowsUnixSockets(t *testing.T) {
	t.Parallel()
	requireSeccomp(t)
	for _, op := range []string{"socket-unix", "socketpair-unix"} {
		t.Run(op, func(t *testing.T) { expectHelper(t, "denynet", op, "ok", helperOpts{}) })
	}
}

func TestSeccompWithoutDenyNetworkAllowsInetSockets(t *testing.T) {
	t.Parallel()
	requireSeccomp(t)
	for _, op := range []string{"socket-inet-stream", "socket-inet6-dgram"} {
		t.Run(op, func(t *testing.T) {
			control := runSeccompHelper(t, "none", op, helperOpts{})
			if got := runSeccompHelper(t, "base", op, helperOpts{}); got != control {
				t.Errorf("%s: base filter gives %s, unfiltered gives %s", op, got, control)
			}
		})
	}
	expectHelper(t, "base", "socket-inet-stream", "ok", helperOpts{})
}

func TestSeccompDeniesPtraceTraceme(t *testing.T) {
	t.Parallel()
	requireSeccomp(t)
	expectHelper(t, "base", "ptrace-traceme", "EPERM", helperOpts{})
}

func TestSeccompDeniesProcessVMReadvWritev(t *testing.T) {
	t.Parallel()
	requireSeccomp(t)
	for _, op := range []string{"process-vm-readv", "process-vm-writev"} {
		t.Run(op, func(t *testing.T) {
			if c := runSeccompHelper(t, "none", op, helperOpts{}); c != "ok" {
				t.Logf("unfiltered %s gives %s", op, c)
			}
			expectHelper(t, "base", op, "EPERM", helperOpts{})
		})
	}
}

func TestSeccompDeniesIoUring(t *testing.T) {
	t.Parallel()
	requireSeccomp(t)
	for _, op := range []string{"io-uring-setup", "io-uring-enter", "io-uring-register"} {
		t.Run(op, func(t *testing.T) {
			control := runSeccompHelper(t, "none", op, helperOpts{})
			got := runSeccompHelper(t, "base", op, helperOpts{})
			t.Logf("unfiltered %s: %s, filtered: %s", op, control, got)
			if got == "EPERM" || (got == "ENOSYS" && control == "ENOSYS") {
				return
			}
			t.Errorf("%s under filter: got %s, want EPERM (unfiltered: %s)", op, got, control)
		})
	}
}

func TestSeccompDeniesTIOCSTIAndTIOCLINUXOnPty(t *testing.T) {
	t.Parallel()
	requireSeccomp(t)
	for _, op := range []string{"tiocsti", "tiocsti-highbits", "tioclinux", "tiocgwinsz"} {
		t.Run(op, func(t *testing.T) {
			ptmx, tty, err := pty.Open()
			if err != nil {
				t.Fatalf("cannot open a pty: %v", err)
			}
			defer ptmx.Close()
			defer tty.Close()
			control := runSeccompHelper(t, "none", op, helperOpts{tty: tty})
			got := runSeccompHelper(t, "base", op, helperOpts{tty: tty})
			t.Logf("unfiltered %s: %s, filtered: %s", op, control, got)
			want := "EPERM"
			if op == "tiocgwinsz" {
				want = "ok" // ordinary tty ioctls must keep working
			}
			if got != want {
				t.Errorf("%s on a pty under filter: got %s, want %s", op, got, want)
			}
		})
	}
}

func TestSeccompFilteredChildCanStillExecTrue(t *testing.T) {
	t.Parallel()
	requireSeccomp(t)
	expectHelper(t, "denynet", "exec-true", "ok", helperOpts{})
}

func TestSeccompTSyncFiltersAllGoThreads(t *testing.T) {
	t.Parallel()
	requireSeccomp(t)
	expectHelper(t, "denynet", "tsync", "ok", helperOpts{})
}

func TestSeccompFilterSurvivesExecve(t *testing.T) {
	t.Parallel()
	requireSeccomp(t)
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("/bin/sh not available")
	}
	// Control: without a filter the exec'd probe can create the socket.
	expectHelper(t, "none", "exec-sh-denied-socket", "ok", helperOpts{})
	expectHelper(t, "denynet", "exec-sh-denied-socket", "EPERM", helperOpts{})
}

func TestSeccompDeniesX32ABIBypass(t *testing.T) {
	t.Parallel()
	requireSeccomp(t)
	if runtime.GOARCH != "amd64" {
		t.Skip("x32 ABI exists only on x86_64")
	}
	control := runSeccompHelper(t, "none", "x32-getpid", helperOpts{})
	t.Logf("unfiltered x32 getpid: %s", control)
	expectHelper(t, "base", "x32-getpid", "EPERM", helperOpts{})
}

func TestSeccompDeniesI386CompatBypass(t *testing.T) {
	t.Parallel()
	requireSeccomp(t)
	if runtime.GOARCH != "amd64" {
		t.Skip("int $0x80 probe is x86_64-only")
	}
	control := runSeccompHelper(t, "none", "i386-socket", helperOpts{})
	if control != "ok" {
		testdeps.Missing(t, "ia32", "i386 compat syscalls unavailable here (unfiltered int $0x80 socket: %s)", control)
	}
	// Even with DenyNetwork off, every non-native-arch syscall is refused.
	expectHelper(t, "base", "i386-socket", "EPERM", helperOpts{})
	expectHelper(t, "denynet", "i386-socket", "EPERM", helperOpts{})
}

// seccompData is the input of the BPF program (struct seccomp_data).
type seccompData struct {
	nr   uint32
	arch uint32
	args [6]uint64
}

// runBPF interprets the subset of classic BPF emitted by bpfBuilder.
func runBPF(t *testing.T, prog []unix.SockFilter, d seccompData) uint32 {
	t.Helper()
	var buf [64]byte
	binary.LittleEndian.PutUint32(buf[0:], d.nr)
	binary.LittleEndian.PutUint32(buf[4:], d.arch)
	for i, a := range d.args {
		binary.LittleEndian.PutUint64(buf[16+8*i:], a)
	}
	var acc uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			acc = binary.LittleEndian.Uint32(buf[in.K:])
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
			if acc == in.K {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K:
			if acc >= in.K {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case unix.BPF_RET | unix.BPF_K:
			return in.K
		default:
			t.Fatalf("unexpected BPF opcode %#x at %d", in.Code, pc)
		}
	}
	t.Fatal("BPF program fell off the end")
	return 0
}

// TestSeccompProgramDecisions checks the generated program without
// installing it, including inputs a live test cannot easily produce.
func TestSeccompProgramDecisions(t *testing.T) {
	t.Parallel()
	arch, hasX32, err := nativeAuditArch()
	if err != nil {
		t.Fatal(err)
	}
	const foreignArch = 0x40000003 // AUDIT_ARCH_I386; also stands for any non-native arch
	type tc struct {
		name    string
		denyNet bool
		d       seccompData
		want    uint32
	}
	cases := []tc{
		{"getpid allowed", false, seccompData{nr: unix.SYS_GETPID, arch: arch}, retAllow},
		{"foreign arch getpid denied", false, seccompData{nr: unix.SYS_GETPID, arch: foreignArch}, retEPERM},
		{"aarch32 arch denied", false, seccompData{nr: 20, arch: 0x40000028}, retEPERM},
		{"ptrace denied", false, seccompData{nr: unix.SYS_PTRACE, arch: arch}, retEPERM},
		{"io_uring_register denied", false, seccompData{nr: unix.SYS_IO_URING_REGISTER, arch: arch}, retEPERM},
		{"TIOCSTI denied", false, seccompData{nr: unix.SYS_IOCTL, arch: arch, args: [6]uint64{0, unix.TIOCSTI}}, retEPERM},
		{"TIOCSTI high bits denied", false, seccompData{nr: unix.SYS_IOCTL, arch: arch, args: [6]uint64{0, 0xffffffff00000000 | unix.TIOCSTI}}, retEPERM},
		{"TIOCLINUX denied", false, seccompData{nr: unix.SYS_IOCTL, arch: arch, args: [6]uint64{0, unix.TIOCLINUX}}, retEPERM},
		{"TIOCGWINSZ allowed", false, seccompData{nr: unix.SYS_IOCTL, arch: arch, args: [6]uint64{0, unix.TIOCGWINSZ}}, retAllow},
		{"TIOCSTI value as fd allowed", false, seccompData{nr: unix.SYS_IOCTL, arch: arch, args: [6]uint64{unix.TIOCSTI, unix.TIOCGWINSZ}}, retAllow},
		{"inet socket allowed without DenyNetwork", false, seccompData{nr: unix.SYS_SOCKET, arch: arch, args: [6]uint64{unix.AF_INET}}, retAllow},
		{"inet socket denied", true, seccompData{nr: unix.SYS_SOCKET, arch: arch, args: [6]uint64{unix.AF_INET}}, retEPERM},
		{"inet socket high bits denied", true, seccompData{nr: unix.SYS_SOCKET, arch: arch, args: [6]uint64{1<<32 | unix.AF_INET}}, retEPERM},
		{"unix socket allowed", true, seccompData{nr: unix.SYS_SOCKET, arch: arch, args: [6]uint64{unix.AF_UNIX}}, retAllow},
		{"unix socketpair allowed", true, seccompData{nr: unix.SYS_SOCKETPAIR, arch: arch, args: [6]uint64{unix.AF_UNIX}}, retAllow},
		{"inet6 socketpair denied", true, seccompData{nr: unix.SYS_SOCKETPAIR, arch: arch, args: [6]uint64{unix.AF_INET6}}, retEPERM},
		{"netlink socket denied", true, seccompData{nr: unix.SYS_SOCKET, arch: arch, args: [6]uint64{unix.AF_NETLINK}}, retEPERM},
		{"connect still allowed", true, seccompData{nr: unix.SYS_CONNECT, arch: arch}, retAllow},
	}
	if hasX32 {
		cases = append(cases,
			tc{"x32 getpid denied", false, seccompData{nr: x32SyscallBit | unix.SYS_GETPID, arch: arch}, retEPERM},
			tc{"x32 socket denied", false, seccompData{nr: x32SyscallBit | unix.SYS_SOCKET, arch: arch, args: [6]uint64{unix.AF_UNIX}}, retEPERM},
		)
	}
	for _, c := range cases {
		prog, err := buildSeccompProgram(SeccompOptions{DenyNetwork: c.denyNet})
		if err != nil {
			t.Fatal(err)
		}
		if got := runBPF(t, prog, c.d); got != c.want {
			t.Errorf("%s: got %#x, want %#x", c.name, got, c.want)
		}
	}
}

// helperGORACE disables the race runtime's default 1 s sleep at exit
// (atexit_sleep_ms), which would otherwise dominate every helper run under
// -race; it is ignored by binaries built without the race detector.
func helperGORACE() string {
	return strings.TrimSpace("GORACE=" + os.Getenv("GORACE") + " atexit_sleep_ms=0")
}
