//go:build amd64 || arm64

package sandbox

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SeccompOptions selects the rules of the seccomp filter installed by
// InstallSeccomp.
type SeccompOptions struct {
	// DenyNetwork: socket() and socketpair() only for AF_UNIX (any other
	// domain → EPERM); so no TCP/UDP/raw/netlink/packet socket can be created.
	DenyNetwork bool
	// DenySetID refuses to give a file a set-user-ID or set-group-ID mode
	// (chmod family, open/creat/mknod with such a mode: EPERM) and makes
	// openat2, whose mode seccomp cannot see, fail with ENOSYS so callers
	// fall back to openat. A command whose files land on disk with another
	// owner's ids (an ID-mapped workspace) could otherwise leave a
	// set-user-ID program of that owner behind.
	DenySetID bool
	// ThisThreadOnly installs the filter on the calling thread only (no
	// TSYNC): enough, and cheaper, when that thread is about to execve.
	// The caller must hold runtime.LockOSThread and never release it.
	ThisThreadOnly bool
}

// Offsets into struct seccomp_data (include/uapi/linux/seccomp.h):
//
//	struct seccomp_data {
//		int   nr;                   // offset 0
//		__u32 arch;                 // offset 4
//		__u64 instruction_pointer;  // offset 8
//		__u64 args[6];              // offset 16
//	};
//
// Both supported architectures are little-endian, so the low 32 bits of
// args[i] are at 16+8*i.
const (
	seccompDataNr   = 0
	seccompDataArch = 4
	seccompDataArgs = 16

	// x32SyscallBit is __X32_SYSCALL_BIT: x32 ABI syscalls arrive with
	// AUDIT_ARCH_X86_64 but with this bit set in the syscall number.
	x32SyscallBit = 0x40000000

	retAllow  = unix.SECCOMP_RET_ALLOW
	retEPERM  = unix.SECCOMP_RET_ERRNO | (uint32(unix.EPERM) & unix.SECCOMP_RET_DATA)
	retENOSYS = unix.SECCOMP_RET_ERRNO | (uint32(unix.ENOSYS) & unix.SECCOMP_RET_DATA)

	// setIDBits are S_ISUID|S_ISGID; createFlags are O_CREAT|__O_TMPFILE,
	// the flags under which open's mode argument is read.
	setIDBits    = unix.S_ISUID | unix.S_ISGID
	createFlags  = unix.O_CREAT | 0x400000
	sysOpenat2   = 437
	sysFchmodat2 = 452
)

// modeCall is a syscall that takes a file mode: the argument index of the
// mode, and of the open flags that say whether the mode is used (-1: it
// always is).
type modeCall struct {
	nr          uint32
	mode, flags int
}

// alwaysDenied are the syscalls refused (EPERM) in every mode.
var alwaysDenied = []uint32{
	unix.SYS_PTRACE,
	unix.SYS_PROCESS_VM_READV,
	unix.SYS_PROCESS_VM_WRITEV,
	unix.SYS_IO_URING_SETUP,
	unix.SYS_IO_URING_ENTER,
	unix.SYS_IO_URING_REGISTER,
}

// deniedIoctls are ioctl request numbers refused (EPERM) in every mode. The
// request argument is an unsigned int in the kernel, so only its low 32 bits
// are compared (a 64-bit compare could be bypassed by setting high bits).
var deniedIoctls = []uint32{
	unix.TIOCSTI,
	unix.TIOCLINUX,
}

// nativeAuditArch returns the AUDIT_ARCH_* value of the running binary.
func nativeAuditArch() (arch uint32, x32 bool, err error) {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, true, nil
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, false, nil
	}
	return 0, false, fmt.Errorf("sandbox: seccomp filter not implemented for GOARCH %s", runtime.GOARCH)
}

// bpfLabel names a jump target in bpfBuilder.
type bpfLabel int

// bpfInsn is an instruction whose jump targets may still be symbolic.
type bpfInsn struct {
	f      unix.SockFilter
	jt, jf bpfLabel // 0 = fall through (offset 0)
}

// bpfBuilder assembles a classic BPF program with forward jumps to labels.
type bpfBuilder struct {
	insns  []bpfInsn
	labels map[bpfLabel]int
	next   bpfLabel
}

func (b *bpfBuilder) newLabel() bpfLabel {
	b.next++
	return b.next
}

func (b *bpfBuilder) mark(l bpfLabel) {
	if b.labels == nil {
		b.labels = make(map[bpfLabel]int)
	}
	b.labels[l] = len(b.insns)
}

// loadAbs loads the 32-bit word at offset off of seccomp_data into A.
func (b *bpfBuilder) loadAbs(off uint32) {
	b.insns = append(b.insns, bpfInsn{f: unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off}})
}

// and emits "A &= k".
func (b *bpfBuilder) and(k uint32) {
	b.insns = append(b.insns, bpfInsn{f: unix.SockFilter{Code: unix.BPF_ALU | unix.BPF_AND | unix.BPF_K, K: k}})
}

