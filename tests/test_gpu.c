// Every GPU back end against the CPU references on the scenes and on generated chains up to 4096
// links, for batches of 1, 7 and 1000 states, with and without the joint-diagonal term; and the
// GPU API's errors. Exit 77 (ctest: SKIPPED) with no GPU.
// The judge is cfd_fd_reference (high-precision, itself checked against MuJoCo by chainfd check);
// each GPU back end's distance to its CPU twin is printed too. Chains longer than MuJoCo compiles
// (depth 1023) repeat the links of a generated 1000-link chain (cfd_chain_tile).
#define _POSIX_C_SOURCE 200809L  // nanosleep
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "chain_gen.h"
#include "gpu.h"
#include "cfa_blocks.h"
#include "dca.h"
#include "mj_chain.h"
#include "mj_random.h"
#include "test_util.h"

// What cuda.cfa must do with a case: solve it; solve its batches of 1 and 7 states and solve or
// refuse its batch of 1000 (among 1000 random states of 1024 links some are too ill-conditioned
// for its refinement, and the batch is refused as a whole); solve or refuse any batch (random
// states of 4096 links); or refuse the model (a link with a singular spatial inertia). Where its
// refinement does not converge it must refuse, never return an inaccurate answer. Past
// CFD_GPU_CFA_MAX_N links it refuses every chain (kernels/gpu.h).
enum { CFA_SOLVES, CFA_SMALL_BATCHES, CFA_MAY_NOT_CONVERGE, CFA_REFUSES };

typedef struct {
  const char* model;
  int batches[3];
  double tol;
  int tile;  // > 0: a chain of this many links repeating the model's links
  int cfa;
} gpu_case;

static const gpu_case cases[] = {
    {CHAINFD_SCENES_DIR "/arm7.xml", {1, 7, 1000}, 1e-10, 0, CFA_SOLVES},
    {CHAINFD_SCENES_DIR "/double_pendulum.xml", {1, 7, 1000}, 1e-10, 0, CFA_SOLVES},
    {CHAINFD_SCENES_DIR "/slide_hinge.xml", {1, 7, 1000}, 1e-10, 0, CFA_REFUSES},
    {"chain:10,random=1,seed=31,armature=0.05", {1, 7, 1000}, 1e-10, 0, CFA_SOLVES},
    {"chain:33,random=1,seed=32,slide=0.3,armature=0.02", {1, 7, 1000}, 1e-10, 0, CFA_SOLVES},
    {"chain:200,random=1,seed=33,armature=0.01", {1, 7, 1000}, 1e-10, 0, CFA_SOLVES},
    {"chain:200,random=1,seed=34,slide=0.2", {1, 7, 0}, 1e-10, 0, CFA_SOLVES},
    // (2e-9: the ABA's own rounding on this ill-conditioned chain is about 1e-9 in its worst of
    // 1000 states, and moves with the model's last bits: cuda.abia's worst went from 5.7e-10 to
    // 1.05e-9, its CPU twin's from 6.9e-10 alike, when the adapter's screws moved by one unit in
    // the last place (a cross product contracted to FMA differently); the kernel against its twin
    // stays 7e-11)
    {"chain:1000,random=1,seed=35,armature=0.01", {1, 7, 1000}, 2e-9, 1024, CFA_SMALL_BATCHES},
    {"chain:1000,random=1,seed=36,armature=0.01", {1, 3, 0}, 1e-8, 4096, CFA_MAY_NOT_CONVERGE},
    // a uniform chain at cuda.cfa's cap, where CFA converges; and of 4096 links (refused by
    // cuda.cfa as past the cap, solved by the others)
    {"chain:10,armature=0.05", {1, 7, 0}, 1e-8, CFD_GPU_CFA_MAX_N, CFA_SOLVES},
    {"chain:10,armature=0.05", {1, 7, 0}, 1e-8, 4096, CFA_SOLVES},
};

static void fill_random(cfd_rng* r, double* x, int count, double lo, double hi) {
  for (int k = 0; k < count; k++) x[k] = cfd_rng_uniform(r, lo, hi);
}

// A test's chain: the model (a scene file or a chain:... spec) loaded and converted, its links
// repeated to `tile` links when tile > 0. The model is handed back in *m where the test needs it
// (m NULL: deleted). A failure is a test failure; returns 0 when the chain is there.
static int load_chain(const char* model, int tile, mjModel** m, cfd_chain* c) {
  char err[1024];
  mjModel* mm = cfd_load_model(model, err, sizeof err);
  EXPECT(mm != NULL, "%s: %s", model, err);
  if (m) *m = NULL;
  if (!mm) return 1;
  int st = cfd_chain_from_model(mm, c, err, sizeof err);
  EXPECT(st == 0, "%s: %s", model, err);
  if (!st && tile > 0) {
    cfd_chain base = *c;
    st = cfd_chain_tile(&base, tile, c);
    EXPECT(st == 0, "%s: tiled to %d links", model, tile);
    cfd_chain_free(&base);
  }
  if (m && !st) *m = mm;
  else mj_deleteModel(mm);
  return st;
}

// B random states of c from seed (q, qd, tau and a joint-diagonal term ex, [B][n] each) and, when
// ref is given, their reference qacc with ex.
static void random_states(const cfd_chain* c, unsigned seed, int B, double* q, double* qd,
                          double* tau, double* ex, double* ref) {
  int n = c->n;
  cfd_rng r = {seed};
  fill_random(&r, q, B * n, -3.14, 3.14);
  fill_random(&r, qd, B * n, -2, 2);
  fill_random(&r, tau, B * n, -1, 1);
  fill_random(&r, ex, B * n, 0, 0.1);
  for (int b = 0; ref && b < B; b++)
    cfd_fd_reference(c, q + b * n, qd + b * n, tau + b * n, ex + b * n, ref + b * n);
}

