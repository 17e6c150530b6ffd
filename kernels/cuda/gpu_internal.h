// gpu_internal.h: what the CUDA files of one context share: the context itself, error checks, and
// each algorithm's launcher. Not a public header.
#ifndef CHAINFD_GPU_INTERNAL_H
#define CHAINFD_GPU_INTERNAL_H

#include <cuda_runtime.h>
#include <cusolverDn.h>
#include <stdio.h>

#include "gpu.h"

#define CFD_SCAN_PARTITIONS 3  // the scan kernel's partitions kept (struct cfd_gpu)

struct cfd_gpu {
  cfd_gpu_tuning tune;  // cfd_gpu_set_tuning; all zero: the rules
  int abia_ran;         // the ABIA kernel of the last launch (cfd_abia_kernel)
  int scan_links_ran;   // the scan kernel's links per block in its last launch
  unsigned long long* marks;  // device, 64 phase end times (tune.profile), else NULL
  int device;
  cfd_gpu_algorithm alg;
  int n;
  int tree;            // the chain is not serial (a tree, or ball joints): ABIA's tree kernels
  int one_chain;       // parent[i] = i - 1 throughout (balls allowed): the scans can take it
  int* tree_plan;      // device: the world tree kernel's plan (cfd_awt_plan: n + 1 entries)
  int tree_slots;      // its slots
  cfd_chain chain;     // the model, device pointers
  cfd_chain chain_jf;  // ABIA: the model in joint frames (cfd_chain_in_joint_frames), device
                       // pointers; home_R NULL where it has none (a screw with pitch)
  float* chain_f32;    // ABIA_F32: the chain's arrays in single precision (R, p, S, J, armature)
  double* jinv;        // n x 36: J_i^-1 (CFA)
  double* basis;       // n x 36: P_i = [W_i S_i] (CFA)
  double* sigma;       // n: |S_i| (CFA, cfd_cfa_sigma)
  unsigned char* scan_can_end;  // ABIA, host: where the scan kernel's blocks may end (n flags)
  // ABIA, device: CFD_SCAN_PARTITIONS partitions of the chain into the scan kernel's blocks (n + 1
  // starts each; one chain, a few and many take different lengths), partition k of scan_links[k]
  // links per block (0: none yet) into scan_nb[k] blocks; scan_oldest: the one a new length
  // replaces
  int* scan_starts;
  int scan_links[CFD_SCAN_PARTITIONS], scan_nb[CFD_SCAN_PARTITIONS], scan_oldest, scan_max_cluster;
  int* dca_starts;     // DCA, device: the subsystems' first links (n + 1), for dca_links links
  int dca_links, dca_p;  // per subsystem (0: none yet) in dca_p subsystems (cuda/dca.cu)
  double* scan_work;   // ABIA: the scan kernel's scratch (scan_doubles), allocated on first use
  size_t scan_doubles;
  int cfa_threads, cfa_asked, cfa_cluster;  // CFA's launch layout: block size, cluster asked, got
  int capacity;        // instances the scratch below holds (one launch chunk)
  int staged;          // instances the host-staging vectors hold
  double* staging;      // host arrays on the device: q, qd, tau, extra, qacc ([B][n] each, packed)
  double* host;         // page-locked: the same five, packed, then the kernels' status (one int)
  double* bias;        // [B][n] bias torques from the ID, then inverse dynamics for refinement
  double* resid;       // [B][n] refinement residual and correction
  double* work;        // per-algorithm scratch, work_per_instance * capacity doubles
  double** ptrs;       // cuSOLVER batched pointer arrays (2 * capacity); CFA: 4 norms per instance
  int* info;           // cuSOLVER info (capacity), and the kernels' error flag (info[capacity])
                       // where the device cannot map page-locked memory (cfd_gpu_error_flag)
  double* solver_work;
  int solver_lwork;
  cusolverDnHandle_t solver;
  cudaStream_t stream;
  int stream_borrowed;  // stream is a caller's (cfd_gpu_use_stream): not destroyed with g
  cudaEvent_t start, stop;
  cudaEvent_t copied;   // a batch's status (and qacc) down; its flag's reset is queued after it
  int flag_clear;       // the kernels' error flag is zero, or queued to be, before any later work
  float last_ms;
  int time_kernels;     // calls record start and stop around their kernels (cfd_gpu_time_kernels)
  int timed;            // this call's start is recorded (begin's, for a split call)
  int* status;          // page-locked: the kernels' error flag itself where the device maps it
                        // (maps_host), else its copy down (device arrays; a copy into pageable
                        // memory would cost the call a staged transfer)
  int pending;          // a split call (cfd_gpu_fd_begin): 0 none, 1 held on the host, 2 begun on
                        // the device (CFA, ABIA's scans), 3 factors on their way to the host (ABIA)
  int pending_B, pending_extra;
  double* factors;      // ABIA split: page-locked, the factors of factors_held states, then
                        // the host sweeps' u / d of factors_held + 1
  int factors_held;
  unsigned long long* split_done;  // ABIA split: page-locked, per state the call's number and
                                   // the kernel's start and end (globaltimer ns), then the
                                   // kernel's 4 control words (abia_split_kernel)
  unsigned long long split_seq;    // the last split call's number (from 1)
  int split_resident;              // B of the split kernel that may be running, or 0
  int split_launches;              // the split kernel's launches so far
  long long split_last_ns;         // when the last split call finished (CLOCK_MONOTONIC)
  int maps_host;                   // kernels may read and write page-locked host memory
};

