/* Probes for bench/smallnets_threads.py (loaded with ctypes): how far apart, in cache terms,
 * the two CPUs the calling thread and a new thread run on are (one-way latency of a cache
 * line handed back and forth), and which CPU the calling thread is on. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <time.h>

static volatile int ball __attribute__((aligned(64)));
static int rounds;

static void *pong(void *unused) {
  (void)unused;
  for (int i = 0; i < rounds; i++) {
    while (ball != 2 * i + 1) {
    }
    ball = 2 * i + 2;
  }
  return 0;
}

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Nanoseconds one way: the calling thread and a new (unpinned) thread hand a cache line
 * back and forth `n` times (the first 100 not timed); about 30 ns when the two vCPUs share
 * a cache, 160 ns and more when they do not. A negative result: no thread. */
double probe_pingpong_ns(int n) {
  pthread_t thread;
  ball = 0;
  rounds = n;
  if (n <= 100 || pthread_create(&thread, 0, pong, 0) != 0) return -1.0;
  double start = 0.0;
  for (int i = 0; i < n; i++) {
    if (i == 100) start = seconds();
    while (ball != 2 * i) {
    }
    ball = 2 * i + 1;
  }
  while (ball != 2 * n) {
  }
  double end = seconds();
  pthread_join(thread, 0);
  return (end - start) * 1e9 / (n - 100) / 2;
}

int probe_cpu(void) { return sched_getcpu(); }
