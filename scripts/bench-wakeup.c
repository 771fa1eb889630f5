// What a pipe write costs the writer, by what its reader is doing: the measurement behind
// docs/BENCHMARKS.md, "Where the 74 µs go" (the engine worker's reply is such a write).
// A 140-byte line every GAP µs, timed in the writer, with the reader process
//   0: blocked in read (asleep in the pipe's wait queue: the write wakes it),
//   1: polling a non-blocking pipe every 100 µs (never asleep in the pipe),
//   2: spinning on a non-blocking pipe.
// Hand-written (C, no crate): it measures the kernel and hypervisor, not our code.
//
//   gcc -O2 -o /tmp/bench-wakeup scripts/bench-wakeup.c
//   /tmp/bench-wakeup MODE [GAP_US=2000] [WRITES=2000]
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODE(0|1|2) [GAP_US] [WRITES]\n", argv[0]);
        return 2;
    }
    int mode = atoi(argv[1]);
    long gap_us = argc > 2 ? atol(argv[2]) : 2000;
    int writes = argc > 3 ? atoi(argv[3]) : 2000;
    int fd[2];
    if (pipe(fd) != 0) return 1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[1]);
        char buf[4096];
        long got = 0;
        if (mode > 0) fcntl(fd[0], F_SETFL, O_NONBLOCK);
        while (got < 140L * writes) {
            ssize_t r = read(fd[0], buf, sizeof buf);
            if (r > 0) {
                got += r;
            } else if (r == 0) {
                break;
            } else if (mode == 1) {
                struct timespec s = {0, 100000};
                nanosleep(&s, 0);
            }
        }
        _exit(0);
    }
    close(fd[0]);
    char line[140];
    memset(line, 'x', sizeof line - 1);
    line[sizeof line - 1] = '\n';
    double *took = malloc(writes * sizeof(double));
    for (int i = 0; i < writes; i++) {
        struct timespec s = {gap_us / 1000000, (gap_us % 1000000) * 1000};
        nanosleep(&s, 0);
        double t0 = now_us();
        if (write(fd[1], line, sizeof line) != sizeof line) return 1;
        took[i] = now_us() - t0;
    }
    close(fd[1]);
    waitpid(pid, 0, 0);
    qsort(took, writes, sizeof(double), by_value);
    const char *what[] = {"reader blocked in read", "reader polls every 100 us", "reader spins"};
    printf("mode %d (%s), a write every %ld us: median %.1f us, p90 %.1f us\n", mode,
           what[mode % 3], gap_us, took[writes / 2], took[writes * 9 / 10]);
    return 0;
}