static void test_case(const gpu_case* tc) {
  char err[1024];
  cfd_chain c;
  if (load_chain(tc->model, tc->tile, NULL, &c)) return;
  int n = c.n;
  const cfd_backend* twins[4] = {cfd_backend_find("cpu.abia"), cfd_backend_find("cpu.jsiia"),
                                 cfd_backend_find("cpu.cfa"), cfd_backend_find("cpu.abia")};
  int Bmax = 0;
  for (int k = 0; k < 3; k++) Bmax = tc->batches[k] > Bmax ? tc->batches[k] : Bmax;
  size_t total = (size_t)Bmax * n;
  double* q = malloc(sizeof(double) * total);
  double* qd = malloc(sizeof(double) * total);
  double* tau = malloc(sizeof(double) * total);
  double* extra = malloc(sizeof(double) * total);
  double* ref = malloc(sizeof(double) * total);
  double* got = malloc(sizeof(double) * total);
  double* twin = malloc(sizeof(double) * n);
  size_t wsize = cfd_cfa_work_size(n) > cfd_abia_work_size(n) ? cfd_cfa_work_size(n) : cfd_abia_work_size(n);
  if (n <= 2048 && cfd_jsiia_work_size(n) > wsize) wsize = cfd_jsiia_work_size(n);
  double* work = malloc(sizeof(double) * wsize);
  double* split_work = malloc(sizeof(double) * cfd_abia_split_work_size(n));
  random_states(&c, 77, Bmax, q, qd, tau, extra, NULL);
  for (int with_extra = 0; with_extra < 2; with_extra++) {
    const double* ex = with_extra ? extra : NULL;
    for (size_t b = 0; b < (size_t)Bmax; b++)
      EXPECT(cfd_fd_reference(&c, q + b * n, qd + b * n, tau + b * n, ex ? ex + b * n : NULL,
                              ref + b * n) == 0, "reference");
    for (int alg = 0; alg < 4; alg++) {
      if (alg == CFD_GPU_ABIA_F32 && tc->tile) continue;  // float32 promises no digits there
      cfd_gpu* g;
      int too_long = alg == CFD_GPU_CFA && n > CFD_GPU_CFA_MAX_N;
      int refuse = alg == CFD_GPU_CFA && (tc->cfa == CFA_REFUSES || too_long);
      int st = cfd_gpu_create(&c, 0, (cfd_gpu_algorithm)alg, &g, err, sizeof err);
      if (refuse) printf("%-44s n=%-5d %-10s refused: %s\n", tc->model, n,
                         cfd_gpu_algorithm_name(alg), st ? err : "(not refused)");
      EXPECT(!st == !refuse &&
                 (!refuse || strstr(err, too_long ? "links are refused" : "singular")),
             "%s %s: %s", tc->model, cfd_gpu_algorithm_name(alg),
             st ? err : too_long ? "a chain past the cap must be refused" : "a singular link must be refused");
      if (st || refuse) {
        if (!st) cfd_gpu_free(g);
        continue;
      }
      for (int k = 0; k < 3; k++) {
        int B = tc->batches[k];
        if (!B) continue;
        for (size_t i = 0; i < (size_t)B * n; i++) got[i] = NAN;
        int timed = k == 1;  // the kernels' timing events on the middle batch only (off by default)
        cfd_gpu_time_kernels(g, timed);
        st = cfd_gpu_fd(g, B, q, qd, tau, ex, got, CFD_HOST, err, sizeof err);
        double ms = cfd_gpu_last_kernel_ms(g);
        EXPECT(st || (timed ? ms > 0 : ms == 0), "%s %s B=%d: kernel time %g ms, timed %d",
               tc->model, cfd_gpu_algorithm_name(alg), B, ms, timed);
        int may_not_converge = alg == CFD_GPU_CFA && (tc->cfa == CFA_MAY_NOT_CONVERGE ||
                                                      (tc->cfa == CFA_SMALL_BATCHES && B > 7));
        if (st && may_not_converge && strstr(err, "did not converge")) {
          printf("%-44s n=%-5d %-10s B=%-5d diag=%d refused: %s\n", tc->model, n,
                 cfd_gpu_algorithm_name(alg), B, with_extra, err);
          continue;
        }
        EXPECT(st == 0, "%s %s B=%d: %s", tc->model, cfd_gpu_algorithm_name(alg), B, err);
        double e = cfd_rel_err_inf(got, ref, B * n);
        for (int b = 0; b < B; b++) {  // per state, not diluted by the batch's largest entry
          double eb = cfd_rel_err_inf(got + (size_t)b * n, ref + (size_t)b * n, n);
          e = cfd_worst(e, eb);
        }
        // the CPU twin, on the first state (JSIIA's CPU twin is O(n^3): not at 4096 links)
        double et = -1;
        if (!(alg == CFD_GPU_JSIIA && n > 2048)) {
          twins[alg]->fd(&c, q, qd, tau, ex, twin, work);
          et = cfd_rel_err_inf(got, twin, n);
        }
        printf("%-44s n=%-5d %-10s B=%-5d diag=%d max_rel_err=%.2e twin_err=%.2e kernel=%.3f ms\n",
               tc->model, n, cfd_gpu_algorithm_name(alg), B, with_extra, e, et, ms);
        // single precision: bounded loosely where the bound is meaningful (short chains); on
        // long random chains float32 ABA has no correct digits to promise. Its rounding grows
        // with the chain's length; 1e-3 leaves a margin of a few times up to 200 links
        // (figures: docs/RESULTS.md)
        double tol = alg == CFD_GPU_ABIA_F32 ? 1e-3 : tc->tol;
        // CFA accepts its refinement's result within CFD_CFA_ACCEPT (1e-8, cfa_blocks.h), the
        // bound for long chains; past 200 links that is its bound here too
        if (alg == CFD_GPU_CFA && n > 200 && tol < CFD_CFA_ACCEPT) tol = CFD_CFA_ACCEPT;
        EXPECT(e <= tol, "%s %s B=%d: %.3e > %.1e", tc->model, cfd_gpu_algorithm_name(alg), B, e, tol);
        EXPECT(et <= tol, "%s %s B=%d: against its CPU twin %.3e > %.1e", tc->model,
               cfd_gpu_algorithm_name(alg), B, et, tol);
        if (B > 7) continue;
        // the same states in two halves (cuda.cfa: two launches, the second once tau is given)
        for (size_t i = 0; i < (size_t)B * n; i++) got[i] = NAN;
        st = cfd_gpu_fd_begin(g, B, q, qd, ex, err, sizeof err);
        EXPECT(st == 0, "%s %s B=%d begin: %s", tc->model, cfd_gpu_algorithm_name(alg), B, err);
        if (st) continue;
        st = cfd_gpu_fd_finish(g, tau, got, err, sizeof err);
        if (st && may_not_converge && strstr(err, "did not converge")) continue;
        EXPECT(st == 0, "%s %s B=%d finish: %s", tc->model, cfd_gpu_algorithm_name(alg), B, err);
        double es = 0;
        for (int b = 0; b < B; b++) {
          double eb = cfd_rel_err_inf(got + (size_t)b * n, ref + (size_t)b * n, n);
          es = cfd_worst(es, eb);
        }
        // cuda.abia's split call against its CPU twin (cpu/abia_split_cpu.c), on the first state,
        // where the world warps' resident kernel takes it; where the scan kernel's two launches
        // take it, against the scans' twin on the same blocks (apart by the scans' grouping and
        // rounding only, as in test_abia_scan)
        double ets = -1;
        int kind = alg == CFD_GPU_ABIA ? cfd_gpu_abia_split_kind(g, B) : 0;
        if (kind == 1) {
          EXPECT(cfd_fd_abia_split_cpu(&c, 0, q, qd, tau, ex, twin, split_work) == 0, "split twin");
          ets = cfd_rel_err_inf(got, twin, n);
          EXPECT(ets <= tol, "%s cuda.abia B=%d split against its twin: %.3e", tc->model, B, ets);
        } else if (kind == 2) {
          double* sw = malloc(sizeof(double) * cfd_abia_scan_work_size(n));
          EXPECT(sw && cfd_fd_abia_scan_cpu(&c, cfd_gpu_scan_links_ran(g), q, qd, tau, ex, twin,
                                            sw) == 0, "scan twin");
          ets = cfd_rel_err_inf(got, twin, n);
          free(sw);
          EXPECT(ets <= tol, "%s cuda.abia B=%d scans split against their twin: %.3e",
                 tc->model, B, ets);
        }
        printf("%-44s n=%-5d %-10s B=%-5d diag=%d split%s: max_rel_err=%.2e twin_err=%.2e\n",
               tc->model, n, cfd_gpu_algorithm_name(alg), B, with_extra,
               kind == 1 ? " (resident)" : kind == 2 ? " (two scan launches)" : "", es, ets);
        EXPECT(es <= tol, "%s %s B=%d split: %.3e > %.1e", tc->model, cfd_gpu_algorithm_name(alg),
               B, es, tol);
      }
      cfd_gpu_free(g);
    }
  }
  free(q); free(qd); free(tau); free(extra); free(ref); free(got); free(twin); free(work);
  free(split_work);
  cfd_chain_free(&c);
}

