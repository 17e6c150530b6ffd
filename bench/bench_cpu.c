// chainfd-bench-cpu: time mj_forward against every chainfd CPU back end (gather + forward
// dynamics through cfd_solver_qacc) on the same model and the same seeded random states, and check
// every back end's qacc against mj_forward's while doing it.
//
// Protocol, per chain size: one call of each measurement as warm-up and to estimate its cost, then
// B batches; batch i uses random state i % states: mj_forward is timed for `reps` calls (which
// leaves mjData current for that state), then each back end for its own `reps` calls. reps is
// chosen so that each measurement gets about --min-time seconds in all; B shrinks (to at least 3)
// when single calls are so slow that B batches would exceed the per-size budget. The figure is the
// median over batches of the mean time per call.
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mujoco/mujoco.h>

#include "../cli/args.h"  // strict numeric options, shared with the chainfd tool
#include "backend.h"
#include "cfd_math.h"
#include "cfd_median.h"
#include "chain_gen.h"
#include "mj_random.h"

#ifndef CHAINFD_SCENES_DIR
#define CHAINFD_SCENES_DIR "scenes"
#endif

#define MAX_SIZES 64
#define MAX_MEAS 16          // mj_forward + back ends
#define JSIIA_MAX_LINKS 2048 // above this the O(n^3) Cholesky of cpu.jsiia is not worth timing
#define RANDOM_WHAT (CFD_RANDOM_QPOS | CFD_RANDOM_QVEL | CFD_RANDOM_CTRL)

typedef struct config {
  int sizes[MAX_SIZES];
  int nsizes;
  const char* models[MAX_SIZES];  // --models: these (files or chain: specs) instead of the sizes
  int nmodels;
  double min_time;   // seconds of timed calls per measurement
  double size_cap;   // seconds of batches per size (all measurements) before B is reduced
  int batches;       // batches per measurement when the cap allows
  int states;        // distinct random states
  unsigned long long seed;
  double tol;        // largest relative error accepted (exit status)
  const char* json;  // NULL: no JSON
  int quick;
} config;

typedef struct meas {  // one measurement: mj_forward (solver NULL) or one back end
  char name[32];
  cfd_solver* solver;
  char note[512];      // why skipped / refused / failed; empty when measured
  double t1;           // estimated seconds per call
  int reps, nbatch;
  double median_us, ratio, max_err;
} meas;

typedef struct size_result {
  int n, nv, batches, states;
  char model[256];
  char error[512];     // model could not be loaded
  int nmeas;
  meas m[MAX_MEAS];    // m[0] is mj_forward
} size_result;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}


// reps calls of one measurement; returns the elapsed seconds, or -1 when a back end fails
static double time_calls(meas* x, const mjModel* m, mjData* d, double* qacc, int reps) {
  char err[256];
  double t0 = now();
  if (!x->solver) {
    for (int r = 0; r < reps; r++) mj_forward(m, d);
  } else {
    for (int r = 0; r < reps; r++)
      if (cfd_solver_qacc(x->solver, m, d, NULL, qacc, err, sizeof err)) {
        snprintf(x->note, sizeof x->note, "failed: %s", err);
        return -1;
      }
  }
  return now() - t0;
}

// Seconds per call: the first call is the warm-up; slow calls are estimated from a second one,
// fast ones from a doubling number of calls.
static double calibrate(meas* x, const mjModel* m, mjData* d, double* qacc) {
  double t = time_calls(x, m, d, qacc, 1);
  if (t < 0) return t;
  if (t >= 0.01) {
    double t2 = time_calls(x, m, d, qacc, 1);
    return t2 < t ? t2 : t;
  }
  for (int reps = 1;; reps *= 2) {
    t = time_calls(x, m, d, qacc, reps);
    if (t < 0 || t >= 0.002 || reps >= (1 << 20)) return t < 0 ? t : t / reps;
  }
}

static void set_state(const mjModel* m, mjData* d, const config* cfg, int k) {
  cfd_rng r = {cfg->seed * 1000003ull + (unsigned long long)k};
  cfd_random_state(m, d, &r, RANDOM_WHAT);
}

static void model_spec(int n, char* buf, int size) {
  if (n == 7) snprintf(buf, size, "%s/arm7.xml", CHAINFD_SCENES_DIR);
  else snprintf(buf, size, "chain:%d,random=1,seed=1,damping=0.05,armature=0.01", n);
}

