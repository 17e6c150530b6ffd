// The back-end table and the single-state solver.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gpu.h"
#include "cfd_math.h"
#include "mj_chain.h"

static const cfd_backend backends[] = {
    {"cpu.fast", "articulated-body algorithm in joint frames, vector algebra (the fast CPU path)",
     cfd_fast_work_size, cfd_fd_fast_prepared, cfd_fast_prepare, 0, 0, -1},
    {"cpu.abia", "articulated-body inertia algorithm, reference ([GPUFD] eq. 8)",
     cfd_abia_work_size, cfd_fd_abia_cpu, NULL, 0, 0, -1},
    {"cpu.jsiia", "joint-space inertia inversion: composite rigid bodies + tree LTDL (eq. 7)",
     cfd_jsiia_work_size, cfd_fd_jsiia_cpu, NULL, 0, 0, -1},
    {"cpu.cfa", "constraint force algorithm, odd-even elimination (eq. 9-19, Algorithm 2)",
     cfd_cfa_work_size, cfd_fd_cfa_cpu, NULL, 1, 1, -1},
    {"cpu.dca", "divide and conquer, the ABA inside each subsystem (DCAe, paper 004)",
     cfd_dca_work_size, cfd_fd_dca_cpu, NULL, 0, 2, -1},
    {"cuda.abia", "articulated-body algorithm on a CUDA device", NULL, NULL, NULL, 0, 0,
     CFD_GPU_ABIA},
    {"cuda.jsiia", "joint-space inertia inversion on a CUDA device (cuSOLVER)", NULL, NULL, NULL, 0,
     1, CFD_GPU_JSIIA},
    {"cuda.cfa", "constraint force algorithm on a CUDA device", NULL, NULL, NULL, 1, 1, CFD_GPU_CFA},
    {"cuda.dca", "divide and conquer (DCAe) on a CUDA device", NULL, NULL, NULL, 0, 2, CFD_GPU_DCA},
};

int cfd_backend_count(void) { return (int)(sizeof(backends) / sizeof(backends[0])); }

const cfd_backend* cfd_backend_get(int i) {
  return (i >= 0 && i < cfd_backend_count()) ? &backends[i] : NULL;
}

const cfd_backend* cfd_backend_find(const char* name) {
  for (int i = 0; i < cfd_backend_count(); i++)
    if (!strcmp(backends[i].name, name)) return &backends[i];
  return NULL;
}

int cfd_backend_supports(const cfd_backend* b, const mjModel* m, const cfd_chain* c, char* why,
                         int why_size) {
  if (b->needs_serial)
    for (int i = 0; i < c->n; i++)
      if (c->parent[i] != i - 1 || (b->needs_serial == 1 && c->kind[i] != CFD_LINK_SCREW)) {
        char body[128], jnt[128];
        int ball = c->parent[i] == i - 1;
        snprintf(why, why_size, "%s: joint %s of body %s %s; %s takes %s (cpu.fast, cpu.abia, "
                 "cpu.jsiia and cuda.abia take trees, ball and free joints; cpu.dca and cuda.dca "
                 "unbranched chains with them)",
                 b->name, cfd_mj_name(m, mjOBJ_JOINT, c->jnt[i], jnt, sizeof jnt),
                 cfd_mj_name(m, mjOBJ_BODY, c->body[i], body, sizeof body),
                 ball ? "is a ball or free joint" : "starts a branch of the kinematic tree", b->name,
                 b->needs_serial == 1 ? "serial chains of hinges and slides"
                                      : "unbranched chains (hinges, slides, balls)");
        return 1;
      }
  if (!b->needs_link_mass) return 0;
  for (int i = 0; i < c->n; i++) {
    const double* J = c->inertia + 36 * i;
    double L[36];
    memcpy(L, J, sizeof(L));
    if (cfd_chol_factor(L, 6, 6)) {
      char body[128], jnt[128];
      snprintf(why, why_size,
               "%s: the link of joint %s (body %s) has a singular spatial inertia (massless, or "
               "an inner joint of a body with several joints); CFA needs every link's J invertible",
               b->name, cfd_mj_name(m, mjOBJ_JOINT, c->jnt[i], jnt, sizeof jnt),
               cfd_mj_name(m, mjOBJ_BODY, c->body[i], body, sizeof body));
      return 1;
    }
  }
  return 0;
}