// Every ABIA batch kernel the library ships (cfd_abia_kernel), whatever (n, B) would choose,
// against the reference.
static void test_abia_variants(int quick) {
  // (kernel variant, lanes exchange through shared memory, name)
  static const struct { int v, xch; const char* name; } kinds[] = {
      {CFD_ABIA_THREAD, 1, "global lean"}, {CFD_ABIA_LANES, 1, "lanes"},
      {CFD_ABIA_LANES, 0, "lanes shuffles"}, {CFD_ABIA_WORLD_THREAD, 1, "world local"},
      {CFD_ABIA_WORLD_LANES, 1, "world lanes"}, {CFD_ABIA_WORLD_WARP, 1, "world blocks"},
      {CFD_ABIA_WORLD_WARPS, 1, "world warps"}, {CFD_ABIA_SCAN, 1, "scan"}};
  // world lanes: groups of 8 (arm7), 4 (2 links), 16 (12 links) and 32 (24 links), slides among
  // them; past 32 links the choice falls back to lanes in link frames. World blocks: one partial
  // block (up to 24 links), a full one and one link (33), two full (64), seven (200, slides).
  const char* models[] = {CHAINFD_SCENES_DIR "/arm7.xml", CHAINFD_SCENES_DIR "/double_pendulum.xml",
                          "chain:12,random=1,seed=44,slide=0.3,armature=0.02",
                          "chain:24,random=1,seed=43,slide=0.3,armature=0.02",
                          "chain:33,random=1,seed=41,armature=0.02",
                          "chain:64,random=1,seed=45,slide=0.2,armature=0.01",
                          "chain:200,random=1,seed=42,slide=0.2"};
  // how often each kind ran as asked (a forced kind that cannot run on a chain is replaced: each
  // must run on at least one of these chains, or it would go untested)
  int ran_as_asked[sizeof kinds / sizeof kinds[0]] = {0};
  for (int k = 0; k < (int)(sizeof models / sizeof models[0]); k++) {
    char err[1024];
    cfd_chain c, cj;
    if (load_chain(models[k], 0, NULL, &c)) continue;
    // the world kernels run on the chain in joint frames, and fall back to link frames without
    // it: these chains must have one, or the world variants below would test nothing new
    int jf = cfd_chain_in_joint_frames(&c, &cj) == 0;  // (frees cj itself when it fails)
    EXPECT(jf, "%s: no joint frames", models[k]);
    if (jf) cfd_chain_free(&cj);
    int n = c.n, B = quick ? 37 : 1000;  // 37: the last block of the lanes kernel half idle
    double *q = malloc(sizeof(double) * 6 * B * n), *qd = q + B * n, *tau = qd + B * n;
    double *ex = tau + B * n, *ref = ex + B * n, *got = ref + B * n;
    random_states(&c, 91, B, q, qd, tau, ex, ref);
    cfd_gpu* g;
    EXPECT(cfd_gpu_create(&c, 0, CFD_GPU_ABIA, &g, err, sizeof err) == 0, "%s", err);
    for (size_t v = 0; v < sizeof(kinds) / sizeof(kinds[0]) && g; v++) {
      cfd_gpu_tuning t = {.abia_kernel = kinds[v].v, .lanes_shuffle = !kinds[v].xch};
      for (int i = 0; i < B * n; i++) got[i] = NAN;
      int st = cfd_gpu_set_tuning(g, &t, err, sizeof err);
      if (!st) st = cfd_gpu_fd(g, B, q, qd, tau, ex, got, CFD_HOST, err, sizeof err);
      int ran = cfd_gpu_abia_ran(g);
      cfd_gpu_set_tuning(g, NULL, err, sizeof err);
      EXPECT(st == 0, "%s %s: %s", models[k], kinds[v].name, err);
      ran_as_asked[v] += ran == kinds[v].v;
      double e = 0;
      for (int b = 0; b < B; b++) {
        double eb = cfd_rel_err_inf(got + (size_t)b * n, ref + (size_t)b * n, n);
        e = cfd_worst(e, eb);
      }
      char as[32] = "";
      if (ran != kinds[v].v) snprintf(as, sizeof as, " (ran as %d)", ran);
      printf("%-44s n=%-4d cuda.abia[%s]%s B=%d max_rel_err=%.2e\n", models[k], n, kinds[v].name,
             as, B, e);
      EXPECT(e <= 1e-10, "%s cuda.abia[%s]: %.3e", models[k], kinds[v].name, e);
    }
    cfd_gpu_free(g);
    free(q);
    cfd_chain_free(&c);
  }
  for (size_t v = 0; v < sizeof(kinds) / sizeof(kinds[0]); v++)
    EXPECT(ran_as_asked[v] > 0, "cuda.abia[%s] ran on none of the chains", kinds[v].name);
}

// A chain whose last link has no inertia and no armature: its pivot d is zero, and every ABIA
// kernel must say so, from every lane's pivots and not only the first lane's (the last link of
// 40 sits on lane 7 of the second block).
static void test_abia_singular(void) {
  static const struct { int v; const char* name; } kinds[] = {
      {CFD_ABIA_THREAD, "global lean"}, {CFD_ABIA_LANES, "lanes"}, {CFD_ABIA_WORLD_WARP, "world blocks"},
      {CFD_ABIA_WORLD_WARPS, "world warps"}, {CFD_ABIA_SCAN, "scan"}};
  char err[1024];
  cfd_chain c;
  if (load_chain("chain:40,random=1,seed=46", 0, NULL, &c)) return;
  int n = c.n, B = 3;
  for (int k = 0; k < 36; k++) c.inertia[36 * (n - 1) + k] = 0;
  c.armature[n - 1] = 0;
  double *q = calloc((size_t)4 * B * n, sizeof(double)), *qd = q + B * n, *tau = qd + B * n;
  double* got = tau + B * n;
  cfd_gpu* g;
  EXPECT(cfd_gpu_create(&c, 0, CFD_GPU_ABIA, &g, err, sizeof err) == 0, "%s", err);
  for (size_t v = 0; v < sizeof(kinds) / sizeof(kinds[0]) && g; v++) {
    cfd_gpu_tuning t = {.abia_kernel = kinds[v].v};
    int st = cfd_gpu_set_tuning(g, &t, err, sizeof err);
    if (!st) st = cfd_gpu_fd(g, B, q, qd, tau, NULL, got, CFD_HOST, err, sizeof err);
    cfd_gpu_set_tuning(g, NULL, err, sizeof err);
    printf("massless tip, cuda.abia[%s]: %s\n", kinds[v].name, st ? err : "no error");
    EXPECT(st != 0 && strstr(err, "singular"), "cuda.abia[%s] must report the zero pivot: %s",
           kinds[v].name, st ? err : "no error");
  }
  // a split call (the world warps' factors, tau's share on the host) says so at finish
  EXPECT(g && cfd_gpu_fd_splits(g, B), "cuda.abia must split 40 links, B=%d", B);
  int st = g ? cfd_gpu_fd_begin(g, B, q, qd, NULL, err, sizeof err) : 1;
  EXPECT(st == 0, "begin: %s", err);
  if (!st) st = cfd_gpu_fd_finish(g, tau, got, err, sizeof err);
  printf("massless tip, cuda.abia split: %s\n", st ? err : "no error");
  EXPECT(st != 0 && strstr(err, "singular"), "a split cuda.abia must report the zero pivot: %s",
         st ? err : "no error");
  cfd_gpu_free(g);
  free(q);
  cfd_chain_free(&c);
}