// Benchmarks one chain size (or, with spec, that model; n is then its dofs) into res. Returns 0,
// or 1 when the model could not be used.
static int bench_size(int n, const char* spec, const config* cfg, size_result* res) {
  memset(res, 0, sizeof *res);
  res->n = n;
  if (spec) snprintf(res->model, sizeof res->model, "%s", spec);
  else model_spec(n, res->model, sizeof res->model);
  fprintf(stderr, "n=%d: loading %s\n", n, res->model);
  mjModel* m = cfd_load_model(res->model, res->error, sizeof res->error);
  if (!m) return 1;
  if (spec) n = res->n = (int)m->nv;
  m->opt.disableflags |= mjDSBL_CONSTRAINT;  // chain dynamics only
  int nv = res->nv = (int)m->nv;
  mjData* d = mj_makeData(m);
  double* qacc = calloc(nv > 0 ? nv : 1, sizeof(double));
  double* ref = calloc(nv > 0 ? nv : 1, sizeof(double));
  if (!d || !qacc || !ref) {
    snprintf(res->error, sizeof res->error, "out of memory");
    mj_deleteData(d); free(qacc); free(ref); mj_deleteModel(m);
    return 1;
  }

  // the measurements: mj_forward, then every back end that accepts the model
  res->nmeas = 1;
  snprintf(res->m[0].name, sizeof res->m[0].name, "mj_forward");
  for (int b = 0; b < cfd_backend_count() && res->nmeas < MAX_MEAS; b++) {
    if (cfd_backend_get(b)->gpu_algorithm >= 0) continue;  // CPU back ends only (bench_gpu: the GPU)
    meas* x = &res->m[res->nmeas++];
    const char* name = cfd_backend_get(b)->name;
    snprintf(x->name, sizeof x->name, "%s", name);
    if (!strcmp(name, "cpu.jsiia") && nv > JSIIA_MAX_LINKS) {
      snprintf(x->note, sizeof x->note, "skipped: O(n^3) above %d links", JSIIA_MAX_LINKS);
      continue;
    }
    char err[400];
    x->solver = cfd_solver_create(m, name, err, sizeof err);
    if (!x->solver) snprintf(x->note, sizeof x->note, "refused: %s", err);
  }

  // warm-up and cost estimates, on state 0 (mj_forward first: it makes mjData current)
  mj_resetData(m, d);
  set_state(m, d, cfg, 0);
  double sum1 = 0;
  for (int i = 0; i < res->nmeas; i++) {
    meas* x = &res->m[i];
    if (i > 0 && !x->solver) continue;
    x->t1 = calibrate(x, m, d, qacc);
    if (x->t1 < 0) { cfd_solver_free(x->solver); x->solver = NULL; continue; }
    sum1 += x->t1;
  }
  int B = cfg->batches;
  if (sum1 * B > cfg->size_cap) B = (int)(cfg->size_cap / sum1);
  if (B < 3) B = 3;
  res->batches = B;
  res->states = B < cfg->states ? B : cfg->states;
  fprintf(stderr, "n=%d: nv=%d, mj_forward ~%.3g us per call, %d batches over %d states\n", n, nv,
          1e6 * res->m[0].t1, B, res->states);

  double* us = malloc(sizeof(double) * (size_t)B * res->nmeas);
  if (!us) {
    snprintf(res->error, sizeof res->error, "out of memory");
    B = 0;  // time nothing, free everything below
  }
  for (int i = 0; i < res->nmeas; i++) {
    meas* x = &res->m[i];
    x->reps = (int)ceil(cfg->min_time / (B * (x->t1 > 1e-9 ? x->t1 : 1e-9)));
    if (x->reps < 1) x->reps = 1;
  }

  // the batches: mj_forward on state i % states, then every back end on that mjData
  for (int i = 0; i < B; i++) {
    set_state(m, d, cfg, i % cfg->states);
    for (int j = 0; j < res->nmeas; j++) {
      meas* x = &res->m[j];
      if (j > 0 && !x->solver) continue;
      double t = time_calls(x, m, d, qacc, x->reps);
      if (t < 0) {  // a back end failed: its note says why
        cfd_solver_free(x->solver);
        x->solver = NULL;
        x->nbatch = 0;
        continue;
      }
      us[(size_t)j * B + x->nbatch++] = 1e6 * t / x->reps;
      if (j == 0) {
        memcpy(ref, d->qacc, sizeof(double) * nv);
      } else {
        double e = cfd_rel_err_inf(qacc, ref, nv);
        x->max_err = cfd_worst(x->max_err, e);
      }
    }
  }

  for (int j = 0; j < res->nmeas; j++) {
    meas* x = &res->m[j];
    cfd_solver_free(x->solver);
    x->solver = NULL;
    if (x->nbatch == 0) continue;
    x->median_us = cfd_median(us + (size_t)j * B, x->nbatch);
    x->ratio = res->m[0].median_us / x->median_us;
  }
  free(us);
  free(qacc);
  free(ref);
  mj_deleteData(d);
  mj_deleteModel(m);
  return res->error[0] != 0;
}

