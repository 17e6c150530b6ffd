// The batched GPU API in a build without CUDA: every entry point that would run says so.
#include <stdio.h>
#include <stdlib.h>

#include "gpu.h"

static int no_cuda(const char* what, char* err, int err_size) {
  snprintf(err, err_size, "%s: chainfd was built without CUDA (nvcc was not found)", what);
  return 1;
}

int cfd_gpu_device_count(void) { return 0; }
int cfd_gpu_device_name(int device, char* buf, int size) { return 1; }
size_t cfd_gpu_device_memory(int device) { return 0; }
int cfd_gpu_create(const cfd_chain* c, int device, cfd_gpu_algorithm alg, cfd_gpu** out, char* err,
                   int err_size) {
  *out = NULL;
  return no_cuda(cfd_gpu_algorithm_name(alg), err, err_size);
}
void cfd_gpu_free(cfd_gpu* g) {}
int cfd_gpu_fd(cfd_gpu* g, int B, const double* q, const double* qd, const double* tau,
               const double* extra_diag, double* qacc, cfd_memory where, char* err, int err_size) {
  return no_cuda("GPU", err, err_size);
}
int cfd_gpu_fd_begin(cfd_gpu* g, int B, const double* q, const double* qd,
                     const double* extra_diag, char* err, int err_size) {
  return no_cuda("GPU", err, err_size);
}
int cfd_gpu_fd_finish(cfd_gpu* g, const double* tau, double* qacc, char* err, int err_size) {
  return no_cuda("GPU", err, err_size);
}
void cfd_gpu_fd_cancel(cfd_gpu* g) {}
int cfd_gpu_fd_splits(const cfd_gpu* g, int B) { return 0; }
double cfd_gpu_last_kernel_ms(const cfd_gpu* g) { return 0; }
int cfd_gpu_time_kernels(cfd_gpu* g, int on) { return 0; }
int cfd_gpu_set_tuning(cfd_gpu* g, const cfd_gpu_tuning* t, char* err, int err_size) {
  return no_cuda("GPU", err, err_size);
}
cfd_abia_kernel cfd_gpu_abia_rule(const cfd_gpu* g, int B) { return CFD_ABIA_RULE; }
int cfd_gpu_abia_ran(const cfd_gpu* g) { return 0; }
int cfd_gpu_scan_links_ran(const cfd_gpu* g) { return 0; }
int cfd_gpu_dca_links(const cfd_gpu* g) { return 0; }
int cfd_gpu_phases(const cfd_gpu* g, double* us, int max) { return 0; }
int cfd_gpu_split_launches(const cfd_gpu* g) { return 0; }
int cfd_gpu_abia_split_kind(const cfd_gpu* g, int B) { return 0; }
int cfd_gpu_rollout_create(const cfd_chain* c, const struct cfd_rollout_params* p, int device,
                           cfd_gpu_rollout** out, char* err, int err_size) {
  *out = NULL;
  return no_cuda("GPU rollout", err, err_size);
}
void cfd_gpu_rollout_free(cfd_gpu_rollout* r) {}
int cfd_gpu_rollout_run(cfd_gpu_rollout* r, int B, int H, const double* init, int shared_init,
                        const double* ctrl, double* out, int final_only, cfd_memory where,
                        char* err, int err_size) {
  return no_cuda("GPU rollout", err, err_size);
}
double cfd_gpu_rollout_last_kernel_ms(const cfd_gpu_rollout* r) { return 0; }
int cfd_gpu_deriv_batch(cfd_gpu_rollout* r, int B, const double* x, const double* u, double* Dq,
                        double* Dv, double* Du, cfd_memory where, char* err, int err_size) {
  return no_cuda("GPU derivatives", err, err_size);
}
int cfd_gpu_rollout_set_tuning(cfd_gpu_rollout* r, const cfd_gpu_tuning* t, char* err, int err_size) {
  return no_cuda("GPU rollout", err, err_size);
}
long cfd_gpu_rollout_scan_steps(const cfd_gpu_rollout* r) { return 0; }
long cfd_gpu_rollout_last_warnings(const cfd_gpu_rollout* r) { return 0; }
int cfd_gpu_rollout_instance_warnings(const cfd_gpu_rollout* r, int* counts, char* err, int err_size) {
  return no_cuda("GPU rollout", err, err_size);
}
void* cfd_gpu_host_alloc(size_t bytes) { return malloc(bytes ? bytes : 1); }
void cfd_gpu_host_free(void* p) { free(p); }