// One split call of B states against want (the plain call's qacc): its distance, or 1 on an error
static double split_once(cfd_gpu* g, int n, int B, const double* q, const double* qd,
                         const double* tau, const double* ex, const double* want, double* got) {
  char err[1024];
  for (int i = 0; i < B * n; i++) got[i] = NAN;
  int st = cfd_gpu_fd_begin(g, B, q, qd, ex, err, sizeof err);
  if (!st) st = cfd_gpu_fd_finish(g, tau, got, err, sizeof err);
  EXPECT(st == 0, "split B=%d: %s", B, err);
  return st ? 1 : cfd_rel_err_inf(got, want, B * n);
}

// cuda.abia's split call, whose kernel stays resident between calls and talks to the host through
// page-locked memory: batches that grow its buffers and change its grid, a larger plain batch in
// between (which stops it, and reallocates the states' buffer it reads), each call twice in a row;
// then calls after gaps around the kernel's idle time (2 ms: it leaves, and may leave just as a
// call comes, which finish must notice and launch it again), and a cancelled call. Each against
// the plain call on the same states, and its kernel time (the kernel's own clock) reported.
static void test_abia_split_paths(void) {
  char err[1024];
  cfd_chain c;  // 4 blocks of 32 links
  if (load_chain("chain:100,random=1,seed=47,armature=0.02", 0, NULL, &c)) return;
  int n = c.n, Bmax = 16;
  double *q = malloc(sizeof(double) * 7 * Bmax * n), *qd = q + Bmax * n, *tau = qd + Bmax * n;
  double *ex = tau + Bmax * n, *want = ex + Bmax * n, *got = want + Bmax * n;
  random_states(&c, 93, Bmax, q, qd, tau, ex, NULL);
  cfd_gpu* g;
  EXPECT(cfd_gpu_create(&c, 0, CFD_GPU_ABIA, &g, err, sizeof err) == 0, "%s", err);
  // (B, with the diagonal): the buffers grown twice, a plain batch of 16, small batches again
  static const int keys[][2] = {{1, 0}, {2, 1}, {3, 0}, {1, 0}, {16, -1}, {1, 0}, {2, 1}};
  for (size_t k = 0; g && k < sizeof keys / sizeof keys[0]; k++) {
    int B = keys[k][0], diag = keys[k][1] > 0;
    const double* e = diag ? ex : NULL;
    int st = cfd_gpu_fd(g, B, q, qd, tau, e, want, CFD_HOST, err, sizeof err);
    EXPECT(st == 0, "plain B=%d: %s", B, err);
    if (keys[k][1] < 0) continue;  // the plain batch only
    for (int rep = 0; rep < 2; rep++) {  // twice: the second call's done flags follow the first's
      double d = split_once(g, n, B, q, qd, tau, e, want, got), ms = cfd_gpu_last_kernel_ms(g);
      printf("cuda.abia split, B=%d diag=%d: against the plain call %.2e (kernel %.1f us)\n", B,
             diag, d, 1e3 * ms);
      EXPECT(d <= 1e-11, "split B=%d diag=%d: %.3e", B, diag, d);
      EXPECT(ms > 0 && ms < 1e3, "split B=%d: kernel time %g ms", B, ms);
    }
  }
  // ten calls in a row on two sets of states in turn (what one call leaves in the buffers is
  // wrong for the next): one launch at most (the plain calls stopped the kernel)
  double* want2 = got + Bmax * n;
  EXPECT(cfd_gpu_fd(g, 2, q + 2 * n, qd + 2 * n, tau + 2 * n, ex + 2 * n, want2, CFD_HOST, err,
                    sizeof err) == 0, "%s", err);
  EXPECT(cfd_gpu_fd(g, 2, q, qd, tau, ex, want, CFD_HOST, err, sizeof err) == 0, "%s", err);
  int launches = g ? cfd_gpu_split_launches(g) : 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int k = 0; g && k < 10; k++) {
    int o = k % 2 ? 2 * n : 0;  // states 2 and 3, or 0 and 1
    double d = split_once(g, n, 2, q + o, qd + o, tau + o, ex + o, o ? want2 : want, got);
    EXPECT(d <= 1e-11, "split %d in a row: %.3e", k, d);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6;
  if (g) {
    launches = cfd_gpu_split_launches(g) - launches;
    printf("cuda.abia split, ten calls in a row (%.2f ms): %d launch(es)\n", ms, launches);
    // (a call slowed past the kernel's idle time or life, under a sanitizer say, may relaunch it)
    if (ms < 20) EXPECT(launches <= 1, "the split kernel was launched %d times for ten calls", launches);
  }
  // the last key's states (B = 2, the diagonal) after gaps of 1.8 to 2.2 ms, then 5 ms
  double worst = 0;
  for (int gap = 1800; g && gap <= 2225; gap += 25) {
    struct timespec t = {0, 1000L * (gap > 2200 ? 5000 : gap)};
    nanosleep(&t, NULL);
    int o = gap % 50 ? 2 * n : 0;
    double d = split_once(g, n, 2, q + o, qd + o, tau + o, ex + o, o ? want2 : want, got);
    if (d > worst) worst = d;
  }
  printf("cuda.abia split after gaps of 1.8 to 5 ms: against the plain call %.2e\n", worst);
  EXPECT(worst <= 1e-11, "split after gaps: %.3e", worst);
  if (g) {  // a cancelled call, then one to its end
    EXPECT(cfd_gpu_fd_begin(g, 2, q, qd, ex, err, sizeof err) == 0, "%s", err);
    cfd_gpu_fd_cancel(g);
    double d = split_once(g, n, 2, q, qd, tau, ex, want, got);
    EXPECT(d <= 1e-11, "split after a cancelled one: %.3e", d);
  }
  cfd_gpu_free(g);
  free(q);
  cfd_chain_free(&c);
}