// Where the FD kernels raise a state's failure (a CFD_ERR_* code; zero: none): page-locked host
// memory where the device maps it, so that a call reads it after its event with no copy down (a
// copy after the kernel cost a few us of every call, most of a small batch's), else a device word.
static inline int* cfd_gpu_error_flag(cfd_gpu* g) {
  return g->maps_host ? g->status : g->info + g->capacity;
}

// Scratch doubles one instance needs for algorithm alg on n links.
size_t cfd_gpu_work_per_instance(cfd_gpu_algorithm alg, int n);

// Each algorithm's launches for B instances in the context's buffers (q, qd, tau, extra may be
// the caller's device arrays). They enqueue work on g->stream and return a CUDA error code.
// Inverse dynamics tau = M qdd + bias (qdd NULL: the bias), [B][n]; work: ID scratch per instance.
cudaError_t cfd_gpu_launch_id(cfd_gpu* g, int B, const double* q, const double* qd,
                              const double* qdd, double* tau, double* work, long work_stride);

// r = tau - id - (armature + extra) qacc, [B][n]: the residual of one refinement step
cudaError_t cfd_gpu_launch_residual(cfd_gpu* g, int B, const double* tau, const double* extra,
                                    const double* id, const double* qacc, double* r);
cudaError_t cfd_gpu_launch_abia(cfd_gpu* g, int B, const double* q, const double* qd,
                                const double* tau, const double* extra, double* qacc);
// ABIA's split call (abia.cu): whether begin runs on the device for B states, and the launch of
// its kernel, which stays resident between calls; in, factors, done and ctrl are page-locked host
// memory (abia_split_kernel says what each holds), last the number of the last call done.
int cfd_gpu_abia_splits(const cfd_gpu* g, int B);
cudaError_t cfd_gpu_launch_abia_split(cfd_gpu* g, int B, const double* in, double* factors,
                                      unsigned long long* done, unsigned long long* ctrl,
                                      unsigned long long last);
