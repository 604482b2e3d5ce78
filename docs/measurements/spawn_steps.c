/*
 * What each step the supervisor's child takes before its exec costs a
 * spawn of `/bin/sh -c true` on this host, after a pause (as every
 * round-trip sample of `sandboxd bench` comes), and what waiting for the
 * child through epoll (a pidfd and the output pipes, edge-triggered, as
 * the supervisor's runtime does) costs against a plain waitpid. The
 * variants take turns sample by sample, so the machine's drift falls on
 * all of them alike.
 *
 * Run it in a container of the sandbox image, as root (the supervisor's
 * user), with a workspace uid 1000 may enter (the host's /tmp will do):
 *
 *   gcc -O2 -static -o /tmp/spawn_steps docs/measurements/spawn_steps.c
 *   docker run --rm --network none -v /tmp/spawn_steps:/p:ro \
 *     -v /tmp:/workspace:ro sandboxd-default:latest \
 *     /p 250 25000 posix vfork vfork-sig-pg-io-oom-uid-cd vfork-uid \
 *       vfork-oom vfork-io-cd-sig vfork-sig-pg-io-oom-uid-cd-epoll
 *
 * Arguments: samples, pause in microseconds, then the variants: `posix`
 * (posix_spawn and waitpid), or `vfork` (clone(CLONE_VM | CLONE_VFORK))
 * with any of the child's steps: `sig` (handlers reset), `pg` (its own
 * process group), `io` (stdin from /dev/null, stdout and stderr to new
 * pipes), `oom` (oom_score_adj 1000), `uid` (no groups, then uid and gid
 * 1000), `cd` (into /workspace); `epoll` waits as the supervisor does.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;
static char *shell[] = {"/bin/sh", "-c", "true", NULL};
static int out[2], err[2], devnull;
static const char *variant;

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int has(const char *step) { return strstr(variant, step) != NULL; }

static int child(void *unused) {
    (void)unused;
    if (has("sig")) {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        int sigs[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGPIPE};
        for (unsigned i = 0; i < sizeof sigs / sizeof *sigs; i++)
            sigaction(sigs[i], &dfl, NULL);
    }
    if (has("pg"))
        setpgid(0, 0);
    if (has("io")) {
        dup2(devnull, 0);
        dup2(out[1], 1);
        dup2(err[1], 2);
    }
    if (has("oom")) {
        int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            if (write(fd, "1000", 4) < 0)
                _exit(126);
            close(fd);
        }
    }
    if (has("uid")) {
        syscall(SYS_setgroups, 0, NULL);
        syscall(SYS_setresgid, 1000, 1000, 1000);
        syscall(SYS_setresuid, 1000, 1000, 1000);
    }
    if (has("cd") && chdir("/workspace") != 0)
        _exit(126);
    execve(shell[0], shell, environ);
    _exit(127);
}

/* Waits for `pid` as the supervisor does: its pidfd and the read ends of
 * its pipes in one epoll set, edge-triggered, until the pidfd is ready. */
static void epoll_wait_for(pid_t pid) {
    int pidfd = syscall(SYS_pidfd_open, pid, 0), ep = epoll_create1(EPOLL_CLOEXEC);
    int fds[] = {pidfd, out[0], err[0]};
    for (int i = 0; i < 3; i++) {
        struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.fd = fds[i]};
        epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev);
    }
    for (int done = 0; !done;) {
        struct epoll_event evs[3];
        int n = epoll_wait(ep, evs, 3, -1);
        for (int i = 0; i < n; i++)
            done |= evs[i].data.fd == pidfd;
    }
    siginfo_t info;
    waitid(P_PID, pid, &info, WEXITED);
    close(pidfd);
    close(ep);
}

static long long sample(void) {
    static char stack[64 * 1024];
    long long start = now_ns();
    pid_t pid;
    if (strcmp(variant, "posix") == 0) {
        posix_spawn(&pid, shell[0], NULL, NULL, shell, environ);
        waitpid(pid, NULL, 0);
        return now_ns() - start;
    }
    if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC))
        exit(1);
    pid = clone(child, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, NULL);
    close(out[1]);
    close(err[1]);
    if (has("epoll"))
        epoll_wait_for(pid);
    else
        waitpid(pid, NULL, 0);
    close(out[0]);
    close(err[0]);
    return now_ns() - start;
}

static int by_value(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s SAMPLES PAUSE_US VARIANT...\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[1]), pause_us = atoi(argv[2]), m = argc - 3;
    devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    long long *took = calloc((size_t)n * m, sizeof *took);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++) {
            int k = (i + j) % m;
            variant = argv[3 + k];
            usleep(pause_us);
            took[k * n + i] = sample();
        }
    for (int k = 0; k < m; k++) {
        qsort(took + k * n, n, sizeof *took, by_value);
        printf("%-32s p50 %lld us\n", argv[3 + k], took[k * n + n / 2] / 1000);
    }
    return 0;
}
