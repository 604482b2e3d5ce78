/*
 * How much a pause before a spawn costs the spawn, on this host: the time
 * to start `/bin/sh -c true` and wait for it, back to back (as the spawn
 * floor of `sandboxd bench` measures it) and after a pause (as every
 * round-trip sample comes, 25 ms after the one before); started with
 * fork, or with clone(CLONE_VM | CLONE_VFORK) as the supervisor does, and
 * with or without the supervisor's reset of every signal handler first.
 *
 * Run it in a container of the sandbox image, as the commands' user
 * (see "Where a RunCommand's time goes" in BENCHMARKS.md):
 *
 *   gcc -O2 -static -o /tmp/spawn_pause docs/measurements/spawn_pause.c
 *   docker run --rm --network none -u 1000:1000 -v /tmp/spawn_pause:/p:ro \
 *     sandboxd-default:latest sh -c '/p 300 0 fork; /p 100 25000 fork;
 *       /p 300 0 vfork; /p 100 25000 vfork; /p 100 25000 vfork reset'
 *
 * Arguments: samples, pause in microseconds, fork|vfork, and `reset` to
 * reset the 62 catchable signals' handlers in the child before exec.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;
static char *shell[] = {"/bin/sh", "-c", "true", NULL};
static int reset;

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int child(void *unused) {
    (void)unused;
    if (reset) {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        for (int sig = 1; sig < 65; sig++)
            if (sig != SIGKILL && sig != SIGSTOP)
                sigaction(sig, &dfl, NULL);
    }
    execve(shell[0], shell, environ);
    _exit(127);
}

static int by_value(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s SAMPLES PAUSE_US fork|vfork [reset]\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[1]), pause_us = atoi(argv[2]);
    int vfork_like = strcmp(argv[3], "vfork") == 0;
    reset = argc > 4;
    long long *took = calloc(n, sizeof *took);
    static char stack[64 * 1024];
    for (int i = 0; i < n; i++) {
        if (pause_us)
            usleep(pause_us);
        long long start = now_ns();
        pid_t pid = vfork_like
            ? clone(child, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, NULL)
            : fork();
        if (pid == 0)
            child(NULL);
        waitpid(pid, NULL, 0);
        took[i] = now_ns() - start;
    }
    qsort(took, n, sizeof *took, by_value);
    printf("%s, pause %d us%s: p50 %lld us (p10 %lld, p90 %lld)\n", argv[3], pause_us,
           reset ? ", handlers reset" : "", took[n / 2] / 1000, took[n / 10] / 1000,
           took[n * 9 / 10] / 1000);
    return 0;
}
