// chainfd_batch.h: batched forward dynamics on a GPU. One chain model, B states in, B qacc out.
//
//   cfd_gpu* g;
//   if (cfd_gpu_create(&chain, device, CFD_GPU_CFA, &g, err, sizeof err)) { ...err... }
//   cfd_gpu_fd(g, B, q, qd, tau, NULL, qacc, CFD_HOST, err, sizeof err);
//   cfd_gpu_free(g);
//
// Arrays are instance-major, [B][n] (state b's vector at b * n), in host memory (CFD_HOST) or in
// device memory of the context's device (CFD_DEVICE). Device buffers are allocated once and
// reused; they grow only when a larger B arrives. Every CUDA failure (no GPU, bad device index,
// out of memory for a huge B, a kernel fault) comes back as a non-zero return and a message; none
// of them exits or crashes. With host arrays qacc is written only on success; with device arrays
// (CFD_DEVICE) the kernels write it in place, so a failed call may leave it partly written. A context
// serves one thread at a time. The GPU path does not check its inputs for NaN (the single-state
// solver does): a NaN state gives NaN qacc.
#ifndef CHAINFD_BATCH_H
#define CHAINFD_BATCH_H

#include <stddef.h>

#include "chain.h"

#ifdef __cplusplus
extern "C" {
#endif

// CFD_GPU_ABIA_F32: the ABIA batch kernel in single precision (inputs and outputs stay double;
// the error is measured by test_gpu and the benchmark).
typedef enum {
  CFD_GPU_ABIA = 0,
  CFD_GPU_JSIIA = 1,
  CFD_GPU_CFA = 2,
  CFD_GPU_ABIA_F32 = 3
} cfd_gpu_algorithm;
typedef enum { CFD_HOST = 0, CFD_DEVICE = 1 } cfd_memory;

typedef struct cfd_gpu cfd_gpu;

// Number of usable CUDA devices (0 when there is none, no driver, or no CUDA in this build).
int cfd_gpu_device_count(void);
// A one-line description of device i (name, compute capability, memory) into buf.
int cfd_gpu_device_name(int device, char* buf, int size);
// Bytes of memory of device i (0 when there is no such device).
size_t cfd_gpu_device_memory(int device);

// cuda.cfa refuses chains past this many links (MuJoCo compiles none longer: this concerns tiled
// and extended chains). Its refinement's residual is inverse dynamics in the world frame, whose
// rounding on long ill-conditioned chains can bias the point the refinement converges to beyond
// the 1e-8 CFA promises, unseen by its convergence test: `chainfd-cfa-accuracy --probe 40 --gpu`
// on the H100 had cuda.cfa accept a 1536-link state at 1.0e-7 (cpu.cfa refused it), while its
// worst accepted were 6.7e-11 at 1024 links, 1.1e-10 at 1152 and 3.3e-9 at 1280
// (bench/results/h100_cfa_probe.txt). cpu.cfa, whose residual is in link frames, has no cap.
#define CFD_GPU_CFA_MAX_N 1024

// Uploads chain c to device `device` for one algorithm. The chain is copied; c may be freed.
int cfd_gpu_create(const cfd_chain* c, int device, cfd_gpu_algorithm alg, cfd_gpu** out, char* err,
                   int err_size);
void cfd_gpu_free(cfd_gpu* g);

// qacc = (M + diag(extra_diag))^-1 (tau - bias) for B states; extra_diag may be NULL.
int cfd_gpu_fd(cfd_gpu* g, int B, const double* q, const double* qd, const double* tau,
               const double* extra_diag, double* qacc, cfd_memory where, char* err, int err_size);

// cfd_gpu_fd for host arrays in two halves, so that the caller's own work overlaps the GPU's:
// cfd_gpu_fd_begin takes the states and starts what needs no tau, cfd_gpu_fd_finish takes tau
// ([B][n]) and gives qacc as cfd_gpu_fd would (up to rounding). CFA: begin launches kinematics,
// bias forces and the factors of the elimination, finish launches tau's solve through them.
// ABIA on chains up to 256 links that have joint frames (hinges and slides without pitch), B <=
// 64: begin launches the sweep out and the articulated inertias' part of the sweep in and brings
// their factors down while the caller works, finish runs the bias forces' and accelerations'
// sweeps on the host from them and tau, two O(n) passes (aba_world_tau.h). ABIA where cfd_gpu_fd
// would run the scans over blocks of links (longer chains, B <= 64): begin launches the blocks'
// maps and the velocity and Riccati scans, finish the rest. Otherwise begin keeps the states on
// the host and finish is cfd_gpu_fd. The device does not wait on the host in between: the caller may use it. Every
// begin must end in finish or cancel; between them the context takes no other call. Returns as
// cfd_gpu_fd; after a failed begin nothing is under way.
int cfd_gpu_fd_begin(cfd_gpu* g, int B, const double* q, const double* qd,
                     const double* extra_diag, char* err, int err_size);
int cfd_gpu_fd_finish(cfd_gpu* g, const double* tau, double* qacc, char* err, int err_size);
void cfd_gpu_fd_cancel(cfd_gpu* g);
// Whether cfd_gpu_fd_begin starts work on the device for B states (0: it holds them).
int cfd_gpu_fd_splits(const cfd_gpu* g, int B);

// Milliseconds the last cfd_gpu_fd spent on the device, from CUDA events around the kernels
// (transfers excluded, the launch's host time included; for a split CFA call or one of ABIA's
// scans, from begin's launch to finish's end, so the caller's time between them is included; for
// ABIA's resident split kernel, begin's kernel, from its own clock). 0 where the call was not
// timed (cfd_gpu_time_kernels).
double cfd_gpu_last_kernel_ms(const cfd_gpu* g);
// Whether g's calls time their kernels for cfd_gpu_last_kernel_ms (0, the default: not timed, as
// the two events cost a call 3 to 4 us on the H100: cuda.abia at 8 links 18.2 against 15.0 us,
// at 1024 links 68.6 against 65.2). A split call takes the setting at the launch that starts its
// timing (begin's where begin launches). Returns the old setting.
int cfd_gpu_time_kernels(cfd_gpu* g, int on);

const char* cfd_gpu_algorithm_name(cfd_gpu_algorithm alg);

// Page-locked host memory (cudaMallocHost; plain malloc without a device): host arrays there cross
// the bus at its full speed. Free with cfd_gpu_host_free.
void* cfd_gpu_host_alloc(size_t bytes);
void cfd_gpu_host_free(void* p);

// Rollouts on the GPU (used by chainfd_rollout, plugin/chainfd_rollout.h): the chain and the step
// parameters (kernels/rollout_step.h) live on the device; one launch runs all H steps (a group of
// lanes or a thread per instance) with the state on the device, no host round trip and no
// allocation per step.
struct cfd_rollout_params;
typedef struct cfd_gpu_rollout cfd_gpu_rollout;
int cfd_gpu_rollout_create(const cfd_chain* c, const struct cfd_rollout_params* p, int device,
                           cfd_gpu_rollout** out, char* err, int err_size);
void cfd_gpu_rollout_free(cfd_gpu_rollout* r);
// init: [1 or B][2n] (qpos then qvel; shared_init: one for all), ctrl: [B][H][nu],
// out: [B][H+1][2n], or [B][2n] when final_only. All in `where` memory.
int cfd_gpu_rollout_run(cfd_gpu_rollout* r, int B, int H, const double* init, int shared_init,
                        const double* ctrl, double* out, int final_only, cfd_memory where,
                        char* err, int err_size);
double cfd_gpu_rollout_last_kernel_ms(const cfd_gpu_rollout* r);
// The last run's bad-state warnings (kernels/rollout_step.h): the total, and per instance into
// counts (the run's B entries, copied from the device).
long cfd_gpu_rollout_last_warnings(const cfd_gpu_rollout* r);
int cfd_gpu_rollout_instance_warnings(const cfd_gpu_rollout* r, int* counts, char* err, int err_size);

#ifdef __cplusplus
}
#endif

#endif  // CHAINFD_BATCH_H