// ------------------------------------------------------------------------------------------------
// output

static void fmt_num(char* buf, int size, double x) {  // about 4 significant digits
  if (x < 10) snprintf(buf, size, "%.3f", x);
  else if (x < 100) snprintf(buf, size, "%.2f", x);
  else if (x < 1000) snprintf(buf, size, "%.1f", x);
  else snprintf(buf, size, "%.0f", x);
}

static void fmt_ratio(char* buf, int size, double x) {
  if (x < 10) snprintf(buf, size, "x%.2f", x);
  else if (x < 100) snprintf(buf, size, "x%.1f", x);
  else snprintf(buf, size, "x%.0f", x);
}

#define CELL 22

static void print_header(const size_result* r) {
  printf("%6s %6s %6s | %13s", "n", "nv", "batch", "mj_forward");
  for (int j = 1; j < r->nmeas; j++) printf(" | %*s", CELL, r->m[j].name);
  printf("\n");
}

static void print_row(const size_result* r, double tol) {
  char t[16], q[16], cell[64];
  fmt_num(t, sizeof t, r->m[0].median_us);
  printf("%6d %6d %6d | %10s us", r->n, r->nv, r->batches, t);
  for (int j = 1; j < r->nmeas; j++) {
    const meas* x = &r->m[j];
    if (x->nbatch == 0) {
      snprintf(cell, sizeof cell, "%.*s", 10, x->note);  // "skipped: O" -> trimmed below
      char* colon = strchr(cell, ':');
      if (colon) *colon = 0;
      printf(" | %*s", CELL, cell);
      continue;
    }
    fmt_num(t, sizeof t, x->median_us);
    fmt_ratio(q, sizeof q, x->ratio);
    snprintf(cell, sizeof cell, "%s us %7s", t, q);
    printf(" | %*s", CELL, cell);
  }
  printf("\n%6s %6s %6s | %13s", "", "", "", "max rel err");
  for (int j = 1; j < r->nmeas; j++) {
    const meas* x = &r->m[j];
    if (x->nbatch == 0) { printf(" | %*s", CELL, "-"); continue; }
    snprintf(cell, sizeof cell, "%s%.1e", x->max_err <= tol ? "" : "(!) ", x->max_err);
    printf(" | %*s", CELL, cell);
  }
  printf("\n");
  for (int j = 1; j < r->nmeas; j++)
    if (r->m[j].note[0]) printf("         note: %s %s\n", r->m[j].name, r->m[j].note);
  fflush(stdout);
}

static void cpu_model(char* buf, int size) {
  snprintf(buf, size, "unknown");
  FILE* f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    char* colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) || !colon) continue;
    colon++;
    while (*colon == ' ' || *colon == '\t') colon++;
    colon[strcspn(colon, "\n")] = 0;
    snprintf(buf, size, "%s", colon);
    break;
  }
  fclose(f);
}

