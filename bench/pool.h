// pool.h: a persistent pool of spinning worker threads for the benchmarks' all-cores figures, so
// that a timed batch pays a wake-up through a shared counter, not a thread's creation.
//
//   cfd_pool* p = cfd_pool_start(T);       // T threads: the caller is worker 0, T - 1 spin; NULL
//                                          // when they cannot be had
//   cfd_pool_run(p, fn, arg);              // fn(arg, t, T) on every worker, returns when all have
//   cfd_pool_stop(p);
#ifndef CHAINFD_BENCH_POOL_H
#define CHAINFD_BENCH_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

typedef void (*cfd_pool_fn)(void* arg, int t, int T);

typedef struct cfd_pool {
  int T;
  pthread_t* tid;
  atomic_int generation, done, stop;
  cfd_pool_fn fn;
  void* arg;
} cfd_pool;

typedef struct { cfd_pool* p; int t; } cfd_pool_slot;

static void* cfd_pool_worker(void* a) {
  cfd_pool_slot* s = a;
  cfd_pool* p = s->p;
  int t = s->t, seen = 0;
  free(s);
  for (;;) {
    int g;
    while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen)
      if (atomic_load_explicit(&p->stop, memory_order_relaxed)) return NULL;
    seen = g;
    p->fn(p->arg, t, p->T);
    atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
  }
}

// NULL when the memory or a thread cannot be had (the threads already started stopped again)
static cfd_pool* cfd_pool_start(int T) {
  cfd_pool* p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->T = T < 1 ? 1 : T;
  p->tid = calloc(p->T, sizeof(pthread_t));
  if (!p->tid) {
    free(p);
    return NULL;
  }
  for (int t = 1; t < p->T; t++) {
    cfd_pool_slot* s = malloc(sizeof *s);
    if (s) s->p = p, s->t = t;
    if (!s || pthread_create(&p->tid[t], NULL, cfd_pool_worker, s)) {
      free(s);
      atomic_store(&p->stop, 1);
      for (int k = 1; k < t; k++) pthread_join(p->tid[k], NULL);
      free(p->tid);
      free(p);
      return NULL;
    }
  }
  return p;
}

static void cfd_pool_run(cfd_pool* p, cfd_pool_fn fn, void* arg) {
  p->fn = fn, p->arg = arg;
  atomic_store_explicit(&p->done, 0, memory_order_relaxed);
  atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
  fn(arg, 0, p->T);
  while (atomic_load_explicit(&p->done, memory_order_acquire) < p->T - 1) {
  }
}

static void cfd_pool_stop(cfd_pool* p) {
  atomic_store(&p->stop, 1);
  for (int t = 1; t < p->T; t++) pthread_join(p->tid[t], NULL);
  free(p->tid);
  free(p);
}

#endif  // CHAINFD_BENCH_POOL_H