int cfd_backend_gpu_create(const cfd_backend* b, const mjModel* m, const cfd_chain* c, int device,
                           cfd_gpu** out, char* err, int err_size) {
  *out = NULL;
  return cfd_backend_supports(b, m, c, err, err_size) ||
         cfd_gpu_create(c, device, (cfd_gpu_algorithm)b->gpu_algorithm, out, err, err_size);
}

struct cfd_solver {
  cfd_chain chain;
  const cfd_backend* backend;
  cfd_gpu* gpu;  // GPU back ends
  char gpu_err[256];
  double* work;
  double* q;
  double* qd;
  double* tau;
  double* qacc;
  double* xfrc_work;
  double* pair;  // GPU: the two states of cfd_solver_fd2 (q, qd, tau, diag, qacc; 2n each)
  double* early; // q, qd of cfd_solver_gather_q_qd, then those of the split call under way (4n)
  int split;     // a split call under way: 0 none, 1 fd, 2 fd2
};

void cfd_solver_free(cfd_solver* s) {
  if (!s) return;
  cfd_chain_free(&s->chain);
  cfd_gpu_free(s->gpu);  // gives up a split call under way
  free(s->work); free(s->q); free(s->qd); free(s->tau); free(s->qacc); free(s->xfrc_work);
  free(s->pair); free(s->early);
  free(s);
}

cfd_solver* cfd_solver_create(const mjModel* m, const char* backend, char* err, int err_size) {
  return cfd_solver_create_on(m, backend, 0, err, err_size);
}

cfd_solver* cfd_solver_create_on(const mjModel* m, const char* backend, int device, char* err,
                                 int err_size) {
  const cfd_backend* b = cfd_backend_find(backend);
  if (!b) {
    int len = snprintf(err, err_size, "unknown backend '%s' (one of:", backend);
    for (int i = 0; i < cfd_backend_count() && len < err_size; i++)
      len += snprintf(err + len, err_size - len, " %s", backends[i].name);
    if (len < err_size) snprintf(err + len, err_size - len, ")");
    return NULL;
  }
  cfd_solver* s = calloc(1, sizeof(*s));
  if (!s) { snprintf(err, err_size, "out of memory"); return NULL; }
  if (cfd_chain_from_model(m, &s->chain, err, err_size)) { free(s); return NULL; }
  if (cfd_backend_supports(b, m, &s->chain, err, err_size)) { cfd_solver_free(s); return NULL; }
  int n = s->chain.n;
  s->backend = b;
  if (b->gpu_algorithm >= 0 &&  // (supports was asked above)
      cfd_gpu_create(&s->chain, device, (cfd_gpu_algorithm)b->gpu_algorithm, &s->gpu, err, err_size)) {
    cfd_solver_free(s);
    return NULL;
  }
  s->work = malloc(sizeof(double) * ((b->work_size ? b->work_size(n) : 0) + 1));
  s->q = malloc(sizeof(double) * n);
  s->qd = malloc(sizeof(double) * n);
  s->tau = malloc(sizeof(double) * n);
  s->qacc = malloc(sizeof(double) * n);
  s->xfrc_work = malloc(sizeof(double) * 6 * m->nbody);
  s->early = malloc(sizeof(double) * 4 * n);
  if (!s->work || !s->q || !s->qd || !s->tau || !s->qacc || !s->xfrc_work || !s->early) {
    snprintf(err, err_size, "out of memory for %s on %d links", b->name, n);
    cfd_solver_free(s);
    return NULL;
  }
  if (b->prepare) b->prepare(&s->chain, s->work);  // nonzero: the back end's slower exact path
  return s;
}

const cfd_chain* cfd_solver_chain(const cfd_solver* s) { return &s->chain; }
const cfd_backend* cfd_solver_backend(const cfd_solver* s) { return s->backend; }

