// What a pipe write costs the writer, by what its reader is doing: the measurement behind
// docs/BENCHMARKS.md, "Where the 74 µs go" (the engine worker's reply is such a write).
// A 140-byte line every GAP µs, timed in the writer, with the reader process
//   0: blocked in read (asleep in the pipe's wait queue: the write wakes it),
//   1: polling a non-blocking pipe every POLL µs (never asleep in the pipe),
//   2: spinning on a non-blocking pipe.
// The writer between two writes
//   sleep: sleeps (its own CPU goes idle too),
//   busy:  computes, as the engine's step thread does (pinned to CPU 0),
//   busy2: computes, and a second process computes on CPU 1 as the engine's second thread
//          does; its loops per second tell what the reader's wake-ups take from it.
// It also prints the CPU time the reader used (its own, not the interrupts that woke it).
// Hand-written (C, no crate): it measures the kernel and hypervisor, not our code.
//
//   gcc -O2 -o /tmp/bench-wakeup scripts/bench-wakeup.c
//   /tmp/bench-wakeup MODE [GAP_US=2000] [WRITES=2000] [sleep|busy|busy2] [POLL_US=100]
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
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

static void sleep_us(long us) {
    struct timespec s = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&s, 0);
}

static void pin_to(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODE(0|1|2) [GAP_US] [WRITES] [sleep|busy|busy2] [POLL_US]\n",
                argv[0]);
        return 2;
    }
    int mode = atoi(argv[1]);
    long gap_us = argc > 2 ? atol(argv[2]) : 2000;
    int writes = argc > 3 ? atoi(argv[3]) : 2000;
    const char *writer = argc > 4 ? argv[4] : "sleep";
    long poll_us = argc > 5 ? atol(argv[5]) : 100;
    int busy = strncmp(writer, "busy", 4) == 0;
    int second = strcmp(writer, "busy2") == 0;

    // the second engine thread's loop count, shared with it
    volatile unsigned long *loops =
        mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    volatile int *stop = (volatile int *)(loops + 8);
    pid_t other = 0;
    if (second) {
        other = fork();
        if (other == 0) {
            // ends with the writer however it ends (a failed write, SIGPIPE, a kill)
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            pin_to(1);
            while (!*stop) {
                for (int i = 0; i < 1000; i++) __asm__ volatile("");
                (*loops)++;
            }
            _exit(0);
        }
    }

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
                sleep_us(poll_us);
            }
        }
        _exit(0);
    }
    close(fd[0]);
    if (busy) pin_to(0);
    char line[140];
    memset(line, 'x', sizeof line - 1);
    line[sizeof line - 1] = '\n';
    double *took = malloc(writes * sizeof(double));
    double started = now_us();
    unsigned long loops_before = *loops;
    for (int i = 0; i < writes; i++) {
        if (busy) {
            double t = now_us();
            while (now_us() - t < gap_us) {
            }
        } else {
            sleep_us(gap_us);
        }
        double t0 = now_us();
        if (write(fd[1], line, sizeof line) != sizeof line) return 1;
        took[i] = now_us() - t0;
    }
    double secs = (now_us() - started) / 1e6;
    unsigned long loops_after = *loops;
    close(fd[1]);
    struct rusage used;
    wait4(pid, 0, 0, &used);
    double reader_us = used.ru_utime.tv_sec * 1e6 + used.ru_utime.tv_usec +
                       used.ru_stime.tv_sec * 1e6 + used.ru_stime.tv_usec;
    *stop = 1;
    if (other) waitpid(other, 0, 0);
    qsort(took, writes, sizeof(double), by_value);
    const char *what[] = {"reader blocked in read", "reader polls", "reader spins"};
    printf("mode %d (%s", mode, what[mode % 3]);
    if (mode == 1) printf(" every %ld us", poll_us);
    printf("), writer %s, a write every %ld us: median %.1f us, p90 %.1f us", writer, gap_us,
           took[writes / 2], took[writes * 9 / 10]);
    printf("; the reader used %.2f %% of a CPU", reader_us / (secs * 1e6) * 100);
    if (second) printf("; second thread %.0f k loops/s", (loops_after - loops_before) / secs / 1e3);
    printf("\n");
    return 0;
}