// CFA's refinement steps under g's tuning
static inline int cfd_gpu_cfa_steps(const cfd_gpu* g) {
  return g->tune.cfa_steps == CFD_CFA_NO_REFINE ? 0
         : g->tune.cfa_steps > 0               ? g->tune.cfa_steps
                                               : CFD_CFA_REFINE_STEPS;
}
// ABIA as scans over blocks of links, a cluster of up to 16 thread blocks per instance
// (abia_scan.cu): in one launch (ABS_WHOLE), or a split call's two on the same states: ABS_BEGIN
// (what needs no tau: the blocks' maps and the velocity and Riccati scans, kept in the scan
// kernel's scratch) and ABS_FINISH (the rest). A split call takes them where a launch of B states
// would take the scans, in one chunk (cfd_gpu_abia_scan_splits).
enum { ABS_WHOLE = 0, ABS_BEGIN = 1, ABS_FINISH = 2 };
cudaError_t cfd_gpu_launch_abia_scan(cfd_gpu* g, int B, const double* q, const double* qd,
                                     const double* tau, const double* extra, double* qacc,
                                     int* error, int stage);
int cfd_gpu_abia_scan_splits(const cfd_gpu* g, int B);
// The same in one launch, each state raising its failure in its own word of errors (B ints,
// device memory): the GPU rollout's steps on long chains (rollout.cu), which reset only the
// states that fail.
cudaError_t cfd_gpu_launch_abia_scan_each(cfd_gpu* g, int B, const double* q, const double* qd,
                                          const double* tau, const double* extra, double* qacc,
                                          int* errors);
// Has g launch on s (the caller's stream, which outlives g) instead of its own: the rollout's
// steps and the scan kernel's launches then queue in one order.
cudaError_t cfd_gpu_use_stream(cfd_gpu* g, cudaStream_t s);
// abia_f32.cu, which is compiled in single precision and so sees none of this file's types
extern "C" cudaError_t cfd_launch_abia_f32(const float* chain, int n, const double* gravity, int B,
                                           const double* q, const double* qd, const double* tau,
                                           const double* extra, double* qacc, float* work,
                                           int* error, cudaStream_t stream);
// floats one instance of the single-precision ABIA keeps per link (scratch, q, qd, tau, extra, qacc)
#define CFD_ABIA_F32_FLOATS(n) ((size_t)(n) * (14 + 5))
// CFA in one launch (CFA_WHOLE), or a split call's two: CFA_BEGIN (what needs no tau: bias
// forces, blocks, the elimination, stored in g->work and g->bias) and CFA_FINISH (tau's solve
// through the stored elimination, then refinement), on the same states and chunk.
enum { CFA_WHOLE = 0, CFA_BEGIN = 1, CFA_FINISH = 2 };
cudaError_t cfd_gpu_launch_cfa(cfd_gpu* g, int B, const double* q, const double* qd,
                               const double* tau, const double* extra, double* qacc, int phase);
// DCAe (dca.cu): a thread block per instance; one instance's scratch for m links per subsystem
// (the context's: cfd_gpu_dca_links)
cudaError_t cfd_gpu_launch_dca(cfd_gpu* g, int B, const double* q, const double* qd,
                               const double* tau, const double* extra, double* qacc);
size_t cfd_gpu_dca_doubles(int n, int m);
// JSIIA also uses cuSOLVER; returns 0 or a message-worthy failure in *what.
int cfd_gpu_launch_jsiia(cfd_gpu* g, int B, const double* q, const double* qd, const double* tau,
                         const double* extra, double* qacc, const char** what);

// ID scratch layout per instance (doubles): local poses 12n, world poses 12n, world screws 6n,
// velocities 6n, accelerations 6n.
#define CFD_ID_WORK(n) ((size_t)(n) * 42)

static inline int cfd_pow2_threads(int n, int maxt) {
  int t = 32;
  while (t < n && t < maxt) t *= 2;
  return t;
}

// The chain's model on the device: dev gets c's scalars and device copies of its arrays; dev_jf the
// same in joint frames (cfd_chain_in_joint_frames) when asked, sharing the armature, its home_R
// NULL where there are none (a screw with pitch). Free with cfd_gpu_chain_free (also after a
// failure part way).
cudaError_t cfd_gpu_chain_upload(const cfd_chain* c, int joint_frames, cfd_chain* dev,
                                 cfd_chain* dev_jf);
