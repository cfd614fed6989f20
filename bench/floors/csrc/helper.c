// A stand-in for a sandbox helper that is not a Go program, to measure
// what such a helper would cost (bench/floors). It does the same system
// work as outpost-sandbox for a workspace-write policy — private mounts,
// its own /proc in a PID namespace, no_new_privs, a Landlock ruleset with
// the default system paths and devices, rlimits, capability bounding-set
// drops and a seccomp filter of the same length — and then either forks
// the command and reaps as the PID namespace's init, or (with
// FLOOR_EXEC=1) execs it directly. It is a measuring tool: its seccomp
// filter allows everything, and it is never used to run commands.
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif

struct ruleset_attr { unsigned long long fs, net; };
struct path_beneath { unsigned long long allowed; int parent_fd; } __attribute__((packed));

static void add_rules(int rs, const char **paths, unsigned long long access) {
  for (int i = 0; paths[i]; i++) {
    int fd = open(paths[i], O_PATH | O_CLOEXEC);
    if (fd < 0) continue;
    struct path_beneath pb = {access, fd};
    syscall(SYS_landlock_add_rule, rs, 1 /* PATH_BENEATH */, &pb, 0);
    close(fd);
  }
}

int main(int argc, char **argv, char **envp) {
  if (argc < 2) return 2;
  if (mount("", "/", NULL, MS_REC | MS_PRIVATE, NULL)) return 120;
  if (getpid() == 1 && mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL)) return 121;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) return 122;

  int abi = syscall(SYS_landlock_create_ruleset, NULL, 0, 1 /* VERSION */);
  if (abi < 1) return 123;
  struct ruleset_attr ra = {abi >= 3 ? (1ULL << 15) - 1 : abi == 2 ? (1ULL << 14) - 1 : (1ULL << 13) - 1, abi >= 4 ? 3 : 0};
  int rs = syscall(SYS_landlock_create_ruleset, &ra, abi >= 4 ? sizeof ra : sizeof ra.fs, 0);
  if (rs < 0) return 124;
  const char *ro[] = {"/bin", "/sbin", "/usr", "/lib", "/lib64", "/etc", "/proc", "/sys", "/opt", "/", 0};
  const char *rw[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/pts", "/dev/ptmx", "/tmp", 0};
  add_rules(rs, ro, 1 | 4 | 8 /* execute, read file, read dir */);
  add_rules(rs, rw, 2 | 4 /* write file, read file */);
  if (syscall(SYS_landlock_restrict_self, rs, 0)) return 125;
  close(rs);

  struct rlimit none = {0, 0}, files = {4096, 4096};
  setrlimit(RLIMIT_CORE, &none);
  setrlimit(RLIMIT_NOFILE, &files);
  for (int cap = 0; cap < 16; cap++) prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);

  struct sock_filter f[22];
  for (int i = 0; i < 21; i++) f[i] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
  f[21] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  struct sock_fprog prog = {22, f};
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog)) return 126;

  if (getenv("FLOOR_EXEC")) {
    execve(argv[1], argv + 1, envp);
    return 127;
  }
  pid_t pid = fork();
  if (pid == 0) {
    execve(argv[1], argv + 1, envp);
    _exit(127);
  }
  int st;
  for (;;) {
    pid_t w = wait(&st);
    if (w == pid) break;
    if (w < 0) return 126;
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