// The scan kernel (abia_scan.cu) for several block lengths, on a chain with multi-joint bodies
// (massless inner links, where no block may end) and slides, and on tiled chains up to 16,384
// links: against the reference, and against its CPU twin (cfd_fd_abia_scan_cpu, the same blocks
// and scans) on the first state.
static void test_abia_scan(int quick) {
  // tol: against the reference; twin_tol: against the CPU twin with the same blocks, apart by
  // rounding only (fused multiply-adds), which grows with the chain's length; the bounds leave
  // a margin of about 4 over what the device gives (figures: docs/RESULTS.md).
  static const struct { const char* model; int tile; double tol, twin_tol; } chains[] = {
      {"chain:120,random=1,seed=47,slide=0.2,multijoint=1,armature=0.02", 0, 1e-10, 1e-11},
      {"chain:1000,random=1,seed=48,armature=0.01", 1024, 1e-9, 5e-10},
      {"chain:1000,random=1,seed=49,armature=0.01", 4096, 1e-8, 1e-9},
      {"chain:1000,random=1,seed=50,armature=0.01", 16384, 1e-8, 1e-9},
      // one chain of ball joints (every ball split at blocks of 1 and 2), a floating snake, and
      // 1000 balls (3000 links, tiled)
      {"chain:60,ball=1,damping=0.05,armature=0.01", 0, 1e-10, 1e-11},
      {"chain:30,random=1,seed=22,free=1,ball=0.3,armature=0.02", 0, 1e-10, 1e-11},
      {"chain:100,ball=1,armature=0.001", 3000, 1e-9, 5e-10}};
  // (links per block, batch, groups per thread block): 0 the kernel's choice; 40 chains take its
  // batch layout (longer blocks from 32 chains on: 8 at 144 links, 32 at 1024); the next two
  // alternate the two layouts, which the kernel keeps both of (the second finds its partition
  // kept, the first has it made again only where a third length came between); the last three
  // force fewer groups per thread block than the default 16, where a cluster can have more thread
  // blocks than a thread block has groups (the launch then gives it more: 144 links at 4, 1024
  // links at 8 and 12)
  static const int runs[][3] = {{0, 3, 0}, {1, 3, 0}, {2, 3, 0}, {5, 3, 0}, {32, 3, 0},
                                {0, 40, 0}, {0, 3, 0}, {0, 40, 0}, {0, 3, 4}, {0, 3, 8},
                                {0, 3, 12}};
  for (int k = 0; k < (int)(sizeof chains / sizeof chains[0]); k++) {
    char err[1024];
    cfd_chain c;
    if (quick && chains[k].tile) continue;
    if (load_chain(chains[k].model, chains[k].tile, NULL, &c)) continue;
    int n = c.n, Bmax = n > 4096 ? 3 : 40;
    double *q = malloc(sizeof(double) * 7 * Bmax * n), *qd = q + Bmax * n, *tau = qd + Bmax * n;
    double *ex = tau + Bmax * n, *ref = ex + Bmax * n, *got = ref + Bmax * n;
    double *twin = got + Bmax * n;
    double* work = malloc(sizeof(double) * cfd_abia_scan_work_size(n));
    random_states(&c, 92 + (unsigned)k, Bmax, q, qd, tau, ex, ref);
    cfd_gpu* g;
    EXPECT(cfd_gpu_create(&c, 0, CFD_GPU_ABIA, &g, err, sizeof err) == 0, "%s", err);
    if (g) cfd_gpu_time_kernels(g, 1);  // (printed below)
    for (int j = 0; j < (int)(sizeof runs / sizeof runs[0]) && g; j++) {
      int L = runs[j][0], B = runs[j][1];
      if (B > Bmax) continue;
      if (L > 0 && L * (n > 4096 ? 512 : 256) < n) continue;  // it would be raised to the choice
      cfd_gpu_tuning t = {.abia_kernel = CFD_ABIA_SCAN, .scan_links = L, .scan_groups = runs[j][2]};
      for (int i = 0; i < B * n; i++) got[i] = NAN;
      int st = cfd_gpu_set_tuning(g, &t, err, sizeof err);
      if (!st) st = cfd_gpu_fd(g, B, q, qd, tau, ex, got, CFD_HOST, err, sizeof err);
      float ms = cfd_gpu_last_kernel_ms(g);
      int Lt = cfd_gpu_scan_links_ran(g);  // the block length it ran
      // the same states as a split call, the kernel's two launches (blocks' maps and the first
      // scans at begin, the rest at finish), against the plain call: the same steps
      double es = -1;
      if (!st && B <= 64) {
        double* two = malloc(sizeof(double) * B * n);
        for (int i = 0; i < B * n; i++) two[i] = NAN;  // a state never written shows as NaN
        EXPECT(cfd_gpu_abia_split_kind(g, B) == 2, "%s: a split call of B=%d must take the scans",
               chains[k].model, B);
        int ss = cfd_gpu_fd_begin(g, B, q, qd, ex, err, sizeof err);
        if (!ss) ss = cfd_gpu_fd_finish(g, tau, two, err, sizeof err);
        EXPECT(ss == 0, "%s scan split, blocks of %d, B=%d: %s", chains[k].model, L, B, err);
        es = ss ? 1 : cfd_rel_err_inf(two, got, B * n);
        EXPECT(es <= chains[k].tol / 10, "%s scan split against the plain call: %.3e",
               chains[k].model, es);
        free(two);
      }
      cfd_gpu_set_tuning(g, NULL, err, sizeof err);
      EXPECT(st == 0, "%s scan, blocks of %d, B=%d: %s", chains[k].model, L, B, err);
      double e = 0;
      for (int b = 0; b < B; b++) {
        double eb = cfd_rel_err_inf(got + (size_t)b * n, ref + (size_t)b * n, n);
        e = cfd_worst(e, eb);
      }
      // the twin with the same blocks, on the first and the last state
      int ts = 0;
      double et = 0;
      for (int w = 0; w < (B > 1 ? 2 : 1); w++) {
        int b = w ? B - 1 : 0;
        ts |= cfd_fd_abia_scan_cpu(&c, Lt, q + (size_t)b * n, qd + (size_t)b * n,
                                   tau + (size_t)b * n, ex + (size_t)b * n, twin, work);
        double eb = cfd_rel_err_inf(got + (size_t)b * n, twin, n);
        et = cfd_worst(et, eb);
      }
      printf("%-44s n=%-5d cuda.abia[scan, blocks of %d, groups %d] B=%d max_rel_err=%.2e "
             "twin_err=%.2e split_err=%.2e kernel=%.3f ms\n", chains[k].model, n, Lt, runs[j][2],
             B, e, et, es, ms);
      EXPECT(e <= chains[k].tol, "%s scan, blocks of %d: %.3e", chains[k].model, Lt, e);
      EXPECT(ts == 0 && et <= chains[k].twin_tol, "%s scan vs its CPU twin: status %d, %.3e > %.0e",
             chains[k].model, ts, et, chains[k].twin_tol);
    }
    cfd_gpu_free(g);
    free(q);
    free(work);
    cfd_chain_free(&c);
  }
}