// jump emits "if A <op> k goto jt else goto jf" (op is unix.BPF_JEQ, BPF_JGE, ...).
func (b *bpfBuilder) jump(op uint16, k uint32, jt, jf bpfLabel) {
	b.insns = append(b.insns, bpfInsn{f: unix.SockFilter{Code: unix.BPF_JMP | op | unix.BPF_K, K: k}, jt: jt, jf: jf})
}

func (b *bpfBuilder) ret(k uint32) {
	b.insns = append(b.insns, bpfInsn{f: unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: k}})
}

func (b *bpfBuilder) assemble() ([]unix.SockFilter, error) {
	out := make([]unix.SockFilter, len(b.insns))
	resolve := func(pc int, l bpfLabel) (uint8, error) {
		if l == 0 {
			return 0, nil
		}
		target, ok := b.labels[l]
		if !ok {
			return 0, fmt.Errorf("sandbox: bpf label %d not placed", l)
		}
		off := target - pc - 1
		if off < 0 || off > 255 {
			return 0, fmt.Errorf("sandbox: bpf jump offset %d out of range", off)
		}
		return uint8(off), nil
	}
	for pc, in := range b.insns {
		f := in.f
		var err error
		if f.Jt, err = resolve(pc, in.jt); err != nil {
			return nil, err
		}
		if f.Jf, err = resolve(pc, in.jf); err != nil {
			return nil, err
		}
		out[pc] = f
	}
	if len(out) == 0 || len(out) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("sandbox: bpf program length %d invalid", len(out))
	}
	return out, nil
}

// buildSeccompProgram returns the BPF program for opts on the native
// architecture. The layout is:
//
//	ld arch;  arch != native          → EPERM   (i386/x32-compat/AArch32 entry points)
//	ld nr;    nr >= 0x40000000 (amd64) → EPERM   (x32 ABI)
//	nr ∈ alwaysDenied                  → EPERM
//	nr == ioctl:  low32(arg1) ∈ {TIOCSTI, TIOCLINUX} → EPERM, else ALLOW
//	DenyNetwork && nr ∈ {socket, socketpair}: low32(arg0) == AF_UNIX → ALLOW, else EPERM
//	default                            → ALLOW
func buildSeccompProgram(opts SeccompOptions) ([]unix.SockFilter, error) {
	arch, hasX32, err := nativeAuditArch()
	if err != nil {
		return nil, err
	}
	var b bpfBuilder
	allow, deny, enosys := b.newLabel(), b.newLabel(), b.newLabel()
	ioctlCheck, sockCheck := b.newLabel(), b.newLabel()

	b.loadAbs(seccompDataArch)
	b.jump(unix.BPF_JEQ, arch, 0, deny)
	b.loadAbs(seccompDataNr)
	if hasX32 {
		b.jump(unix.BPF_JGE, x32SyscallBit, deny, 0)
	}
	for _, nr := range alwaysDenied {
		b.jump(unix.BPF_JEQ, nr, deny, 0)
	}
	b.jump(unix.BPF_JEQ, unix.SYS_IOCTL, ioctlCheck, 0)
	var modeChecks []bpfLabel
	if opts.DenySetID {
		b.jump(unix.BPF_JEQ, sysOpenat2, enosys, 0)
		for range setIDCalls {
			l := b.newLabel()
			modeChecks = append(modeChecks, l)
		}
		for i, c := range setIDCalls {
			b.jump(unix.BPF_JEQ, c.nr, modeChecks[i], 0)
		}
	}
	if opts.DenyNetwork {
		b.jump(unix.BPF_JEQ, unix.SYS_SOCKET, sockCheck, 0)
		b.jump(unix.BPF_JEQ, unix.SYS_SOCKETPAIR, sockCheck, 0)
	}
	b.ret(retAllow)

	b.mark(ioctlCheck)
	b.loadAbs(seccompDataArgs + 8*1) // low 32 bits of the request
	for _, req := range deniedIoctls {
		b.jump(unix.BPF_JEQ, req, deny, 0)
	}
	b.ret(retAllow)

	if opts.DenyNetwork {
		b.mark(sockCheck)
		b.loadAbs(seccompDataArgs + 8*0) // domain (int): low 32 bits, as the kernel reads it
		b.jump(unix.BPF_JEQ, unix.AF_UNIX, allow, deny)
	}

	for i, c := range setIDCalls {
		if !opts.DenySetID {
			break
		}
		b.mark(modeChecks[i])
		if c.flags >= 0 {
			b.loadAbs(seccompDataArgs + 8*uint32(c.flags))
			b.and(createFlags)
			b.jump(unix.BPF_JEQ, 0, allow, 0)
		}
		b.loadAbs(seccompDataArgs + 8*uint32(c.mode))
		b.and(setIDBits)
		b.jump(unix.BPF_JEQ, 0, allow, deny)
	}

	b.mark(allow)
	b.ret(retAllow)
	b.mark(deny)
	b.ret(retEPERM)
	b.mark(enosys)
	b.ret(retENOSYS)
	return b.assemble()
}

