// The batched GPU API in a build without CUDA: every entry point says so.
#include <stdio.h>
#include <stdlib.h>

#include "chainfd_batch.h"
#include "gpu_tuning.h"

int cfd_gpu_cfa_threads = 0;
int cfd_gpu_cfa_cluster = 0;
int cfd_gpu_rollout_lanes = 1;
int cfd_gpu_rollout_world = 1;
int cfd_gpu_rollout_scan = 1;
long cfd_gpu_rollout_scan_steps = 0;
int cfd_gpu_lanes_xch = 1;
int cfd_gpu_cfa_profile = 0;
int cfd_gpu_abia_variant = 0;
int cfd_gpu_abia_ran = 0;
int cfd_gpu_split_resident = 1;
int cfd_gpu_abia_scan_links = 0;
int cfd_gpu_abia_scan_profile = 0;
int cfd_gpu_abia_scan_groups = 0;
int cfd_gpu_abia_scan_chosen = 0;
int cfd_gpu_abia_scan_phases(double* us, int max) { return 0; }
int cfd_gpu_cfa_phases(double* us, int max) { return 0; }

int cfd_gpu_device_count(void) { return 0; }
int cfd_gpu_device_name(int device, char* buf, int size) { return 1; }
size_t cfd_gpu_device_memory(int device) { return 0; }
int cfd_gpu_create(const cfd_chain* c, int device, cfd_gpu_algorithm alg, cfd_gpu** out, char* err,
                   int err_size) {
  *out = NULL;
  snprintf(err, err_size, "%s: chainfd was built without CUDA (nvcc was not found)",
           cfd_gpu_algorithm_name(alg));
  return 1;
}
void cfd_gpu_free(cfd_gpu* g) {}
int cfd_gpu_fd(cfd_gpu* g, int B, const double* q, const double* qd, const double* tau,
               const double* extra_diag, double* qacc, cfd_memory where, char* err, int err_size) {
  snprintf(err, err_size, "chainfd was built without CUDA");
  return 1;
}
int cfd_gpu_fd_begin(cfd_gpu* g, int B, const double* q, const double* qd,
                     const double* extra_diag, char* err, int err_size) {
  snprintf(err, err_size, "chainfd was built without CUDA");
  return 1;
}
int cfd_gpu_fd_finish(cfd_gpu* g, const double* tau, double* qacc, char* err, int err_size) {
  snprintf(err, err_size, "chainfd was built without CUDA");
  return 1;
}
void cfd_gpu_fd_cancel(cfd_gpu* g) {}
int cfd_gpu_fd_splits(const cfd_gpu* g, int B) { return 0; }
double cfd_gpu_last_kernel_ms(const cfd_gpu* g) { return 0; }
int cfd_gpu_time_kernels(cfd_gpu* g, int on) { return 0; }
int cfd_gpu_split_launches(const struct cfd_gpu* g) { return 0; }
int cfd_gpu_abia_split_kind(const struct cfd_gpu* g, int B) { return 0; }
int cfd_gpu_rollout_create(const cfd_chain* c, const struct cfd_rollout_params* p, int device,
                           cfd_gpu_rollout** out, char* err, int err_size) {
  *out = NULL;
  snprintf(err, err_size, "GPU rollout: chainfd was built without CUDA (nvcc was not found)");
  return 1;
}
void cfd_gpu_rollout_free(cfd_gpu_rollout* r) {}
int cfd_gpu_rollout_run(cfd_gpu_rollout* r, int B, int H, const double* init, int shared_init,
                        const double* ctrl, double* out, int final_only, cfd_memory where,
                        char* err, int err_size) {
  snprintf(err, err_size, "chainfd was built without CUDA");
  return 1;
}
double cfd_gpu_rollout_last_kernel_ms(const cfd_gpu_rollout* r) { return 0; }
long cfd_gpu_rollout_last_warnings(const cfd_gpu_rollout* r) { return 0; }
int cfd_gpu_rollout_instance_warnings(const cfd_gpu_rollout* r, int* counts, char* err, int err_size) {
  snprintf(err, err_size, "GPU rollout: chainfd was built without CUDA (nvcc was not found)");
  return 1;
}
void* cfd_gpu_host_alloc(size_t bytes) { return malloc(bytes ? bytes : 1); }
void cfd_gpu_host_free(void* p) { free(p); }
