/* Core-to-core round trip: how long one cache line takes to go from one CPU to another and
 * back, as two threads pinned to CPUs A and B hand a counter to each other.
 *
 * bench/machine.py builds and runs this before benchmark runs. On this project's machine kind
 * (2 vCPUs under KVM) the host places the two vCPUs near each other or far apart and moves
 * them: on 2026-11-29 the round trip was 105-125, 210 or 395-420 ns at different minutes, and a
 * `--threads 2` run of 4 KiB I/O took 0.45-0.53 s at the first two and 0.68-0.70 s at the last
 * (one thread: 0.64-0.70 s throughout). Two-thread figures mean little without it.
 *
 * Usage: core_latency CPU_A CPU_B [ROUND_TRIPS]; prints the median of 5 trials in ns.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Atomic long flag;
static long trips;
static int cpu_b;

static int pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *answer(void *arg) {
    (void)arg;
    if (pin(cpu_b) != 0) {
        return (void *)1;
    }
    for (long i = 0; i < trips; i++) {
        while (atomic_load_explicit(&flag, memory_order_acquire) != 2 * i + 1) {
        }
        atomic_store_explicit(&flag, 2 * i + 2, memory_order_release);
    }
    return NULL;
}

static double trial(void) {
    pthread_t t;
    struct timespec a, b;
    void *bad = NULL;
    atomic_store(&flag, 0);
    if (pthread_create(&t, NULL, answer, NULL) != 0) {
        return -1;
    }
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < trips; i++) {
        atomic_store_explicit(&flag, 2 * i + 1, memory_order_release);
        while (atomic_load_explicit(&flag, memory_order_acquire) != 2 * i + 2) {
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    pthread_join(t, &bad);
    if (bad != NULL) {
        return -1;
    }
    return ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / trips;
}

static int by_value(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s CPU_A CPU_B [ROUND_TRIPS]\n", argv[0]);
        return 2;
    }
    int cpu_a = atoi(argv[1]);
    cpu_b = atoi(argv[2]);
    trips = argc > 3 ? atol(argv[3]) : 200000;
    if (trips <= 0 || pin(cpu_a) != 0) {
        fprintf(stderr, "cannot run on CPU %d\n", cpu_a);
        return 1;
    }
    double ns[5];
    for (int i = 0; i < 5; i++) {
        ns[i] = trial();
        if (ns[i] < 0) {
            fprintf(stderr, "cannot run on CPU %d\n", cpu_b);
            return 1;
        }
    }
    qsort(ns, 5, sizeof ns[0], by_value);
    printf("%.1f\n", ns[2]);
    return 0;
}
