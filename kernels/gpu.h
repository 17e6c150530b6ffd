// gpu.h: batched forward dynamics on a GPU (internal). One chain model, B states in, B qacc out.
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
#ifndef CHAINFD_GPU_H
#define CHAINFD_GPU_H

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
  CFD_GPU_ABIA_F32 = 3,
  CFD_GPU_DCA = 4  // DCAe (dca.h): unbranched chains (hinges, slides, balls)
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
// the 1e-8 CFA promises, unseen by its convergence test (`chainfd-cfa-accuracy --probe 40 --gpu`
// found such states past 1024 links; docs/RESULTS.md). cpu.cfa, whose residual is in link frames,
// has no cap.
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
// would run the scans over blocks of links and the resident kernel above cannot (129 to 256 links
// up to B = 64 without mapped page-locked memory, longer chains up to B = 512; cfd_gpu_abia_rule):
// begin launches the blocks'
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
// the two events add a few microseconds to every call). A split call takes the setting at the launch that starts its
// timing (begin's where begin launches). Returns the old setting.
int cfd_gpu_time_kernels(cfd_gpu* g, int on);

const char* cfd_gpu_algorithm_name(cfd_gpu_algorithm alg);

// ------------------------------------------------------------------------------------------------
// Tuning and diagnostics. A context (cfd_gpu, cfd_gpu_rollout) holds its own: nothing here is
// process-wide, so contexts in several threads never share a knob or a counter. All-zero is the
// library's behaviour (every choice made by its rule); the benchmarks and tests force a kernel or a
// layout through this struct to measure or check the alternatives.

// cuda.abia's kernels, numbered as in bench/results (1 .. 10; 2, 3 and 6 lost and live in
// bench/variants/). cfd_gpu_abia_rule picks one by (n, B).
typedef enum {
  CFD_ABIA_RULE = 0,         // chosen by the rule
  CFD_ABIA_THREAD = 1,       // a thread per instance, link-frame ABA, lean scratch in global memory
  CFD_ABIA_LANES = 4,        // a group of 8 lanes per instance, link frames (aba_lanes.cuh)
  CFD_ABIA_WORLD_THREAD = 5, // a thread per instance, world coordinates, scratch in local memory
  CFD_ABIA_WORLD_LANES = 7,  // a group of lanes per instance, a link per lane (aba_world_lanes.cuh)
  CFD_ABIA_WORLD_WARP = 8,   // a warp per instance in blocks of 32 links (aba_world_blocks.cuh)
  CFD_ABIA_WORLD_WARPS = 9,  // a warp per block of 32 links, a thread block per instance
  CFD_ABIA_SCAN = 10,        // scans over blocks of links, a cluster per instance (abia_scan.cu)
  CFD_ABIA_TREE = 11,        // a thread per instance on a tree or with ball joints, link frames
                             // (aba_tree.h), scratch interleaved in global memory
  CFD_ABIA_WORLD_TREE = 12   // the same in world coordinates (aba_world_tree.h): 7 numbers a
                             // link kept, the model in shared memory; trees up to 64 links
} cfd_abia_kernel;

// cfd_gpu_tuning.cfa_steps: 0 takes CFD_CFA_REFINE_STEPS (chain.h); CFD_CFA_NO_REFINE: none.
#define CFD_CFA_NO_REFINE (-1)

typedef struct cfd_gpu_tuning {
  int abia_kernel;          // cfd_abia_kernel; a kernel forced where it cannot run (a chain too
                            // long, or without joint frames) is replaced by the nearest that can
  int scan_links;           // the scan kernel's links per block (0: the rule)
  int scan_groups;          // its groups of 8 lanes per thread block (0: the rule; 4 to 32)
  int cfa_threads;          // CFA's threads per block (0: by n and B)
  int cfa_cluster;          // CFA's thread blocks per cluster (0: by n and B)
  int cfa_steps;            // CFA's refinement steps (0: CFD_CFA_REFINE_STEPS; CFD_CFA_NO_REFINE)
  int lanes_shuffle;        // the 8-lane kernels' backward sweep by warp shuffles, not shared memory
  int split_relaunch;       // ABIA's split kernel leaves after each call instead of staying resident
  int rollout_thread;       // rollouts a thread per instance instead of a group of lanes
  int rollout_link_frames;  // rollouts by lanes in link frames instead of world coordinates
  int rollout_no_scan;      // long-chain rollouts by the lanes instead of the scan kernel
  int dca_links;            // cuda.dca's links per subsystem (0: the rule, about n / 256 and at least
                            // CFD_DCA_LINKS_DEFAULT; at least n / 1024, a thread per subsystem)
  int profile;              // the CFA, scan and DCA kernels record their phases' end times
                            // (instance 0)
  // A kernel from outside the library (bench/variants) in place of cuda.abia's own, called with g's
  // buffers and stream as the library's launch would be; returns a cudaError_t. NULL: none. A
  // split call (cfd_gpu_fd_begin) then holds the states on the host: nothing of it overlaps.
  int (*abia_launch)(cfd_gpu* g, int B, const double* q, const double* qd, const double* tau,
                     const double* extra, double* qacc);
} cfd_gpu_tuning;