static void json_str(FILE* f, const char* s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

static void json_num(FILE* f, double x) {
  if (isfinite(x)) fprintf(f, "%.6g", x);
  else fprintf(f, "null");
}

// Writes the results to f (opened at the start) and closes it; nonzero when a write failed.
static int write_json(FILE* f, const config* cfg, const char* cpu, long cores,
                      const size_result* res, int nres) {
  fprintf(f, "{\n  \"machine\": {\"cpu\": ");
  json_str(f, cpu);
  fprintf(f, ", \"cores\": %ld, \"mujoco\": ", cores);
  json_str(f, mj_versionString());
  fprintf(f, "},\n  \"settings\": {\"min_time_s\": %g, \"size_cap_s\": %g, \"batches\": %d, "
          "\"states\": %d, \"seed\": %llu, \"quick\": %s, \"unit\": \"us per call, median of "
          "per-batch means\"},\n  \"results\": [",
          cfg->min_time, cfg->size_cap, cfg->batches, cfg->states, cfg->seed,
          cfg->quick ? "true" : "false");
  const char* sep = "\n";
  for (int i = 0; i < nres; i++) {
    const size_result* r = &res[i];
    for (int j = 0; j < (r->error[0] ? 1 : r->nmeas); j++) {
      const meas* x = &r->m[j];
      fprintf(f, "%s    {\"n\": %d, \"nv\": %d, \"model\": ", sep, r->n, r->nv);
      json_str(f, r->model);
      fprintf(f, ", \"backend\": ");
      json_str(f, r->error[0] ? "mj_forward" : x->name);
      if (r->error[0] || x->nbatch == 0) {
        fprintf(f, ", \"median_us\": null, \"ratio\": null, \"max_rel_err\": null, \"note\": ");
        json_str(f, r->error[0] ? r->error : x->note);
      } else {
        fprintf(f, ", \"median_us\": ");
        json_num(f, x->median_us);
        fprintf(f, ", \"ratio\": ");
        json_num(f, x->ratio);
        fprintf(f, ", \"max_rel_err\": ");
        json_num(f, x->max_err);
        fprintf(f, ", \"batches\": %d, \"calls_per_batch\": %d, \"states\": %d", x->nbatch, x->reps,
                r->states);
      }
      fprintf(f, "}");
      sep = ",\n";
    }
  }
  fprintf(f, "\n  ]\n}\n");
  return fclose(f) ? 1 : 0;
}

// ------------------------------------------------------------------------------------------------

static int parse_sizes(const char* s, config* cfg) {
  cfg->nsizes = 0;
  while (*s) {
    char* end;
    long v = strtol(s, &end, 10);
    if (end == s || v < 1 || v > CFD_CHAIN_MAX_LINKS || cfg->nsizes == MAX_SIZES) return 1;
    cfg->sizes[cfg->nsizes++] = (int)v;
    s = end;
    if (*s == ',') s++;
    else if (*s) return 1;
  }
  return cfg->nsizes == 0;
}

static void usage(FILE* f) {
  fprintf(f,
          "usage: chainfd-bench-cpu [--sizes 7,100,1000 | --models M1;M2] [--quick] [--json FILE]\n"
          "                         [--min-time S] [--cap S] [--batches B] [--states K] [--seed S]\n"
          "                         [--tol E]\n"
          "  --sizes    chain sizes (default 7,16,32,64,100,200,500,1000,2048,4096); n=7 is\n"
          "             scenes/arm7.xml, others chain:N,random=1,seed=1,damping=0.05,armature=0.01\n"
          "  --models   these models instead (MJCF files or chain: specs, separated by ';'): trees,\n"
          "             ball joints, floating bases; n is then the model's dofs\n"
          "  --quick    sizes 7,100,1000 and short timing (CI smoke test)\n"
          "  --json     also write every figure and the machine to FILE\n"
          "  --min-time seconds of timed calls per measurement (default 0.2; quick 0.02)\n"
          "  --cap      seconds per size before fewer batches are used (default 12; quick 2)\n"
          "  --batches  timed batches per measurement (default 32; quick 16; at least 3)\n"
          "  --states   random states cycled over the batches (default 16)\n"
          "  --seed     random state seed (default 1)\n"
          "  --tol      largest relative qacc error accepted, else exit status 1 (default 1e-6)\n");
}

int main(int argc, char** argv) {
  static const int default_sizes[] = {7, 16, 32, 64, 100, 200, 500, 1000, 2048, 4096};
  config cfg = {.min_time = 0.2, .size_cap = 12, .batches = 32, .states = 16, .seed = 1, .tol = 1e-6};
  cfg.nsizes = (int)(sizeof default_sizes / sizeof default_sizes[0]);
  memcpy(cfg.sizes, default_sizes, sizeof default_sizes);
  const char* prog = "chainfd-bench-cpu", *sizes = NULL;
  double min_time = -1, cap = -1;
  int batches = -1;
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    int more = i + 1 < argc;
    if (!strcmp(a, "--quick")) cfg.quick = 1;
    else if (!strcmp(a, "--sizes") && more) sizes = argv[++i];
    else if (!strcmp(a, "--models") && more) {
      char* list = argv[++i];  // split in place at ';'
      for (char* t = strtok(list, ";"); t && cfg.nmodels < MAX_SIZES; t = strtok(NULL, ";"))
        cfg.models[cfg.nmodels++] = t;
      if (!cfg.nmodels) {
        fprintf(stderr, "%s: --models needs at least one model\n", prog);
        return 2;
      }
    }
    else if (!strcmp(a, "--json") && more) cfg.json = argv[++i];
    else if (!strcmp(a, "--min-time") && more) {
      if (cfd_arg_double(prog, a, argv[++i], 0, 3600, &min_time)) return 2;
    } else if (!strcmp(a, "--cap") && more) {
      if (cfd_arg_double(prog, a, argv[++i], 0, 86400, &cap)) return 2;
    } else if (!strcmp(a, "--batches") && more) {
      if (cfd_arg_int(prog, a, argv[++i], 3, 1000000, &batches)) return 2;
    } else if (!strcmp(a, "--states") && more) {
      if (cfd_arg_int(prog, a, argv[++i], 1, 1000000, &cfg.states)) return 2;
    } else if (!strcmp(a, "--seed") && more) {
      if (cfd_arg_u64(prog, a, argv[++i], &cfg.seed)) return 2;
    } else if (!strcmp(a, "--tol") && more) {
      if (cfd_arg_double(prog, a, argv[++i], 0, 1, &cfg.tol)) return 2;
    }
    else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
    else {
      fprintf(stderr, "chainfd-bench-cpu: unknown or incomplete option '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (cfg.quick) {
    static const int quick_sizes[] = {7, 100, 1000};
    cfg.nsizes = 3;
    memcpy(cfg.sizes, quick_sizes, sizeof quick_sizes);
    cfg.min_time = 0.02;
    cfg.size_cap = 2;
    cfg.batches = 16;
  }
  if (sizes && parse_sizes(sizes, &cfg)) {
    fprintf(stderr, "chainfd-bench-cpu: bad --sizes '%s' (e.g. 7,100,1000; 1..%d)\n", sizes,
            CFD_CHAIN_MAX_LINKS);
    return 2;
  }
  if (min_time >= 0) cfg.min_time = min_time;
  if (cap >= 0) cfg.size_cap = cap;
  if (batches >= 0) cfg.batches = batches;
  // the output is opened before the benchmark runs, so that a path that cannot be written fails now
  FILE* json = NULL;
  if (cfg.json && !(json = fopen(cfg.json, "w"))) {
    fprintf(stderr, "%s: cannot write --json %s: %s\n", prog, cfg.json, strerror(errno));
    return 2;
  }

  char cpu[256];
  cpu_model(cpu, sizeof cpu);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  printf("chainfd-bench-cpu: %s, %ld cores, MuJoCo %s, one thread\n", cpu, cores,
         mj_versionString());
  printf("median time per call (us) of mj_forward and of each back end's cfd_solver_qacc (gather "
         "+ forward dynamics);\nratio = mj_forward / back end; max rel err = inf-norm error of "
         "qacc vs mj_forward's over the states\n\n");

  if (cfg.nmodels) cfg.nsizes = cfg.nmodels;
  size_result* res = calloc(cfg.nsizes, sizeof *res);
  if (!res) {
    fprintf(stderr, "%s: out of memory\n", prog);
    if (json) fclose(json);
    return 1;
  }
  int bad = 0, header = 0;
  for (int i = 0; i < cfg.nsizes; i++) {
    size_result* r = &res[i];
    if (bench_size(cfg.sizes[i], cfg.nmodels ? cfg.models[i] : NULL, &cfg, r)) {
      printf("%6d   cannot load %s: %s\n", r->n, r->model, r->error);
      if (r->n <= CFD_CHAIN_MAX_MJ_LINKS) bad = 1;  // deeper chains: MuJoCo's limit, not ours
      continue;
    }
    if (!header) { print_header(r); header = 1; }
    print_row(r, cfg.tol);
    for (int j = 1; j < r->nmeas; j++) {
      const meas* x = &r->m[j];
      if (x->nbatch && !(x->max_err <= cfg.tol)) bad = 1;
      if (!strncmp(x->note, "failed", 6)) bad = 1;
    }
  }

  // the targets for the fast path
  static const struct { int n; double ratio; } targets[] = {{7, 1 / 1.5}, {100, 10}, {1000, 100}};
  printf("\ntargets (cpu.fast ratio):");
  for (int t = 0; t < 3; t++)
    for (int i = 0; i < cfg.nsizes; i++) {
      const size_result* r = &res[i];
      if (r->n != targets[t].n || r->error[0]) continue;
      for (int j = 1; j < r->nmeas; j++)
        if (!strcmp(r->m[j].name, "cpu.fast") && r->m[j].nbatch)
          printf("  n=%d x%.2f (>= x%.2f %s)", r->n, r->m[j].ratio, targets[t].ratio,
                 r->m[j].ratio >= targets[t].ratio ? "met" : "MISSED");
    }
  printf("\n");

  if (json) {
    if (write_json(json, &cfg, cpu, cores, res, cfg.nsizes)) {
      fprintf(stderr, "chainfd-bench-cpu: cannot write %s\n", cfg.json);
      bad = 1;
    } else {
      printf("wrote %s\n", cfg.json);
    }
  }
  free(res);
  return bad;
}