static void test_errors(void) {
  char err[1024];
  mjModel* m;
  cfd_chain c;
  if (load_chain(CHAINFD_SCENES_DIR "/arm7.xml", 0, &m, &c)) return;
  cfd_gpu* g;
  EXPECT(cfd_gpu_create(&c, 99, CFD_GPU_ABIA, &g, err, sizeof err) != 0 && g == NULL,
         "device 99 must be refused");
  EXPECT(strstr(err, "99") != NULL, "message names the device: %s", err);
  printf("bad device: %s\n", err);
  EXPECT(cfd_gpu_create(&c, 0, CFD_GPU_CFA, &g, err, sizeof err) == 0, "%s", err);
  // a batch far beyond device memory: an error, no crash, and the context still works after
  double q[7] = {0}, qd[7] = {0}, tau[7] = {0}, qacc[7] = {5, 5, 5, 5, 5, 5, 5};
  // a batch whose staged copies need twice the device's memory: the allocation fails before
  // anything is read from the (small) host arrays, whatever the device's size
  double need = 2.0 * (double)cfd_gpu_device_memory(0) / (5.0 * 7 * sizeof(double));
  int huge = need < 2e9 ? (int)need : 2000000000;
  int st = cfd_gpu_fd(g, huge, q, qd, tau, NULL, qacc, CFD_HOST, err, sizeof err);
  EXPECT(st != 0, "a batch beyond device memory must fail cleanly");
  printf("huge batch: %s\n", err);
  EXPECT(qacc[0] == 5, "qacc untouched on error");
  st = cfd_gpu_fd(g, 1, q, qd, tau, NULL, qacc, CFD_HOST, err, sizeof err);
  EXPECT(st == 0, "the context recovers after an out-of-memory error: %s", err);
  // split calls: out of order is an error, cancel ends one under way, and so does free
  EXPECT(cfd_gpu_fd_finish(g, tau, qacc, err, sizeof err) != 0, "finish without begin must fail");
  printf("finish without begin: %s\n", err);
  EXPECT(cfd_gpu_fd_begin(g, 1, q, qd, NULL, err, sizeof err) == 0, "begin: %s", err);
  EXPECT(cfd_gpu_fd_begin(g, 1, q, qd, NULL, err, sizeof err) != 0, "a second begin must fail");
  EXPECT(cfd_gpu_fd(g, 1, q, qd, tau, NULL, qacc, CFD_HOST, err, sizeof err) != 0,
         "cfd_gpu_fd during a split call must fail");
  printf("during a split call: %s\n", err);
  cfd_gpu_fd_cancel(g);
  qacc[0] = 5;
  st = cfd_gpu_fd(g, 1, q, qd, tau, NULL, qacc, CFD_HOST, err, sizeof err);
  EXPECT(st == 0 && qacc[0] != 5, "after cancel the context works: %s", err);
  // between begin and finish the device is the caller's: here a free, which waits for the whole
  // device (a kernel that waited on the device for finish's tau would hang it)
  cfd_gpu* other;
  EXPECT(cfd_gpu_create(&c, 0, CFD_GPU_ABIA, &other, err, sizeof err) == 0, "%s", err);
  st = other ? cfd_gpu_fd(other, 1, q, qd, tau, NULL, qacc, CFD_HOST, err, sizeof err) : 1;
  EXPECT(st == 0, "second context: %s", err);
  double want[7];
  memcpy(want, qacc, sizeof want);
  EXPECT(cfd_gpu_fd_begin(g, 1, q, qd, NULL, err, sizeof err) == 0, "begin: %s", err);
  cfd_gpu_free(other);
  qacc[0] = 5;
  st = cfd_gpu_fd_finish(g, tau, qacc, err, sizeof err);
  EXPECT(st == 0 && cfd_rel_err_inf(qacc, want, 7) <= 1e-12,
         "finish after the device was used in between: %s, error %.2e", err,
         cfd_rel_err_inf(qacc, want, 7));
  EXPECT(cfd_gpu_fd_begin(g, 1, q, qd, NULL, err, sizeof err) == 0, "begin: %s", err);
  cfd_gpu_free(g);  // with a split call under way: free ends it first
  // the solver's split form (both back ends that split on arm7): a state that moved between
  // begin and finish is solved from scratch
  for (int k = 0; k < 2; k++) {
    const char* name = k ? "cuda.abia" : "cuda.cfa";
    cfd_solver* s = cfd_solver_create(m, name, err, sizeof err);
    EXPECT(s != NULL, "%s solver: %s", name, err);
    if (!s) continue;
    EXPECT(cfd_solver_splits(s), "%s must split arm7", name);
    double q1[7] = {0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7}, want[7], got1[7], got2[7], diag[7];
    for (int i = 0; i < 7; i++) tau[i] = 0.3 * i - 1, diag[i] = 0.01 * (i + 1);
    EXPECT(cfd_solver_fd(s, q1, qd, tau, NULL, want) == 0, "fd");
    EXPECT(cfd_solver_begin(s, q, qd, diag) == 0, "begin: %s", cfd_solver_error(s, CFD_ERR_GPU));
    EXPECT(cfd_solver_finish(s, q1, qd, tau, diag, got1, got2) == 0, "finish: %s",
           cfd_solver_error(s, CFD_ERR_GPU));
    EXPECT(cfd_rel_err_inf(got1, want, 7) <= 1e-12, "moved state: %.2e", cfd_rel_err_inf(got1, want, 7));
    EXPECT(cfd_solver_fd(s, q1, qd, tau, diag, want) == 0, "fd with diag");
    EXPECT(cfd_rel_err_inf(got2, want, 7) <= 1e-12, "moved state, diag: %.2e", cfd_rel_err_inf(got2, want, 7));
    double bad[7] = {NAN};
    EXPECT(cfd_solver_begin(s, q1, qd, NULL) == 0, "begin");
    EXPECT(cfd_solver_finish(s, q1, qd, bad, NULL, got1, NULL) == CFD_ERR_NONFINITE, "NaN tau");
    // a diagonal that changed since begin (Euler's depends on qvel): solved with the new one
    double diag2[7];
    for (int i = 0; i < 7; i++) diag2[i] = 0.02 * (7 - i);
    EXPECT(cfd_solver_begin(s, q1, qd, diag) == 0, "begin");
    EXPECT(cfd_solver_finish(s, q1, qd, tau, diag2, got1, got2) == 0, "finish, new diagonal");
    EXPECT(cfd_solver_fd(s, q1, qd, tau, diag2, want) == 0, "fd with the new diagonal");
    EXPECT(cfd_rel_err_inf(got2, want, 7) <= 1e-12, "changed diagonal: %.2e",
           cfd_rel_err_inf(got2, want, 7));
    // a begin left over (a step abandoned mid-way) is given up by the next begin
    EXPECT(cfd_solver_begin(s, q, qd, NULL) == 0, "begin");
    EXPECT(cfd_solver_begin(s, q1, qd, NULL) == 0, "a second begin replaces the first");
    EXPECT(cfd_solver_finish(s, q1, qd, tau, NULL, got1, NULL) == 0, "finish after a replaced begin");
    EXPECT(cfd_solver_fd(s, q1, qd, tau, NULL, want) == 0, "fd");
    EXPECT(cfd_rel_err_inf(got1, want, 7) <= 1e-12, "replaced begin: %.2e", cfd_rel_err_inf(got1, want, 7));
    // a state that did not move: the split result itself, against the whole solve
    EXPECT(cfd_solver_begin(s, q1, qd, diag) == 0, "begin");
    EXPECT(cfd_solver_finish(s, q1, qd, tau, diag, got1, got2) == 0, "finish: %s",
           cfd_solver_error(s, CFD_ERR_GPU));
    EXPECT(cfd_solver_fd(s, q1, qd, tau, NULL, want) == 0, "fd");
    EXPECT(cfd_rel_err_inf(got1, want, 7) <= 1e-12, "%s split: %.2e", name,
           cfd_rel_err_inf(got1, want, 7));
    EXPECT(cfd_solver_fd(s, q1, qd, tau, diag, want) == 0, "fd with diag");
    EXPECT(cfd_rel_err_inf(got2, want, 7) <= 1e-12, "%s split, diag: %.2e", name,
           cfd_rel_err_inf(got2, want, 7));
    EXPECT(cfd_solver_begin(s, q, qd, NULL) == 0, "begin");
    cfd_solver_free(s);  // with a begin under way: free gives it up
  }
  cfd_chain_free(&c);
  mj_deleteModel(m);
}