void cfd_solver_gather(cfd_solver* s, const mjModel* m, const mjData* d, const double** q,
                       const double** qd, const double** tau) {
  cfd_state_from_data(m, d, &s->chain, s->q, s->qd, s->tau, s->xfrc_work);
  *q = s->q; *qd = s->qd; *tau = s->tau;
}

void cfd_solver_gather_q_qd(cfd_solver* s, const mjData* d, const double** q, const double** qd) {
  cfd_state_q_qd(d, &s->chain, s->early, s->early + s->chain.n);
  *q = s->early;
  *qd = s->early + s->chain.n;
}

int cfd_solver_fd(cfd_solver* s, const double* q, const double* qd, const double* tau,
                  const double* extra_diag, double* qacc) {
  int n = s->chain.n;
  if (cfd_check_finite(q, n) || cfd_check_finite(qd, n) || cfd_check_finite(tau, n))
    return CFD_ERR_NONFINITE;
  if (s->gpu) {
    return cfd_gpu_fd(s->gpu, 1, q, qd, tau, extra_diag, qacc, CFD_HOST, s->gpu_err,
                      sizeof s->gpu_err) ? CFD_ERR_GPU : CFD_OK;
  }
  return s->backend->fd(&s->chain, q, qd, tau, extra_diag, qacc, s->work);
}

// the pair buffers of fd2 (or the first half of each for fd), allocated on first use
static double* pair_buffers(cfd_solver* s) {
  if (!s->pair && !(s->pair = malloc(sizeof(double) * 10 * (size_t)s->chain.n)))
    snprintf(s->gpu_err, sizeof s->gpu_err, "out of host memory");
  return s->pair;
}

int cfd_solver_fd2(cfd_solver* s, const double* q, const double* qd, const double* tau,
                   const double* extra_diag, double* qacc, double* qacc_diag) {
  int n = s->chain.n;
  // two solves on the CPU, which has nothing to share between them, and for cuda.jsiia, whose
  // batched cuSOLVER path is slower for two states than its single-matrix one twice
  // (chainfd-bench-step; bench/results/LOG.md)
  if (!s->gpu || s->backend->gpu_algorithm == CFD_GPU_JSIIA) {
    int st = cfd_solver_fd(s, q, qd, tau, NULL, qacc);
    return st ? st : cfd_solver_fd(s, q, qd, tau, extra_diag, qacc_diag);
  }
  if (cfd_check_finite(q, n) || cfd_check_finite(qd, n) || cfd_check_finite(tau, n))
    return CFD_ERR_NONFINITE;
  if (!pair_buffers(s)) return CFD_ERR_GPU;
  double *q2 = s->pair, *qd2 = q2 + 2 * n, *tau2 = qd2 + 2 * n, *d2 = tau2 + 2 * n, *out = d2 + 2 * n;
  for (int k = 0; k < 2; k++) {
    memcpy(q2 + k * n, q, sizeof(double) * n);
    memcpy(qd2 + k * n, qd, sizeof(double) * n);
    memcpy(tau2 + k * n, tau, sizeof(double) * n);
  }
  for (int i = 0; i < n; i++) d2[i] = 0, d2[n + i] = extra_diag[i];
  if (cfd_gpu_fd(s->gpu, 2, q2, qd2, tau2, d2, out, CFD_HOST, s->gpu_err, sizeof s->gpu_err))
    return CFD_ERR_GPU;
  memcpy(qacc, out, sizeof(double) * n);
  memcpy(qacc_diag, out + n, sizeof(double) * n);
  return CFD_OK;
}

int cfd_solver_splits(const cfd_solver* s) {
  return s->gpu && cfd_gpu_fd_splits(s->gpu, 2);  // one state, or two with a diagonal
}