void cfd_gpu_chain_free(cfd_chain* dev, cfd_chain* dev_jf);

// A GPU rollout's device copies of its chain and step parameters, its device and stream, and the
// derivatives' device flag (for cuda/deriv.cu, which shares it)
struct cfd_rollout_params;
void cfd_gpu_rollout_model(const cfd_gpu_rollout* r, cfd_chain* chain,
                           struct cfd_rollout_params* params, int* device, cudaStream_t* stream,
                           unsigned long long** deriv_flag);
// Its device block of at least `doubles` for the derivatives' staging of host arrays (grown, kept
// for the next batch); NULL when out of memory
double* cfd_gpu_rollout_deriv_stage(cfd_gpu_rollout* r, size_t doubles);
// Its pinned host word the derivatives' flag is copied into
unsigned long long* cfd_gpu_rollout_deriv_flag_host(cfd_gpu_rollout* r);
// The long chains' derivatives (cuda/deriv_long.cu): their context, made on first use and kept in
// the rollout's slot; a batch from device arrays on the rollout's stream, the flag as cuda/deriv.cu's
// (status 3: links not numbered depth first); asynchronous, so the caller synchronises
typedef struct cfd_gpu_deriv_long cfd_gpu_deriv_long;
cfd_gpu_deriv_long** cfd_gpu_rollout_deriv_long(cfd_gpu_rollout* r);
void cfd_gpu_deriv_long_free(cfd_gpu_deriv_long* L);
int cfd_gpu_deriv_long_run(cfd_gpu_deriv_long** slot, const cfd_chain* c,
                           const struct cfd_rollout_params* p, cudaStream_t stream, int B,
                           const double* x, const double* u, double* Dq, double* Dv, double* Du,
                           unsigned long long* flag, char* err, int err_size);
// The derivatives' device flag back to rest (0): each batch reads it and resets it only after a
// failure (cuda/deriv.cu)
cudaError_t cfd_gpu_deriv_flag_reset(unsigned long long* flag, cudaStream_t stream);

#ifdef __CUDACC__
// A kernel's failure into the error flag (cfd_gpu_error_flag): a plain store, since the flag may
// be host memory across the bus, where atomics need the platform's support; any failing thread's
// code will do.
__device__ __forceinline__ void cfd_gpu_raise(int* flag, int code) { *(volatile int*)flag = code; }

// Instance b's failure (status 1 singular, 2 at a limit, 3 not depth first) into the derivatives'
// flag: the status in the high word and INT_MAX - b in the low, so one atomicMax keeps the highest
// status and, among its instances, the lowest, and the message names an instance that has it
__device__ __forceinline__ void cfd_gpu_deriv_fail(unsigned long long* flag, int status, int b) {
  atomicMax(flag, (unsigned long long)status << 32 | (unsigned)(0x7fffffff - b));
}

// The GPU's nanosecond clock (one for all SMs)
__device__ __forceinline__ unsigned long long cfd_gpu_clock_ns(void) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The model's arrays copied into shared memory (model: CFD_MODEL_SHARED_DOUBLES(n)) by the block's
// threads; c's pointers then point there. The caller synchronises the block after.
#define CFD_MODEL_SHARED_DOUBLES(n) ((size_t)55 * (n))  // home_R, home_p, screw, inertia, armature
__device__ __forceinline__ void cfd_model_to_shared(cfd_chain& c, double* model) {
  const double* from[5] = {c.home_R, c.home_p, c.screw, c.inertia, c.armature};
  double** to[5] = {&c.home_R, &c.home_p, &c.screw, &c.inertia, &c.armature};
  const int width[5] = {9, 3, 6, 36, 1};
  double* m = model;
  for (int k = 0; k < 5; k++) {
    for (int j = threadIdx.x; j < width[k] * c.n; j += blockDim.x) m[j] = from[k][j];
    *to[k] = m;
    m += width[k] * c.n;
  }
}
#endif

#endif  // CHAINFD_GPU_INTERNAL_H