// Sets g's tuning (NULL: the defaults); applies from the next call. 0, or 1 with a message (out of
// device memory for the profile's marks).
int cfd_gpu_set_tuning(cfd_gpu* g, const cfd_gpu_tuning* t, char* err, int err_size);
// The ABIA kernel the rule picks for B states of g's chain, and the one g's last ABIA launch ran
// (0: none yet).
cfd_abia_kernel cfd_gpu_abia_rule(const cfd_gpu* g, int B);
int cfd_gpu_abia_ran(const cfd_gpu* g);
// The scan kernel's links per block in g's last launch of it (0: none yet).
int cfd_gpu_scan_links_ran(const cfd_gpu* g);
// cuda.dca's links per subsystem in g's next launch (its tuning, or the rule; 0 for another
// algorithm): what cfd_fd_dca_cpu_ex takes to be its twin.
int cfd_gpu_dca_links(const cfd_gpu* g);
// With tuning.profile: the durations (us) of the phases of g's last profiled launch (CFA: its
// phases; the scan kernel: maps, velocity and Riccati scans, inertias, bias scan, bias,
// acceleration scan, accelerations). Returns how many (at most max).
int cfd_gpu_phases(const cfd_gpu* g, double* us, int max);
// How cuda.abia's split call (cfd_gpu_fd_begin) runs B states: 0 held on the host until finish,
// 1 the world warps' resident kernel (tau's share on the host), 2 the scan kernel's two launches;
// and how often g has launched the resident kernel.
int cfd_gpu_abia_split_kind(const cfd_gpu* g, int B);
int cfd_gpu_split_launches(const cfd_gpu* g);

// Page-locked host memory (cudaMallocHost; plain malloc without a device): host arrays there cross
// the bus at its full speed. Free with cfd_gpu_host_free.
void* cfd_gpu_host_alloc(size_t bytes);
void cfd_gpu_host_free(void* p);

// Rollouts on the GPU (used by chainfd_rollout, include/chainfd_rollout.h): the chain and the step
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
// The forward dynamics' derivatives of B states (kernels/deriv_instance.h, a thread per instance)
// with r's chain and parameters: x [B][2n], u [B][nu] (NULL: zero), outputs [B][n][n] (Dq, Dv)
// and [B][n][nu] (Du), any NULL. 0, or 1 with a message (a state with an active joint limit, a
// singular system, a CUDA error).
int cfd_gpu_deriv_batch(cfd_gpu_rollout* r, int B, const double* x, const double* u, double* Dq,
                        double* Dv, double* Du, cfd_memory where, char* err, int err_size);
// A rollout's tuning (cfd_gpu_tuning's rollout_* and lanes_shuffle fields; the rest go to its
// long-chain scan context). NULL: the defaults. 0, or 1 with a message.
int cfd_gpu_rollout_set_tuning(cfd_gpu_rollout* r, const cfd_gpu_tuning* t, char* err, int err_size);
// Steps this rollout has taken by the scan kernel (long chains, small batches), all runs.
long cfd_gpu_rollout_scan_steps(const cfd_gpu_rollout* r);
// The last run's bad-state warnings (kernels/rollout_step.h): the total, and per instance into
// counts (the run's B entries, copied from the device).
long cfd_gpu_rollout_last_warnings(const cfd_gpu_rollout* r);
int cfd_gpu_rollout_instance_warnings(const cfd_gpu_rollout* r, int* counts, char* err, int err_size);

#ifdef __cplusplus
}
#endif

#endif  // CHAINFD_GPU_H
