// chainfd_fd: batched forward dynamics over the back-end table (CPU: state by state; GPU: one batch).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auto.h"
#include "backend.h"
#include "gpu.h"
#include "chainfd_fd.h"
#include "mj_chain.h"

struct chainfd_fd {
  const cfd_backend* backend;
  cfd_solver* solver;  // the chain, and the CPU back end's scratch
  cfd_gpu* gpu;
  int nq, nv;
  double* q;           // B x nv: qpos - qpos0 in link order (links are dofs, one qpos each)
  double* out;         // B x nv: the CPU back ends' qacc, copied out once every state is solved
  int capacity;
};

void chainfd_fd_free(chainfd_fd* f) {
  if (!f) return;
  cfd_gpu_free(f->gpu);
  cfd_solver_free(f->solver);
  free(f->q);
  free(f->out);
  free(f);
}

int chainfd_fd_create(const mjModel* m, const char* backend, int device, int typical_batch,
                      chainfd_fd** out, char* err, int err_size) {
  *out = NULL;
  int gpus = cfd_gpu_device_count();
  if (!backend) backend = "auto";
  if (!strcmp(backend, "auto"))
    backend = cfd_auto_pick(m->nv, typical_batch > 0 ? typical_batch : 1, device >= 0 && device < gpus,
                            cfd_model_shape(m), NULL, 0);
  const cfd_backend* b = cfd_backend_find(backend);
  if (!b) {
    snprintf(err, err_size, "unknown back end '%s'", backend);
    return 1;
  }
  chainfd_fd* f = calloc(1, sizeof(*f));
  if (!f) {
    snprintf(err, err_size, "out of memory");
    return 1;
  }
  f->backend = b;
  f->nq = m->nq;
  f->nv = m->nv;
  // the chain (and the CPU scratch) through the solver; a GPU context beside it for batches
  f->solver = cfd_solver_create(m, b->gpu_algorithm >= 0 ? "cpu.fast" : b->name, err, err_size);
  if (!f->solver) {
    chainfd_fd_free(f);
    return 1;
  }
  if (b->gpu_algorithm >= 0 &&
      cfd_backend_gpu_create(b, m, cfd_solver_chain(f->solver), device, &f->gpu, err, err_size)) {
    chainfd_fd_free(f);
    return 1;
  }
  *out = f;
  return 0;
}

const char* chainfd_fd_backend(const chainfd_fd* f) { return f->backend->name; }

// The first NaN or Inf in x ([B][width]), named; 0 when there is none.
static int find_nonfinite(const double* x, int B, int width, const char* name, char* err,
                          int err_size) {
  for (size_t k = 0; k < (size_t)B * width; k++)
    if (!isfinite(x[k])) {
      snprintf(err, err_size, "state %zu: %s[%zu] is %g", k / width, name, k % width, x[k]);
      return 1;
    }
  return 0;
}

int chainfd_fd_run(chainfd_fd* f, int B, const double* qpos, const double* qvel,
                   const double* qfrc, double* qacc, char* err, int err_size) {
  if (B < 1) {
    snprintf(err, err_size, "batch size must be positive (got %d)", B);
    return 1;
  }
  const cfd_chain* c = cfd_solver_chain(f->solver);
  int n = f->nv;
  // checked here for every back end (the GPU kernels would return NaN qacc for such a state)
  if (find_nonfinite(qpos, B, f->nq, "qpos", err, err_size) ||
      find_nonfinite(qvel, B, n, "qvel", err, err_size) ||
      find_nonfinite(qfrc, B, n, "qfrc", err, err_size))
    return 1;
  if (B > f->capacity) {
    free(f->q);
    free(f->out);
    f->q = malloc(sizeof(double) * (size_t)B * n);
    f->out = f->gpu ? NULL : malloc(sizeof(double) * (size_t)B * n);
    f->capacity = f->q && (f->gpu || f->out) ? B : 0;
    if (!f->capacity) {
      snprintf(err, err_size, "out of host memory for %d states", B);
      return 1;
    }
  }
  for (size_t b = 0; b < (size_t)B; b++)
    cfd_chain_q_from_qpos(c, qpos + b * f->nq, f->q + b * n);
  if (f->gpu) return cfd_gpu_fd(f->gpu, B, f->q, qvel, qfrc, NULL, qacc, CFD_HOST, err, err_size);
  for (size_t b = 0; b < (size_t)B; b++) {
    int st = cfd_solver_fd(f->solver, f->q + b * n, qvel + b * n, qfrc + b * n, NULL, f->out + b * n);
    if (st) {
      snprintf(err, err_size, "%s, state %zu: %s", f->backend->name, b, cfd_status_str(st));
      return 1;
    }
  }
  memcpy(qacc, f->out, sizeof(double) * (size_t)B * n);
  return 0;
}
