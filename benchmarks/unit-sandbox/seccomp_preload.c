/* LD_PRELOAD library that puts a process under the system call filter of a rigup unit, as
   systemd would (SystemCallFilter= with SystemCallErrorNumber=EPERM): a call outside the
   allow-list (allowed.h, from syscalls-*.txt) returns -EPERM and its number is appended to
   $SANDBOX_LOG ("<pid> <nr>"). $SANDBOX_MDWE=1 adds MemoryDenyWriteExecute= (PR_SET_MDWE).
   Children inherit the filter; exec'd ones load this library again for the EPERM handler. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <ucontext.h>
#include <unistd.h>
#include "allowed.h"

#ifndef PR_SET_MDWE
#define PR_SET_MDWE 65
#define PR_MDWE_REFUSE_EXEC_GAIN 1
#endif

static int log_fd = -1;

static void on_sigsys(int sig, siginfo_t *info, void *vctx) {
    ucontext_t *ctx = vctx;
    char buf[64];
    int n = snprintf(buf, sizeof buf, "%d %d\n", (int)getpid(), info->si_syscall);
    if (log_fd >= 0 && write(log_fd, buf, n) < 0) log_fd = -1;
    ctx->uc_mcontext.gregs[REG_RAX] = -EPERM;
    (void)sig;
}

__attribute__((constructor)) static void install(void) {
    const char *path = getenv("SANDBOX_LOG");
    if (path) log_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigsys;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(SIGSYS, &sa, NULL);
    if (getenv("SANDBOX_INSTALLED")) return; /* inherited: the handler is all it needs */
    size_t n = sizeof ALLOWED / sizeof ALLOWED[0];
    struct sock_filter *f = calloc(2 * n + 8, sizeof *f);
    size_t i = 0;
    f[i++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
    f[i++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
    f[i++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
    f[i++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
    for (size_t k = 0; k < n; k++) {
        f[i++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ALLOWED[k], 0, 1);
        f[i++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    }
    f[i++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP);
    struct sock_fprog prog = {.len = (unsigned short)i, .filter = f};
    if (getenv("SANDBOX_MDWE") && prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0)) {
        perror("sandbox: PR_SET_MDWE");
        _exit(99);
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
        perror("sandbox: seccomp");
        _exit(99);
    }
    setenv("SANDBOX_INSTALLED", "1", 1);
}