int cfd_solver_begin(cfd_solver* s, const double* q, const double* qd, const double* extra_diag) {
  int n = s->chain.n;
  if (s->split) cfd_solver_cancel(s);  // left over (a step abandoned by an error handler's jump)
  if (!cfd_solver_splits(s)) return 1;
  if (cfd_check_finite(q, n) || cfd_check_finite(qd, n)) return CFD_ERR_NONFINITE;
  double* p = pair_buffers(s);
  if (!p) return CFD_ERR_GPU;
  int B = extra_diag ? 2 : 1;
  double *q2 = p, *qd2 = q2 + 2 * n, *d2 = qd2 + 4 * n;
  for (int k = 0; k < B; k++) {
    memcpy(q2 + k * n, q, sizeof(double) * n);
    memcpy(qd2 + k * n, qd, sizeof(double) * n);
  }
  if (extra_diag)
    for (int i = 0; i < n; i++) d2[i] = 0, d2[n + i] = extra_diag[i];
  if (cfd_gpu_fd_begin(s->gpu, B, q2, qd2, extra_diag ? d2 : NULL, s->gpu_err, sizeof s->gpu_err))
    return CFD_ERR_GPU;
  memcpy(s->early + 2 * n, q, sizeof(double) * n);
  memcpy(s->early + 3 * n, qd, sizeof(double) * n);
  s->split = B;
  return 0;
}

void cfd_solver_cancel(cfd_solver* s) {
  if (s->split) cfd_gpu_fd_cancel(s->gpu);
  s->split = 0;
}

int cfd_solver_finish(cfd_solver* s, const double* q, const double* qd, const double* tau,
                      const double* extra_diag, double* qacc, double* qacc_diag) {
  int n = s->chain.n, B = s->split;
  if (!B) {
    snprintf(s->gpu_err, sizeof s->gpu_err, "cfd_solver_finish without cfd_solver_begin");
    return CFD_ERR_GPU;
  }
  double *p = s->pair, *tau2 = p + 4 * n, *d2 = tau2 + 2 * n, *out = d2 + 2 * n;
  if (memcmp(q, s->early + 2 * n, sizeof(double) * n) ||
      memcmp(qd, s->early + 3 * n, sizeof(double) * n) || (B == 2) != (extra_diag != NULL) ||
      (extra_diag && memcmp(extra_diag, d2 + n, sizeof(double) * n)) || cfd_check_finite(tau, n)) {
    // the state (or the diagonal, which may depend on it) moved since begin (a control
    // callback), or tau is not finite: the plain path, which also gives the non-finite status
    cfd_solver_cancel(s);
    return extra_diag ? cfd_solver_fd2(s, q, qd, tau, extra_diag, qacc, qacc_diag)
                      : cfd_solver_fd(s, q, qd, tau, NULL, qacc);
  }
  s->split = 0;
  for (int k = 0; k < B; k++) memcpy(tau2 + k * n, tau, sizeof(double) * n);
  if (cfd_gpu_fd_finish(s->gpu, tau2, out, s->gpu_err, sizeof s->gpu_err)) return CFD_ERR_GPU;
  memcpy(qacc, out, sizeof(double) * n);
  if (B == 2) memcpy(qacc_diag, out + n, sizeof(double) * n);
  return CFD_OK;
}

int cfd_solver_is_gpu(const cfd_solver* s) { return s->gpu != NULL; }

double cfd_solver_kernel_ms(const cfd_solver* s) { return s->gpu ? cfd_gpu_last_kernel_ms(s->gpu) : 0; }

void cfd_solver_time_kernels(cfd_solver* s, int on) {
  if (s->gpu) cfd_gpu_time_kernels(s->gpu, on);
}

int cfd_solver_set_tuning(cfd_solver* s, const cfd_gpu_tuning* t, char* err, int err_size) {
  return s->gpu ? cfd_gpu_set_tuning(s->gpu, t, err, err_size) : 0;
}

const char* cfd_solver_error(const cfd_solver* s, int status) {
  return status == CFD_ERR_GPU ? s->gpu_err : cfd_status_str(status);
}

int cfd_solver_qacc(cfd_solver* s, const mjModel* m, const mjData* d, const double* extra_diag,
                    double* qacc, char* err, int err_size) {
  const double *q, *qd, *tau;
  cfd_solver_gather(s, m, d, &q, &qd, &tau);
  int st = cfd_solver_fd(s, q, qd, tau, extra_diag, s->qacc);
  if (st) {
    snprintf(err, err_size, "%s: %s", s->backend->name,
             cfd_solver_error(s, st));
    return st;
  }
  for (int i = 0; i < s->chain.n; i++) qacc[s->chain.dof[i]] = s->qacc[i];
  return 0;
}