// InstallSeccomp installs the seccomp filter selected by opts on every thread
// of the calling process (SECCOMP_FILTER_FLAG_TSYNC), setting no_new_privs
// first if needed. The filter is inherited across fork/clone and execve and
// cannot be removed.
//
// Rules (denied calls fail with EPERM; the process is never killed):
//   - any syscall whose audit arch is not the native one (x86_64 or aarch64),
//     and on x86_64 any x32-ABI syscall (number with __X32_SYSCALL_BIT);
//   - ptrace, process_vm_readv, process_vm_writev, io_uring_setup,
//     io_uring_enter, io_uring_register;
//   - ioctl with request TIOCSTI or TIOCLINUX (low 32 bits compared);
//   - with DenyNetwork: socket and socketpair unless the domain is AF_UNIX.
//
// Everything else is allowed.
// buildSeccompNetworkProgram is the network part of a DenyNetwork filter
// alone: stacked on a filter built without DenyNetwork (the kernel runs
// every filter of a thread and takes the strictest answer), the two deny
// what the DenyNetwork filter denies.
func buildSeccompNetworkProgram() ([]unix.SockFilter, error) {
	arch, _, err := nativeAuditArch()
	if err != nil {
		return nil, err
	}
	var b bpfBuilder
	allow, deny, sockCheck := b.newLabel(), b.newLabel(), b.newLabel()
	b.loadAbs(seccompDataArch)
	b.jump(unix.BPF_JEQ, arch, 0, deny)
	b.loadAbs(seccompDataNr)
	b.jump(unix.BPF_JEQ, unix.SYS_SOCKET, sockCheck, 0)
	b.jump(unix.BPF_JEQ, unix.SYS_SOCKETPAIR, sockCheck, 0)
	b.ret(retAllow)
	b.mark(sockCheck)
	b.loadAbs(seccompDataArgs + 8*0)
	b.jump(unix.BPF_JEQ, unix.AF_UNIX, allow, deny)
	b.mark(allow)
	b.ret(retAllow)
	b.mark(deny)
	b.ret(retEPERM)
	return b.assemble()
}

func InstallSeccomp(opts SeccompOptions) error {
	prog, err := buildSeccompProgram(opts)
	if err != nil {
		return err
	}
	return installSeccompProgram(prog, opts.ThisThreadOnly)
}

// installSeccompProgram installs a program buildSeccompProgram made.
func installSeccompProgram(prog []unix.SockFilter, thisThreadOnly bool) error {

	// no_new_privs is per thread; set it on the thread that calls seccomp().
	// TSYNC then propagates both the filter and no_new_privs to all threads.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	if err != nil {
		return fmt.Errorf("sandbox: prctl(PR_GET_NO_NEW_PRIVS): %w", err)
	}
	if nnp != 1 {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("sandbox: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
		}
	}

	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	var flags uintptr = unix.SECCOMP_FILTER_FLAG_TSYNC
	if thisThreadOnly {
		flags = 0
	}
	r, _, errno := unix.RawSyscall(unix.SYS_SECCOMP,
		unix.SECCOMP_SET_MODE_FILTER, flags,
		uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return fmt.Errorf("sandbox: seccomp(SECCOMP_SET_MODE_FILTER, TSYNC): %w", errno)
	}
	if r != 0 {
		// With TSYNC a positive return is the TID of a thread that could not
		// be synchronized (it runs under a diverging filter); nothing was
		// installed.
		return fmt.Errorf("sandbox: seccomp TSYNC failed: thread %d cannot be synchronized", r)
	}
	return nil
}

// SeccompSupported reports whether this kernel accepts seccomp filters
// installed with the seccomp(2) syscall (needed for TSYNC) on a supported
// architecture.
func SeccompSupported() bool {
	if _, _, err := nativeAuditArch(); err != nil {
		return false
	}
	// EINVAL: kernel built without CONFIG_SECCOMP(_FILTER).
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		return false
	}
	action := uint32(unix.SECCOMP_RET_ERRNO)
	_, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0,
		uintptr(unsafe.Pointer(&action)))
	switch {
	case errno == 0:
		return true
	case errors.Is(errno, unix.EINVAL):
		// Linux 3.17–4.13: seccomp(2) exists but lacks GET_ACTION_AVAIL.
		// A NULL program with a valid flag reaches copy_from_user → EFAULT.
		_, _, errno = unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
			unix.SECCOMP_FILTER_FLAG_TSYNC, 0)
		return errors.Is(errno, unix.EFAULT)
	default:
		// ENOSYS (no seccomp(2)) or something else (e.g. EPERM from an outer
		// sandbox that forbids seccomp itself).
		return false
	}
}