// Trees and ball or free joints: cuda.abia (its tree kernel, whatever the batch) against the
// reference and against its CPU twin (cpu.fast, through the same aba_tree.h) per state; no split
// call (begin refuses: fd does it all); cuda.jsiia, cuda.cfa and the float32 kernel refuse.
static void test_trees(int quick) {
  static const struct {
    const char* model;
    int tile;
    double tol;
  } trees[] = {
      {"chain:30,random=1,seed=44,branch=0.3,ball=0.3,free=1,slide=0.1,armature=0.01", 0, 1e-10},
      {"chain:40,ball=1,armature=0.001", 0, 1e-10},
      {"chain:300,random=1,seed=42,branch=0.5,ball=0.2,free=1,multijoint=1,armature=0.01", 0, 1e-10},
      {"chain:10,ball=1,armature=0.001", 300, 1e-9},  // a ball chain tiled to 300 balls, 900 dofs
  };
  char err[1024];
  for (size_t t = 0; t < sizeof trees / sizeof trees[0]; t++) {
    if (quick && (trees[t].tile || t == 2)) continue;
    cfd_chain c;
    if (load_chain(trees[t].model, trees[t].tile, NULL, &c)) continue;
    int n = c.n, batches[3] = {1, 7, quick ? 0 : 4096}, one_chain = 1;
    for (int i = 0; i < n; i++) one_chain &= c.parent[i] == i - 1;
    size_t total = (size_t)4096 * n;
    double *q = malloc(sizeof(double) * total), *qd = malloc(sizeof(double) * total);
    double *tau = malloc(sizeof(double) * total), *ex = malloc(sizeof(double) * total);
    double *got = malloc(sizeof(double) * total), *want = malloc(sizeof(double) * n);
    double* work = malloc(sizeof(double) * cfd_fast_work_size(n));
    random_states(&c, 91, 4096, q, qd, tau, ex, NULL);
    for (int alg = 1; alg < 4; alg++) {
      cfd_gpu* g = NULL;
      int st = cfd_gpu_create(&c, 0, (cfd_gpu_algorithm)alg, &g, err, sizeof err);
      EXPECT(st != 0 && strstr(err, "cuda.abia runs"), "%s %s must refuse a tree: %s",
             trees[t].model, cfd_gpu_algorithm_name(alg), st ? err : "accepted");
      if (!st) cfd_gpu_free(g);
    }
    cfd_gpu* g = NULL;
    int st = cfd_gpu_create(&c, 0, CFD_GPU_ABIA, &g, err, sizeof err);
    EXPECT(st == 0, "%s cuda.abia: %s", trees[t].model, err);
    for (int k = 0; k < 3 && !st; k++) {
      int B = batches[k];
      if (!B) continue;
      for (int with_extra = 0; with_extra < 2; with_extra++) {
        const double* e = with_extra ? ex : NULL;
        for (size_t i = 0; i < (size_t)B * n; i++) got[i] = NAN;
        int rs = cfd_gpu_fd(g, B, q, qd, tau, e, got, CFD_HOST, err, sizeof err);
        EXPECT(rs == 0, "%s B=%d: %s", trees[t].model, B, err);
        // one chain of balls in batches up to 1024 (4096 from 100 links): the scans (abia.cu's
        // rule); else the tree kernels
        int scans = one_chain && n >= 30 && (B <= 1024 || (n >= 100 && B <= 4096));
        int kernel = scans ? CFD_ABIA_SCAN
                     : n <= 64                        ? CFD_ABIA_WORLD_TREE
                                                      : CFD_ABIA_TREE;
        EXPECT(cfd_gpu_abia_ran(g) == kernel, "%s B=%d: kernel %d, not %d", trees[t].model, B,
               cfd_gpu_abia_ran(g), kernel);
        double eref = 0, etwin = 0;
        int checked = B < 64 ? B : 64;  // the reference is slow: the first 64 states of a batch
        for (int b = 0; b < checked; b++) {
          size_t o = (size_t)b * n;
          cfd_fd_reference(&c, q + o, qd + o, tau + o, e ? e + o : NULL, want);
          eref = cfd_worst(eref, cfd_rel_err_inf(got + o, want, n));
          cfd_fd_fast_cpu(&c, q + o, qd + o, tau + o, e ? e + o : NULL, want, work);
          etwin = cfd_worst(etwin, cfd_rel_err_inf(got + o, want, n));
        }
        printf("%-60.60s n=%-4d tree B=%-5d diag=%d max_rel_err=%.2e twin_err=%.2e\n",
               trees[t].model, n, B, with_extra, eref, etwin);
        EXPECT(eref <= trees[t].tol && etwin <= trees[t].tol, "%s B=%d: %.3e / %.3e > %.0e",
               trees[t].model, B, eref, etwin, trees[t].tol);
      }
    }
    if (!st && n <= 64) {  // the link-frame tree kernel forced where the rule takes the world one
      cfd_gpu_tuning tune = {0};
      tune.abia_kernel = CFD_ABIA_TREE;
      EXPECT(cfd_gpu_set_tuning(g, &tune, err, sizeof err) == 0, "%s", err);
      EXPECT(cfd_gpu_fd(g, 7, q, qd, tau, ex, got, CFD_HOST, err, sizeof err) == 0, "%s", err);
      EXPECT(cfd_gpu_abia_ran(g) == CFD_ABIA_TREE, "%s: forced kernel %d", trees[t].model,
             cfd_gpu_abia_ran(g));
      double ef = 0;
      for (int b = 0; b < 7; b++) {
        size_t o = (size_t)b * n;
        cfd_fd_reference(&c, q + o, qd + o, tau + o, ex + o, want);
        ef = cfd_worst(ef, cfd_rel_err_inf(got + o, want, n));
      }
      printf("%-60.60s n=%-4d tree (link frames, forced) B=7 max_rel_err=%.2e\n", trees[t].model, n, ef);
      EXPECT(ef <= trees[t].tol, "%s: the link-frame tree kernel %.3e", trees[t].model, ef);
      EXPECT(cfd_gpu_set_tuning(g, NULL, err, sizeof err) == 0, "%s", err);
    }
    if (!st) {  // begin holds the states, finish solves them: the same numbers as fd
      // (a split call only on one long chain, through the scans)
      EXPECT(cfd_gpu_fd_splits(g, 7) == (one_chain && n >= 30), "%s: split call %d",
             trees[t].model, cfd_gpu_fd_splits(g, 7));
      EXPECT(cfd_gpu_fd(g, 7, q, qd, tau, ex, got, CFD_HOST, err, sizeof err) == 0, "%s", err);
      double* again = malloc(sizeof(double) * 7 * n);
      EXPECT(cfd_gpu_fd_begin(g, 7, q, qd, ex, err, sizeof err) == 0 &&
                 cfd_gpu_fd_finish(g, tau, again, err, sizeof err) == 0, "%s begin/finish: %s",
             trees[t].model, err);
      if (one_chain && n >= 30)  // the scans in two launches: the same steps, to rounding
        EXPECT(cfd_rel_err_inf(again, got, 7 * n) <= trees[t].tol / 10,
               "%s: begin/finish differs from fd by %.3e", trees[t].model,
               cfd_rel_err_inf(again, got, 7 * n));
      else
        EXPECT(memcmp(again, got, sizeof(double) * 7 * n) == 0, "%s: begin/finish differs from fd",
               trees[t].model);
      free(again);
      cfd_gpu_free(g);
    }
    free(q); free(qd); free(tau); free(ex); free(got); free(want); free(work);
    cfd_chain_free(&c);
  }
}

// cuda.dca (dca.cu) against the long-double reference and its CPU twin (cpu/dca_cpu.c, the same
// subsystems): scenes, multi-joint and ball chains, chains tiled to 1024 .. 16384 links, several
// links per subsystem (1: the deepest tree), one state and a batch, with and without a joint-
// diagonal term: 1e-11 up to 200 links; on the tiled chains 1e-8, DCA's promise on 1000 links and
// beyond (there the GPU's contracted rounding and the CPU's differ by up to 2e-9, each about 1e-9
// from the reference, as the sequential sweeps are); and a tree refused by name.
static void test_dca(int quick) {
  static const struct {
    const char* model;
    int tile;
  } chains[] = {
      {CHAINFD_SCENES_DIR "/arm7.xml", 0},
      {CHAINFD_SCENES_DIR "/slide_hinge.xml", 0},
      {"chain:120,random=1,seed=13,slide=0.2,multijoint=1,armature=0.02", 0},
      {"chain:60,ball=1,damping=0.05,armature=0.01", 0},
      {"chain:30,random=1,seed=22,free=1,ball=0.3,armature=0.02", 0},
      {"chain:1000,random=1,seed=1,armature=0.01", 1024},
      {"chain:1000,random=1,seed=1,armature=0.01", 4096},
      {"chain:1000,random=1,seed=1,armature=0.01", 16384},
  };
  const int links[4] = {1, 2, CFD_DCA_LINKS_DEFAULT, 16};
  char err[1024];
  for (size_t k = 0; k < sizeof chains / sizeof chains[0]; k++) {
    if (quick && chains[k].tile > 1024) continue;
    cfd_chain c;
    if (load_chain(chains[k].model, chains[k].tile, NULL, &c)) continue;
    int n = c.n, B = n > 2000 ? 2 : 9;
    size_t bn = (size_t)B * n;
    double* v = malloc(sizeof(double) * 7 * bn);
    double* work = malloc(sizeof(double) * cfd_dca_work_size_ex(n, 1));
    cfd_gpu* g = NULL;
    int st = cfd_gpu_create(&c, 0, CFD_GPU_DCA, &g, err, sizeof err);
    EXPECT(v && work && st == 0, "%s: %s", chains[k].model, st ? err : "out of memory");
    if (v && work && st == 0) {
      double *q = v, *qd = q + bn, *tau = qd + bn, *ex = tau + bn, *ref = ex + bn, *got = ref + bn,
             *twin = got + bn;
      random_states(&c, 31 + (unsigned)k, B, q, qd, tau, ex, NULL);
      double bound = n <= 200 ? 1e-11 : 1e-8, worst_ref = 0, worst_twin = 0;
      for (int with_extra = 0; with_extra < 2; with_extra++) {
        const double* e = with_extra ? ex : NULL;
        for (int b = 0; b < B; b++)
          cfd_fd_reference(&c, q + b * n, qd + b * n, tau + b * n, e ? e + b * n : NULL, ref + b * n);
        for (int j = 0; j < 4; j++) {
          cfd_gpu_tuning tune = {0};
          tune.dca_links = links[j];
          EXPECT(cfd_gpu_set_tuning(g, &tune, err, sizeof err) == 0, "%s", err);
          int used = cfd_gpu_dca_links(g), rc = 0;
          EXPECT(cfd_gpu_fd(g, B, q, qd, tau, e, got, CFD_HOST, err, sizeof err) == 0, "%s L=%d: %s",
                 chains[k].model, links[j], err);
          for (int b = 0; b < B; b++) {
            rc |= cfd_fd_dca_cpu_ex(&c, used, q + b * n, qd + b * n, tau + b * n, e ? e + b * n : NULL,
                                    twin + b * n, work);
            worst_ref = cfd_worst(worst_ref, cfd_rel_err_inf(got + b * n, ref + b * n, n));
            worst_twin = cfd_worst(worst_twin, cfd_rel_err_inf(got + b * n, twin + b * n, n));
          }
          EXPECT(rc == 0, "%s: the CPU twin failed", chains[k].model);
          if (getenv("CHAINFD_TEST_VERBOSE")) {
            int bad = -1;
            for (int x = 0; x < B * n && bad < 0; x++)
              if (!isfinite(got[x])) bad = x;
            printf("  L=%d (ran %d) extra=%d: first non-finite at %d; got[0..2] %g %g %g twin %g %g %g\n",
                   links[j], used, with_extra, bad, got[0], got[1], got[n > 2 ? 2 : 0], twin[0], twin[1],
                   twin[n > 2 ? 2 : 0]);
          }
        }
      }
      printf("cuda.dca %-56.56s n=%-5d B=%d against the reference %.2e, its CPU twin %.2e\n",
             chains[k].model, n, B, worst_ref, worst_twin);
      EXPECT(worst_ref <= bound && worst_twin <= bound, "cuda.dca %s (%d links): %.3e, %.3e (bound %.1e)",
             chains[k].model, n, worst_ref, worst_twin, bound);
    }
    cfd_gpu_free(g);
    free(v);
    free(work);
    cfd_chain_free(&c);
  }
  cfd_chain c;
  if (!load_chain("chain:20,random=1,seed=3,branch=0.4", 0, NULL, &c)) {
    cfd_gpu* g = NULL;
    int st = cfd_gpu_create(&c, 0, CFD_GPU_DCA, &g, err, sizeof err);
    printf("cuda.dca on a tree: %s\n", st ? err : "(not refused)");
    EXPECT(st != 0 && strstr(err, "cuda.dca takes unbranched chains"), "a tree must be refused by cuda.dca");
    cfd_gpu_free(g);
    cfd_chain_free(&c);
  }
}

int main(void) {
  int devices = cfd_gpu_device_count();
  if (devices == 0) {
    printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  char name[256];
  cfd_gpu_device_name(0, name, sizeof name);
  printf("device 0: %s\n", name);
  // CHAINFD_TEST_QUICK=1 (for compute-sanitizer runs): the small models and batches only.
  // CHAINFD_TEST_ONLY=cases|variants|scan|singular|split|errors|trees|dca: that part alone (a sanitizer's
  // run on the one kernel a change touched, where the whole suite would take minutes)
  const char* quick_env = getenv("CHAINFD_TEST_QUICK");
  const char* only = getenv("CHAINFD_TEST_ONLY");
  int quick = quick_env && quick_env[0] == '1';
#define PART(name) (!only || !only[0] || strcmp(only, name) == 0)
  if (only && only[0] && !PART("cases") && !PART("variants") && !PART("scan") &&
      !PART("singular") && !PART("split") && !PART("errors") && !PART("trees") && !PART("dca")) {
    printf("CHAINFD_TEST_ONLY=%s: not a part (cases, variants, scan, singular, split, errors, "
           "trees, dca)\n",
           only);
    return 2;
  }
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]) && PART("cases"); i++) {
    gpu_case tc = cases[i];
    if (quick) {
      if (tc.tile) continue;
      tc.batches[2] = 0;
    }
    test_case(&tc);
  }
  if (PART("variants")) test_abia_variants(quick);
  if (PART("scan")) test_abia_scan(quick);
  if (PART("singular")) test_abia_singular();
  if (PART("split")) test_abia_split_paths();
  if (PART("errors")) test_errors();
  if (PART("trees")) test_trees(quick);
  if (PART("dca")) test_dca(quick);
#undef PART
  TEST_EXIT();
}
