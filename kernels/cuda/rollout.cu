// Rollouts on the GPU: all H steps in one launch, controls in, states out, nothing else crossing to
// the host; model and step parameters are device copies made once. Chains up to 32 links: a group
// of lanes per instance, one link per lane, in world coordinates (aba_world_lanes.cuh), up to the
// batch where a thread per instance fills the GPU (below). Longer chains: up to a few thousand
// instances a group of 8 lanes per instance in link frames (aba_lanes.cuh); beyond, one thread per
// instance runs the steps of rollout_step.h (the CPU rollout's code) with its state interleaved
// with its neighbours'. (The link-frame lanes and the thread per instance also serve chains with no
// joint frames, and the rollout fields of cfd_gpu_tuning.) Chains past 256 links in batches up to 1024: each
// step's dynamics by the scan kernel (abia_scan.cu), two launches a step (scan_* below).
#include <stdlib.h>
#include <string.h>

#include "aba_lanes.cuh"
#include "aba_world_blocks.cuh"
#include "aba_world_lanes.cuh"
#include "gpu_internal.h"
#include "rollout_step.h"

#define ROLLOUT_THREADS 128

// What a run reports back in one copy: an error status and the total of the bad-state warnings
// (rollout_step.h); the warnings per instance stay on the device until asked for.
struct rollout_flags {
  int status;
  unsigned long long warnings;
};

// The instance's warnings into warn and the total
__device__ __forceinline__ void report_warnings(int* warn, long b, int count, rollout_flags* flags) {
  warn[b] = count;
  if (count) atomicAdd(&flags->warnings, (unsigned long long)count);
}

// Whether pred holds on any lane of this thread's group of W lanes (W divides 32; every lane of
// the warp calls it)
template <int W>
__device__ __forceinline__ bool group_any(bool pred) {
  unsigned ballot = __ballot_sync(0xffffffffu, pred);
  if (W == 32) return ballot != 0;
  return (ballot >> ((threadIdx.x & 31) / W * W)) & ((1u << (W & 31)) - 1);
}

struct cfd_gpu_rollout {
  cfd_gpu_tuning tune;          // cfd_gpu_rollout_set_tuning; all zero: the rules
  long scan_steps;              // steps taken by the scan kernel, all runs
  int device, n, nu;
  int tree;                     // a tree or ball or free joints: the thread kernel, aba_tree.h
  cfd_chain chain;              // device arrays
  cfd_chain chain_jf;           // the chain in joint frames, device arrays (home_R NULL: none)
  cfd_rollout_params params;    // device arrays
  void* param_block;            // one allocation behind params' arrays
  int capacity, staged_B, staged_H;
  int distinct_dofs;            // every actuator drives its own joint
  double *work, *init, *ctrl, *out;
  rollout_flags* flags;
  unsigned long long* deriv_flag;       // the derivatives' status and instance (cuda/deriv.cu),
  unsigned long long* deriv_flag_host;  // and its pinned host copy
  double* deriv_stage;          // and their staging of host arrays, grown as batches need
  size_t deriv_stage_doubles;
  cfd_gpu_deriv_long* deriv_long;  // the long chains' derivatives (cuda/deriv_long.cu), made on use
  int* warn;                    // per instance of the last run
  int warn_capacity, last_B;
  long last_warnings;
  cudaStream_t stream;
  cudaEvent_t start, stop;
  float last_ms;
  // long chains (scan_run): the scan kernel's context (on this stream), the state of scan_capacity
  // instances, and the dynamics at the reset state (reset: 0 not yet computed, 1 computed, 2
  // singular there)
  cfd_gpu* scan;
  int* dof_acts;  // dof i's actuators: dof_acts[n + 1 + k] for k in [dof_acts[i], dof_acts[i + 1])
  int scan_capacity, reset;
  double *sx, *reset_x;
  int* sflags;
};

// (layout: 1, aba_core.h's lean sweeps; CFD_ROLLOUT_TREE on a tree or ball or free joints)
// ROWS: the model has constraint rows; without, p.rows is NULL at compile time and the rows' code
// (rollout_step.h) is left out, sparing the kernel its registers
template <bool ROWS>
__global__ void __launch_bounds__(ROLLOUT_THREADS, 4)
rollout_kernel(cfd_chain c, cfd_rollout_params p, int B, int H, const double* __restrict__ init,
               int shared_init, const double* __restrict__ ctrl, double* __restrict__ out,
               int final_only, double* work, rollout_flags* flags, int* warn, int layout) {
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  if (!ROWS) p.rows = NULL, p.neq = 0;
  int n = p.n;
  double* w = work + b;
  double* qpos = cfd_rollout_qpos(w, n, B, layout);
  double* qvel = cfd_rollout_qvel(w, n, B, layout);
  const double* x0 = init + (shared_init ? 0 : (size_t)b * 2 * n);
  for (int i = 0; i < n; i++) {
    qpos[(long)i * B] = x0[i];
    qvel[(long)i * B] = x0[n + i];
  }
  if (ROWS) cfd_rollout_rows_init(&p, w, B, layout);
  double* o = out + (size_t)b * (final_only ? 1 : H + 1) * 2 * n;
  if (!final_only)
    for (int i = 0; i < n; i++) o[i] = x0[i], o[n + i] = x0[n + i];
  int warnings = 0;
  for (int t = 0; t < H; t++) {
    if (cfd_rollout_step(&c, &p, ctrl + ((size_t)b * H + t) * p.nu, w, B, layout, &warnings)) {
      atomicExch(&flags->status, CFD_ERR_SINGULAR);
      break;
    }
    if (!final_only) {
      double* ot = o + (size_t)(t + 1) * 2 * n;
      for (int i = 0; i < n; i++) ot[i] = qpos[(long)i * B], ot[n + i] = qvel[(long)i * B];
    }
  }
  if (final_only)
    for (int i = 0; i < n; i++) o[i] = qpos[(long)i * B], o[n + i] = qvel[(long)i * B];
  report_warnings(warn, b, warnings, flags);
}

// Small chains: the state and scratch in local memory, a per-thread array the hardware interleaves
// and caches write-back in L1, instead of the global scratch (write-through to L2), which costs
// a short arm's steps more memory traffic (bench/results/LOG.md, Rollouts)
#define ROLLOUT_LOCAL_MAX_N 16

// ROWS: room for the constraint rows' scratch too (rollout_step.h), for models with limits,
// friction loss or up to ROLLOUT_LOCAL_MAX_EQ joint equalities
#define ROLLOUT_LOCAL_MAX_EQ 4
template <bool ROWS>
__global__ void __launch_bounds__(ROLLOUT_THREADS, 4)
rollout_local_kernel(cfd_chain c, cfd_rollout_params p, int B, int H,
                     const double* __restrict__ init, int shared_init,
                     const double* __restrict__ ctrl, double* __restrict__ out, int final_only,
                     rollout_flags* flags, int* warn) {
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  if (!ROWS) p.rows = NULL, p.neq = 0;
  int n = p.n;
  double w[ROLLOUT_LOCAL_MAX_N * (CFD_ABA_LINK_DOUBLES_LEAN + 6 + (ROWS ? CFD_ROLLOUT_ROW_DOUBLES : 0)) +
           (ROWS ? ROLLOUT_LOCAL_MAX_N + ROLLOUT_LOCAL_MAX_EQ * (ROLLOUT_LOCAL_MAX_N + CFD_ROLLOUT_EQ_SCALARS) : 0)];
  double* qpos = cfd_rollout_qpos(w, n, 1, 1);
  double* qvel = cfd_rollout_qvel(w, n, 1, 1);
  const double* x0 = init + (shared_init ? 0 : (size_t)b * 2 * n);
  for (int i = 0; i < n; i++) qpos[i] = x0[i], qvel[i] = x0[n + i];
  if (ROWS) cfd_rollout_rows_init(&p, w, 1, 1);
  double* o = out + (size_t)b * (final_only ? 1 : H + 1) * 2 * n;
  if (!final_only)
    for (int i = 0; i < n; i++) o[i] = x0[i], o[n + i] = x0[n + i];
  int warnings = 0;
  for (int t = 0; t < H; t++) {
    if (cfd_rollout_step(&c, &p, ctrl + ((size_t)b * H + t) * p.nu, w, 1, 1, &warnings)) {
      atomicExch(&flags->status, CFD_ERR_SINGULAR);
      break;
    }
    if (!final_only) {
      double* ot = o + (size_t)(t + 1) * 2 * n;
      for (int i = 0; i < n; i++) ot[i] = qpos[i], ot[n + i] = qvel[i];
    }
  }
  if (final_only)
    for (int i = 0; i < n; i++) o[i] = qpos[i], o[n + i] = qvel[i];
  report_warnings(warn, b, warnings, flags);
}

// Chains in link frames, one instance per group of 8 lanes (aba_lanes.cuh): a thread per instance
// leaves the GPU idle at the batch sizes MPC uses (B = 4096 is 128 warps for 528 schedulers) and
// serialises every step on one thread's latency. Besides the sweeps of aba_lanes.cuh, lanes take
// links in turn for the passive forces and the integration, and actuators in turn where each
// drives its own joint. Per-instance state lives in shared memory up to 16 links, in global
// memory (work, instance-major) for longer chains.
#define LANES CFD_LANES
#define LANES_BLOCK 64
// Past these batches a thread per instance already fills the GPU and wins (chainfd-bench-gpu
// --only rollout; docs/RESULTS.md)
#define LANES_MAX_B 8192
#define LANES_GLOBAL_MAX_B 4096
// doubles per link: those of aba_lanes.cuh, then q, tau, diag, qacc, qpos, qvel
#define LANES_PER_LINK (CFD_LANES_LINK_DOUBLES + 6)

static __host__ __device__ size_t lanes_instance_doubles(int n) { return (size_t)LANES_PER_LINK * n + 1; }

// The parts of a lanes kernel's step around its forward dynamics, the group's G lanes taking links
// (or actuators) in turn. Start: the instance's state from x0 into qpos, qvel (and out's first row).
template <int G = LANES>
__device__ __forceinline__ void lanes_start(int n, int lane, const double* x0, double* qpos,
                                            double* qvel, double* o, bool write) {
  for (int i = lane; i < n; i += G) {
    qpos[i] = x0[i];
    qvel[i] = x0[n + i];
    if (write) o[i] = x0[i], o[n + i] = x0[n + i];
  }
}

// Actuators: lanes take them in turn where each drives its own joint; lane 0 alone when several
// share one (their forces then add in the CPU's order). u_t NULL: every control zero; one bad
// (rollout_step.h): a warning and all zero. Returns whether one was bad.
template <int G = LANES>
__device__ __forceinline__ bool lanes_actuators(const cfd_rollout_params& p, int lane, int distinct,
                                                const double* u_t, const double* qpos,
                                                const double* qvel, double* tau, double* diag) {
  bool bad = false;
  for (int a = lane; u_t && a < p.nu; a += G) bad |= cfd_is_bad(cfd_rollout_clamp(&p, a, u_t[a]));
  bad = group_any<G>(bad);
  for (int a = distinct ? lane : 0; a < p.nu && (distinct || lane == 0); a += distinct ? G : 1)
    cfd_rollout_actuator(&p, a, u_t, bad, qpos, qvel, tau, diag, 1);
  return bad;
}

// mj_resetData on the instance's state, lanes taking links in turn
template <int G = LANES>
__device__ __forceinline__ void lanes_reset(const cfd_rollout_params& p, int lane, double* qpos,
                                            double* qvel) {
  for (int i = lane; i < p.n; i += G) qpos[i] = p.reset[i], qvel[i] = 0;
}

// Any bad entry of x among this lane's links, over the whole group
template <int G = LANES>
__device__ __forceinline__ bool lanes_any_bad(int n, int lane, const double* x) {
  bool bad = false;
  for (int i = lane; i < n; i += G) bad |= cfd_is_bad(x[i]);
  return group_any<G>(bad);
}

// Semi-implicit Euler, as cfd_rollout_step, and the state into out's row ot when write.
template <int G = LANES>
__device__ __forceinline__ void lanes_integrate(int n, int lane, double h, const double* qacc,
                                                double* qpos, double* qvel, double* ot, bool write) {
  for (int i = lane; i < n; i += G) {
    qvel[i] += h * qacc[i];
    qpos[i] += h * qvel[i];
    if (write) ot[i] = qpos[i], ot[n + i] = qvel[i];
  }
}

// H steps of a group-of-G-lanes kernel around its forward dynamics, forward(u_t, &bad_ctrl), which
// writes qacc and returns whether some pivot was not positive (every lane of the warp calls it
// together): mj_step's checks and resets as in cfd_rollout_step, semi-implicit Euler, the states
// into o (the instance's rows; written when active). Returns the warnings; sets *failed when a
// reset step was singular again.
template <int G, class Forward>
__device__ __forceinline__ int lanes_steps(const cfd_rollout_params& p, int n, int lane, int H,
                                           const double* ctrl_b, double* qpos, double* qvel,
                                           const double* diag, double* qacc, double* o,
                                           int final_only, bool active, bool* failed,
                                           Forward forward) {
  int warnings = 0;
  for (int t = 0; t < H; t++) {
    const double* u_t = ctrl_b + (size_t)t * p.nu;
    for (int k = 0; k < 2; k++)  // mj_checkPos, mj_checkVel (rollout_step.h)
      if (lanes_any_bad<G>(n, lane, k ? qvel : qpos)) {
        warnings++;
        if (p.autoreset) lanes_reset<G>(p, lane, qpos, qvel), u_t = NULL;
      }
    __syncwarp();
    bool bad_ctrl, singular = forward(u_t, &bad_ctrl);
    warnings += bad_ctrl;
    bool bad_diag = lanes_any_bad<G>(n, lane, diag);  // as in cfd_rollout_step
    bool bad_acc = lanes_any_bad<G>(n, lane, qacc);  // (a ballot: every lane, so never short-circuited)
    bool redo = !bad_diag && (bad_acc || singular);  // mj_checkAcc
    warnings += redo;
    if (p.autoreset && __any_sync(0xffffffffu, redo)) {
      // the whole warp takes the second pass; groups whose step was sound take it again as it was
      if (redo) lanes_reset<G>(p, lane, qpos, qvel), u_t = NULL;
      __syncwarp();
      singular = forward(u_t, &bad_ctrl);
      *failed |= redo && singular;
    }
    if (bad_diag || (!p.autoreset && redo && singular))
      for (int i = lane; i < n; i += G) qacc[i] = NAN;
    __syncwarp();
    lanes_integrate<G>(n, lane, p.h, qacc, qpos, qvel, o + (size_t)(final_only ? 0 : t + 1) * 2 * n,
                       active && (!final_only || t == H - 1));
    __syncwarp();
  }
  if (active && final_only && H == 0)
    for (int i = lane; i < n; i += G) o[i] = qpos[i], o[n + i] = qvel[i];
  return warnings;
}

// GLOBAL: the state in work (one slot per group, idle groups included) instead of shared memory;
// a template parameter, so that the shared-memory version addresses shared memory directly
template <bool GLOBAL>
__global__ void __launch_bounds__(LANES_BLOCK)
rollout_lanes_kernel(cfd_chain c, cfd_rollout_params p, int B, int H,
                     const double* __restrict__ init, int shared_init,
                     const double* __restrict__ ctrl, double* __restrict__ out, int final_only,
                     int distinct, double* work, rollout_flags* flags, int* warn, int use_xch) {
  extern __shared__ double sh[];
  __shared__ __align__(16) double xchs[LANES_BLOCK / LANES][CFD_LANES_XCH];
  int n = p.n, lane = threadIdx.x % LANES;
  long slot = (long)blockIdx.x * (LANES_BLOCK / LANES) + threadIdx.x / LANES, b = slot;
  bool active = b < B;  // idle groups run along on instance B - 1's inputs, in their own slot:
  if (!active) b = B - 1;  // the shuffles need every lane of the warp
  double* s = GLOBAL ? work + lanes_instance_doubles(n) * slot
                     : sh + lanes_instance_doubles(n) * (threadIdx.x / LANES);
  cfd_lanes_links L = cfd_lanes_links_at(s, n);
  double* q = s + CFD_LANES_LINK_DOUBLES * n;
  double *tau = q + n, *diag = tau + n, *qacc = diag + n, *qpos = qacc + n, *qvel = qpos + n;
  double* xch = use_xch ? xchs[threadIdx.x / LANES] : NULL;  // the backward sweep's exchange
  const double* x0 = init + (shared_init ? 0 : (size_t)b * 2 * n);
  double* o = out + (size_t)b * (final_only ? 1 : H + 1) * 2 * n;
  lanes_start(n, lane, x0, qpos, qvel, o, active && !final_only);
  bool failed = false;
  __syncwarp();
  // passive and actuator forces (controls u_t, NULL: zero) and the forward dynamics into qacc;
  // whether some pivot was not positive, and (bad_ctrl) some control bad. Every lane of the warp
  // calls it together (its exchanges and ballots span the warp's four groups).
  auto forward = [&](const double* u_t, bool* bad_ctrl) {
    for (int i = lane; i < n; i += LANES) {  // per link: passive forces and the pose in the parent
      cfd_rollout_passive(&p, i, 1, qpos[i], qvel[i], q + i, tau + i, diag + i);
      cfd_aba_link(&c, i, q[i], 0, NULL, L.R + 9 * i, L.p + 3 * i, NULL, NULL);
    }
    __syncwarp();
    *bad_ctrl = lanes_actuators(p, lane, distinct, u_t, qpos, qvel, tau, diag);
    __syncwarp();
    cfd_lanes_velocities(c, lane, qvel, L);
    bool singular = cfd_lanes_backward(c, lane, tau, diag, L, xch);
    if (lane == 0) cfd_lanes_accelerations(c, L, qacc);
    __syncwarp();
    return group_any<LANES>(singular);
  };
  int warnings = lanes_steps<LANES>(p, n, lane, H, ctrl + (size_t)b * H * p.nu, qpos, qvel, diag,
                                    qacc, o, final_only, active, &failed, forward);
  if (active && lane == 0) {
    if (failed) atomicExch(&flags->status, CFD_ERR_SINGULAR);
    report_warnings(warn, b, warnings, flags);
  }
}

// Short chains (n <= 32), one instance per group of W lanes (the power of two >= n, at least 4),
// one link per lane, with the ABA in world coordinates (aba_world_lanes.cuh): each lane keeps its
// link's constants, state and sweeps in registers, so a step touches memory only for the controls
// and the trajectory. Lanes past the chain carry massless links.
#define WL_BLOCK 64
#define WL_MAX_N 32
// Groups of 16 and 32 lanes hold so many threads that from about 2^18 of them (B = 16384 and 8192)
// a thread per instance fills the GPU as well and wins after; groups of 4 and 8 win at every
// batch (chainfd-bench-gpu --only rollout; docs/RESULTS.md).
#define WL_MAX_THREADS (1L << 18)

static int world_lanes_width(int n) { return n <= 4 ? 4 : n <= 8 ? 8 : n <= 16 ? 16 : 32; }

template <int W>
__global__ void __launch_bounds__(WL_BLOCK)
rollout_world_lanes_kernel(cfd_chain c, cfd_rollout_params p, int B, int H,
                           const double* __restrict__ init, int shared_init,
                           const double* __restrict__ ctrl, double* __restrict__ out,
                           int final_only, rollout_flags* flags, int* warn) {
  int n = p.n, lane = threadIdx.x % W;
  long b = ((long)blockIdx.x * WL_BLOCK + threadIdx.x) / W;
  bool active = b < B;     // idle groups run along on instance B - 1's inputs (the shuffles need
  if (!active) b = B - 1;  // every lane of the warp) and write nothing
  bool link = lane < n;
  int i = link ? lane : 0;
  const cfd_wl_link L = cfd_wl_link_of(c, lane);
  int first = p.nu, last = -1;  // the actuators on this lane's dof
  for (int a = 0; a < p.nu; a++)
    if (link && p.act_dof[a] == lane) {
      if (first == p.nu) first = a;
      last = a;
    }
  const double* x0 = init + (shared_init ? 0 : (size_t)b * 2 * n);
  double* o = out + (size_t)b * (final_only ? 1 : H + 1) * 2 * n;
  double x = link ? x0[i] : 0, v = link ? x0[n + i] : 0;  // qpos, qvel of the lane's dof
  if (active && link && !final_only) o[i] = x, o[n + i] = v;
  double h = p.h;
  bool failed = false;
  int warnings = 0;
  // passive and actuator forces (controls u_t, NULL: zero) and the forward dynamics: this lane's
  // qacc; *singular when some pivot of the group was not positive, *bad_ctrl when some control was
  // bad. Every lane of the warp calls it together (its shuffles and ballots span the warp).
  auto forward = [&](const double* u_t, bool* singular, bool* bad_ctrl_out, bool* bad_diag) {
    double q = 0, tau = 0, diag = 0;
    if (link) cfd_rollout_passive(&p, i, 1, x, v, &q, &tau, &diag);
    bool bad_ctrl = false;  // any control bad, over the group (each lane tests its dof's)
    for (int a = first; u_t && a <= last; a++)
      if (p.act_dof[a] == lane) bad_ctrl |= cfd_is_bad(cfd_rollout_clamp(&p, a, u_t[a]));
    bad_ctrl = group_any<W>(bad_ctrl);
    *bad_ctrl_out = bad_ctrl;
    for (int a = first; a <= last; a++)  // in the CPU's order where several share the dof
      if (p.act_dof[a] == lane)
        cfd_rollout_actuator_dof(&p, a, u_t, bad_ctrl, x, v, &tau, &diag);
    bool bad = false;
    double qa = cfd_wl_qacc<W>(L, n, lane, c.gravity, q, v, tau, diag, &bad);
    *singular = group_any<W>(bad);
    *bad_diag = group_any<W>(link && cfd_is_bad(diag));
    return qa;
  };
  for (int t = 0; t < H; t++) {
    const double* u_t = ctrl + ((size_t)b * H + t) * p.nu;
    for (int k = 0; k < 2; k++)  // mj_checkPos, mj_checkVel (rollout_step.h)
      if (group_any<W>(link && cfd_is_bad(k ? v : x))) {
        warnings++;
        if (p.autoreset) x = link ? p.reset[i] : 0, v = 0, u_t = NULL;
      }
    bool singular, bad_ctrl, bad_diag, ignored;
    double qa = forward(u_t, &singular, &bad_ctrl, &bad_diag);
    warnings += bad_ctrl;
    // as in cfd_rollout_step: a bad joint-diagonal term, a NaN step; else mj_checkAcc
    bool bad_acc = group_any<W>(link && cfd_is_bad(qa));  // (a ballot: never short-circuited)
    bool redo = !bad_diag && (bad_acc || singular);
    warnings += redo;
    if (p.autoreset && __any_sync(0xffffffffu, redo)) {
      // the whole warp takes the second pass; groups whose step was sound take it again as it was
      if (redo) x = link ? p.reset[i] : 0, v = 0, u_t = NULL;
      qa = forward(u_t, &singular, &bad_ctrl, &ignored);
      failed |= redo && singular;
    }
    if (bad_diag || (!p.autoreset && redo && singular)) qa = NAN;
    if (link) {  // semi-implicit Euler, as cfd_rollout_step
      v += h * qa;
      x += h * v;
      if (active && (!final_only || t == H - 1)) {
        double* ot = o + (size_t)(final_only ? 0 : t + 1) * 2 * n;
        ot[i] = x, ot[n + i] = v;
      }
    }
  }
  if (active && link && final_only && H == 0) o[i] = x, o[n + i] = v;
  if (active && lane == 0) {
    if (failed) atomicExch(&flags->status, CFD_ERR_SINGULAR);
    report_warnings(warn, b, warnings, flags);
  }
}

// Chains of 33 to 256 links in joint frames, one instance per warp: the world-coordinate ABA in
// blocks of 32 links (aba_world_blocks.cuh), the step around it the lanes kernel's (lanes_steps)
// with the warp's 32 lanes taking links in turn; state and scratch in work (a slot per instance).
// Past 256 links its rounding grows beyond the link-frame lanes' (abia.cu), past B = 4096 a
// thread per instance wins (as for the FD batch kernels).
#define WB_MAX_N 256
#define WB_MAX_B 4096

__global__ void __launch_bounds__(32)
rollout_world_blocks_kernel(cfd_chain c, cfd_rollout_params p, int B, int H,
                            const double* __restrict__ init, int shared_init,
                            const double* __restrict__ ctrl, double* __restrict__ out,
                            int final_only, int distinct, double* work, rollout_flags* flags,
                            int* warn) {
  int n = p.n, lane = threadIdx.x;
  long b = blockIdx.x;
  double* scratch = work + lanes_instance_doubles(n) * b;  // CFD_AWB_LINK_DOUBLES n, then the state
  double* q = scratch + (size_t)CFD_AWB_LINK_DOUBLES * n;
  double *tau = q + n, *diag = tau + n, *qacc = diag + n, *qpos = qacc + n, *qvel = qpos + n;
  const double* x0 = init + (shared_init ? 0 : (size_t)b * 2 * n);
  double* o = out + (size_t)b * (final_only ? 1 : H + 1) * 2 * n;
  lanes_start<32>(n, lane, x0, qpos, qvel, o, !final_only);
  bool failed = false;
  __syncwarp();
  // passive and actuator forces (controls u_t, NULL: zero) and the forward dynamics into qacc;
  // whether some pivot was not positive, and (bad_ctrl) some control bad
  auto forward = [&](const double* u_t, bool* bad_ctrl) {
    for (int i = lane; i < n; i += 32) cfd_rollout_passive(&p, i, 1, qpos[i], qvel[i], q + i, tau + i, diag + i);
    __syncwarp();
    *bad_ctrl = lanes_actuators<32>(p, lane, distinct, u_t, qpos, qvel, tau, diag);
    __syncwarp();
    bool singular = cfd_awb_qacc(c, q, qvel, tau, diag, qacc, scratch);  // the warp's vote
    __syncwarp();
    return singular;
  };
  int warnings = lanes_steps<32>(p, n, lane, H, ctrl + (size_t)b * H * p.nu, qpos, qvel, diag,
                                 qacc, o, final_only, true, &failed, forward);
  if (lane == 0) {
    if (failed) atomicExch(&flags->status, CFD_ERR_SINGULAR);
    report_warnings(warn, b, warnings, flags);
  }
}

// Launches the world lanes kernel with the narrowest group that holds the chain (the caller checks
// the launch).
static void launch_world_lanes(const cfd_gpu_rollout* r, int B, int H, const double* init,
                               int shared_init, const double* ctrl, double* out, int final_only) {
  int n = r->n, W = world_lanes_width(n);
  long threads = (long)B * W;
  unsigned blocks = (unsigned)((threads + WL_BLOCK - 1) / WL_BLOCK);
#define WL_LAUNCH(w)                                                                               \
  rollout_world_lanes_kernel<w><<<blocks, WL_BLOCK, 0, r->stream>>>(                              \
      r->chain_jf, r->params, B, H, init, shared_init, ctrl, out, final_only, r->flags, r->warn)
  if (W == 4) WL_LAUNCH(4);
  else if (W == 8) WL_LAUNCH(8);
  else if (W == 16) WL_LAUNCH(16);
  else WL_LAUNCH(32);
#undef WL_LAUNCH
}


// ---- long chains: the scan kernel's dynamics, two launches a step -----------------------------
// Past WB_MAX_N links and up to SCAN_MAX_B instances, each step's forward dynamics is the scan
// kernel's (a cluster of SMs per instance: about n / blocks + log2 blocks steps in sequence, where
// the kernels above take the n links in turn). Between its launches, a kernel of a thread block
// per instance (scan_between) ends one step and prepares the next, as cfd_rollout_step does and in
// its order: mj_checkPos and mj_checkVel, the passive and actuator forces and the joint-diagonal
// term; then, after the dynamics, mj_checkAcc, the reset and the semi-implicit Euler update. The
// reset state's dynamics is computed once (scan_reset_dynamics) and reused.
#define SCAN_THREADS 256
#define SCAN_MAX_B 1024  // (chainfd-bench-gpu --only rollout_long: the scan against the lanes)

// Per instance [B][n] each: qpos, qvel, q, tau, diag, qacc; then the ints: the scan kernel's error
// word (B), and SCAN_INFO per instance (scan_info)
#define SCAN_ARRAYS 6
enum { SCAN_DIAG_BAD, SCAN_WARNINGS, SCAN_FAILED, SCAN_INFO };

struct scan_view {
  double *qpos, *qvel, *q, *tau, *diag, *qacc;
  int *error, *info;  // this instance's
};

__device__ __forceinline__ scan_view scan_view_of(double* sx, int* sflags, int B, int n, int b) {
  size_t bn = (size_t)B * n, o = (size_t)b * n;
  scan_view v = {sx + o, sx + bn + o, sx + 2 * bn + o, sx + 3 * bn + o, sx + 4 * bn + o,
                 sx + 5 * bn + o, sflags + b, sflags + B + SCAN_INFO * b};
  return v;
}

// Any bad x[i] over the block (every thread calls it)
__device__ __forceinline__ bool block_any_bad(const double* x, int n) {
  int bad = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) bad |= cfd_is_bad(x[i]);
  return __syncthreads_or(bad);
}

// cfd_rollout_forward's forces for controls u (NULL: all zero): q, tau and diag from qpos and
// qvel; dof i's actuators are acts[first[i] .. first[i + 1]), in index order (the CPU's order of
// summing where several drive one joint). Returns whether a control was bad (every thread calls
// it).
__device__ bool scan_forces(const cfd_rollout_params& p, const int* first, const int* acts,
                            const double* u, const double* qpos, const double* qvel, double* q,
                            double* tau, double* diag) {
  int n = p.n, bad = 0;
  for (int a = threadIdx.x; u && a < p.nu; a += blockDim.x) bad |= cfd_is_bad(cfd_rollout_clamp(&p, a, u[a]));
  bool bad_ctrl = __syncthreads_or(bad);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    cfd_rollout_passive(&p, i, 1, qpos[i], qvel[i], q + i, tau + i, diag + i);
    for (int k = first[i]; k < first[i + 1]; k++)
      cfd_rollout_actuator(&p, acts[k], u, bad_ctrl, qpos, qvel, tau, diag, 1);
  }
  __syncthreads();
  return bad_ctrl;
}

// The reset state's forces (qpos0, qvel 0, no controls) into x: q, qvel, tau, diag ([n] each)
__global__ void __launch_bounds__(SCAN_THREADS)
scan_reset_forces(cfd_rollout_params p, const int* first, const int* acts, double* x) {
  int n = p.n;
  double *q = x, *qvel = x + n, *tau = x + 2 * n, *diag = x + 3 * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) qvel[i] = 0;
  __syncthreads();
  scan_forces(p, first, acts, NULL, p.reset, qvel, q, tau, diag);
}

// The start of a run: the instances' states from init, state 0 out, the flags cleared
__global__ void __launch_bounds__(SCAN_THREADS)
scan_start(int n, int B, int H, const double* __restrict__ init, int shared_init,
           double* __restrict__ out, int final_only, double* sx, int* sflags) {
  int b = blockIdx.x;
  scan_view v = scan_view_of(sx, sflags, B, n, b);
  const double* x0 = init + (shared_init ? 0 : (size_t)b * 2 * n);
  double* o = out + (size_t)b * (final_only ? 1 : H + 1) * 2 * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    v.qpos[i] = x0[i], v.qvel[i] = x0[n + i];
    if (!final_only) o[i] = x0[i], o[n + i] = x0[n + i];
  }
  if (threadIdx.x == 0) {
    *v.error = 0;
    for (int k = 0; k < SCAN_INFO; k++) v.info[k] = 0;
  }
}

// Step t - 1's end (t > 0: after its dynamics) and step t's start (t < H: up to its dynamics);
// at t = H the final state out and the warnings reported. reset_x: the reset state's q, qvel,
// tau, diag and qacc; reset_singular: its dynamics failed.
__global__ void __launch_bounds__(SCAN_THREADS)
scan_between(cfd_rollout_params p, const int* first, const int* acts, int B, int H, int t,
             const double* __restrict__ ctrl, double* __restrict__ out, int final_only,
             double* sx, int* sflags, const double* __restrict__ reset_x, int reset_singular,
             rollout_flags* flags, int* warn) {
  int n = p.n, b = blockIdx.x;
  scan_view v = scan_view_of(sx, sflags, B, n, b);
  if (v.info[SCAN_FAILED]) return;
  __syncthreads();  // (everyone has read the flag before thread 0 may set it again below)
  int warnings = 0;  // this launch's, counted by thread 0
  double* o = out + (size_t)b * (final_only ? 1 : H + 1) * 2 * n;
  if (t > 0) {  // mj_checkAcc (unless the joint-diagonal term was bad), the reset, the update
    if (v.info[SCAN_DIAG_BAD]) {
      for (int i = threadIdx.x; i < n; i += blockDim.x) v.qacc[i] = NAN;
    } else {
      bool singular = *v.error != 0;
      if (singular || block_any_bad(v.qacc, n)) {
        warnings++;
        if (p.autoreset) {
          if (reset_singular) {  // as cfd_rollout_step: the run fails
            if (threadIdx.x == 0) {
              v.info[SCAN_FAILED] = 1;
              atomicExch(&flags->status, CFD_ERR_SINGULAR);
              report_warnings(warn, b, v.info[SCAN_WARNINGS] + warnings, flags);
            }
            return;
          }
          for (int i = threadIdx.x; i < n; i += blockDim.x)
            v.qpos[i] = p.reset[i], v.qvel[i] = 0, v.qacc[i] = reset_x[4 * n + i];
        } else if (singular) {
          for (int i = threadIdx.x; i < n; i += blockDim.x) v.qacc[i] = NAN;
        }
      }
    }
    double h = p.h;
    double* ot = o + (final_only ? 0 : (size_t)t * 2 * n);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      double vel = v.qvel[i] + h * v.qacc[i];
      double pos = v.qpos[i] + h * vel;
      v.qvel[i] = vel, v.qpos[i] = pos;
      if (!final_only || t == H) ot[i] = pos, ot[n + i] = vel;
    }
    __syncthreads();
    if (threadIdx.x == 0) *v.error = 0;
  }
  if (t < H) {  // mj_checkPos, mj_checkVel, then the forces
    const double* u = ctrl + ((size_t)b * H + t) * p.nu;
    for (int k = 0; k < 2; k++)
      if (block_any_bad(k ? v.qvel : v.qpos, n)) {
        warnings++;
        if (p.autoreset) {
          for (int i = threadIdx.x; i < n; i += blockDim.x) v.qpos[i] = p.reset[i], v.qvel[i] = 0;
          u = NULL;
        }
      }
    warnings += scan_forces(p, first, acts, u, v.qpos, v.qvel, v.q, v.tau, v.diag);
    bool diag_bad = block_any_bad(v.diag, n);
    if (threadIdx.x == 0) v.info[SCAN_DIAG_BAD] = diag_bad;
  }
  if (threadIdx.x == 0) {
    v.info[SCAN_WARNINGS] += warnings;
    if (t == H) report_warnings(warn, b, v.info[SCAN_WARNINGS], flags);
  }
  if (t == H && final_only && H == 0)  // no step: the start state is the final one
    for (int i = threadIdx.x; i < n; i += blockDim.x) o[i] = v.qpos[i], o[n + i] = v.qvel[i];
}

static int fail(char* err, int size, const char* what, cudaError_t e) {
  snprintf(err, size, "GPU rollout: %s: %s", what, cudaGetErrorString(e));
  cudaGetLastError();
  return 1;
}


// The reset state's dynamics, once per rollout (scan_between's reset_x; r->reset 1, or 2 where
// the scan kernel finds it singular)
static cudaError_t scan_reset_dynamics(cfd_gpu_rollout* r) {
  int n = r->n;
  cudaError_t e = r->reset_x ? cudaSuccess : cudaMalloc(&r->reset_x, sizeof(double) * 5 * n + sizeof(int));
  if (e) return e;
  double* x = r->reset_x;
  int* error = (int*)(x + 5 * n);
  int found = 0;
  e = cudaMemsetAsync(error, 0, sizeof(int), r->stream);
  if (!e) {
    scan_reset_forces<<<1, SCAN_THREADS, 0, r->stream>>>(r->params, r->dof_acts, r->dof_acts + n + 1, x);
    e = cudaGetLastError();
  }
  if (!e) e = cfd_gpu_launch_abia_scan_each(r->scan, 1, x, x + n, x + 2 * n, x + 3 * n, x + 4 * n, error);
  if (!e) e = cudaMemcpyAsync(&found, error, sizeof(int), cudaMemcpyDeviceToHost, r->stream);
  if (!e) e = cudaStreamSynchronize(r->stream);
  if (!e) r->reset = found ? 2 : 1;
  return e;
}

// A run's launches on long chains: the start, then per step scan_between and the scan kernel,
// then scan_between's last (the final state, the warnings)
static cudaError_t scan_launches(cfd_gpu_rollout* r, int B, int H, const double* init,
                                 int shared_init, const double* ctrl, double* out, int final_only) {
  int n = r->n;
  size_t bn = (size_t)B * n;
  double* sx = r->sx;
  scan_start<<<B, SCAN_THREADS, 0, r->stream>>>(n, B, H, init, shared_init, out, final_only, sx,
                                                 r->sflags);
  cudaError_t e = cudaGetLastError();
  for (int t = 0; t <= H && !e; t++) {
    scan_between<<<B, SCAN_THREADS, 0, r->stream>>>(r->params, r->dof_acts, r->dof_acts + n + 1, B, H, t, ctrl, out,
                                                    final_only, sx, r->sflags, r->reset_x,
                                                    r->reset == 2, r->flags, r->warn);
    e = cudaGetLastError();
    if (!e && t < H)  // q, qvel, tau, diag in; qacc out; a failure in the instance's error word
      e = cfd_gpu_launch_abia_scan_each(r->scan, B, sx + 2 * bn, sx + bn, sx + 3 * bn, sx + 4 * bn,
                                        sx + 5 * bn, r->sflags);
  }
  return e;
}

void cfd_gpu_rollout_free(cfd_gpu_rollout* r) {
  if (!r) return;
  cudaSetDevice(r->device);
  cfd_gpu_chain_free(&r->chain, &r->chain_jf);
  cudaFree(r->param_block);
  cudaFree(r->work); cudaFree(r->init); cudaFree(r->ctrl); cudaFree(r->out); cudaFree(r->flags);
  cudaFree(r->deriv_flag);
  cudaFree(r->deriv_stage);
  cudaFreeHost(r->deriv_flag_host);
  cfd_gpu_deriv_long_free(r->deriv_long);
  cudaFree(r->warn);
  cfd_gpu_free(r->scan);  // (before the stream it borrows)
  cudaFree(r->sx); cudaFree(r->sflags); cudaFree(r->reset_x); cudaFree(r->dof_acts);
  if (r->start) cudaEventDestroy(r->start);
  if (r->stop) cudaEventDestroy(r->stop);
  if (r->stream) cudaStreamDestroy(r->stream);
  free(r);
}

static cudaError_t copy_up(void* dst, const void* src, size_t bytes) {
  return bytes ? cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) : cudaSuccess;
}

unsigned long long* cfd_gpu_rollout_deriv_flag_host(cfd_gpu_rollout* r) { return r->deriv_flag_host; }

cfd_gpu_deriv_long** cfd_gpu_rollout_deriv_long(cfd_gpu_rollout* r) { return &r->deriv_long; }

double* cfd_gpu_rollout_deriv_stage(cfd_gpu_rollout* r, size_t doubles) {
  if (doubles > r->deriv_stage_doubles) {
    cudaFree(r->deriv_stage);
    r->deriv_stage_doubles = 0;
    if (cudaMalloc(&r->deriv_stage, sizeof(double) * doubles)) return r->deriv_stage = NULL;
    r->deriv_stage_doubles = doubles;
  }
  return r->deriv_stage;
}

void cfd_gpu_rollout_model(const cfd_gpu_rollout* r, cfd_chain* chain, cfd_rollout_params* params,
                           int* device, cudaStream_t* stream, unsigned long long** deriv_flag) {
  *deriv_flag = r->deriv_flag;
  *chain = r->chain;
  *params = r->params;
  *device = r->device;
  *stream = r->stream;
}

int cfd_gpu_rollout_create(const cfd_chain* c, const cfd_rollout_params* p, int device,
                           cfd_gpu_rollout** out, char* err, int err_size) {
  *out = NULL;
  int count = cfd_gpu_device_count();
  if (count == 0) {
    snprintf(err, err_size, "GPU rollout: no CUDA device is available");
    return 1;
  }
  if (device < 0 || device >= count) {
    snprintf(err, err_size, "GPU rollout: CUDA device %d does not exist (devices: 0..%d)", device, count - 1);
    return 1;
  }
  cfd_gpu_rollout* r = (cfd_gpu_rollout*)calloc(1, sizeof(*r));
  if (!r) {
    snprintf(err, err_size, "out of host memory");
    return 1;
  }
  int n = c->n, nu = p->nu;
  r->device = device;
  r->n = n;
  r->tree = !cfd_chain_is_serial(c);
  r->nu = nu;
  r->params = *p;
  r->distinct_dofs = 1;
  for (int a = 0; a < nu; a++)
    for (int k = 0; k < a; k++) r->distinct_dofs &= p->act_dof[a] != p->act_dof[k];
  cudaError_t e = cudaSetDevice(device);
  if (!e) e = cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking);
  if (!e) e = cudaEventCreate(&r->start);
  if (!e) e = cudaEventCreate(&r->stop);
  if (!e) e = cfd_gpu_chain_upload(c, 1, &r->chain, &r->chain_jf);
  // the step parameters in one block: the double arrays in turn, then the int dof map
  struct {
    const double** dst;
    const double* src;
    size_t count;
  } parts[] = {{&r->params.qpos0, p->qpos0, (size_t)n},
               {&r->params.stiffness, p->stiffness, (size_t)n},
               {&r->params.springref, p->springref, (size_t)n},
               {&r->params.damping, p->damping, (size_t)n},
               {&r->params.reset, p->reset, (size_t)n},
               {&r->params.gear, p->gear, (size_t)nu},
               {&r->params.gain, p->gain, 3 * (size_t)nu},
               {&r->params.bias, p->bias, 3 * (size_t)nu},
               {&r->params.ctrlrange, p->ctrlrange, 2 * (size_t)nu},
               {&r->params.forcerange, p->forcerange, 2 * (size_t)nu},
               {&r->params.rows, p->rows, p->rows ? CFD_RP_COUNT * (size_t)n : 0},
               {&r->params.eqs, p->eqs, CFD_EP_COUNT * (size_t)p->neq}};
  size_t nd = 0;
  for (size_t k = 0; k < sizeof(parts) / sizeof(parts[0]); k++) nd += parts[k].count;
  if (!e) e = cudaMalloc(&r->param_block, sizeof(double) * nd + sizeof(int) * (nu + 1));
  double* d = (double*)r->param_block;
  for (size_t k = 0; k < sizeof(parts) / sizeof(parts[0]) && !e; k++) {
    *parts[k].dst = d;
    e = copy_up(d, parts[k].src, sizeof(double) * parts[k].count);
    d += parts[k].count;
  }
  if (!p->rows) r->params.rows = NULL;  // (no rows: the kernels test for NULL)
  r->params.act_dof = (const int*)d;
  if (!e) e = copy_up(d, p->act_dof, sizeof(int) * nu);
  if (!e) e = cudaMalloc(&r->flags, sizeof(rollout_flags));
  if (!e) e = cudaMalloc(&r->deriv_flag, sizeof *r->deriv_flag);
  if (!e) e = cudaHostAlloc(&r->deriv_flag_host, sizeof *r->deriv_flag_host, cudaHostAllocDefault);
  if (!e) e = cfd_gpu_deriv_flag_reset(r->deriv_flag, r->stream);
  if (e) {
    fail(err, err_size, "uploading the model", e);
    cfd_gpu_rollout_free(r);
    return 1;
  }
  if (n > WB_MAX_N && !r->tree) {  // long chains: the scan kernel's context, on this stream
    if (cfd_gpu_create(c, device, CFD_GPU_ABIA, &r->scan, err, err_size)) {
      cfd_gpu_rollout_free(r);
      return 1;
    }
    e = cfd_gpu_use_stream(r->scan, r->stream);
    int* csr = (int*)malloc(sizeof(int) * (n + 1 + nu));  // the actuators by dof
    if (!csr) e = cudaErrorMemoryAllocation;
    if (!e) {
      for (int i = 0; i <= n; i++) csr[i] = 0;
      for (int a = 0; a < nu; a++) csr[p->act_dof[a] + 1]++;
      for (int i = 0; i < n; i++) csr[i + 1] += csr[i];
      for (int a = 0; a < nu; a++) csr[n + 1 + csr[p->act_dof[a]]++] = a;  // in index order
      for (int i = n; i > 0; i--) csr[i] = csr[i - 1];  // (each start was moved to its end)
      csr[0] = 0;
      e = cudaMalloc(&r->dof_acts, sizeof(int) * (n + 1 + nu));
      if (!e) e = copy_up(r->dof_acts, csr, sizeof(int) * (n + 1 + nu));
    }
    free(csr);
    if (e) {
      fail(err, err_size, "setting up the scan kernel", e);
      cfd_gpu_rollout_free(r);
      return 1;
    }
  }
  *out = r;
  return 0;
}

// The kernel a run of B instances takes: the rule, in order (each bound's reason at its #define).
// A tree: a thread per instance. Constraint rows (limits, friction loss, joint equalities:
// rollout_step.h): a thread per instance, its scratch local up to 16 links and 4 equalities, else
// global. Long chains in small batches, the scan kernel per step; short chains with joint frames, the
// world-coordinate lanes (a link per lane) while the batch leaves them the GPU; up to 256 links with
// joint frames, a warp per instance in blocks of 32 links; otherwise 8 lanes per instance in link
// frames (state in shared memory up to 16 links, else global) up to a few thousand instances;
// beyond, a thread per instance (local memory up to 16 links, else global). cfd_gpu_tuning's
// rollout_* fields take a kernel out of the rule, for the benchmark and the tests.
typedef enum {
  RK_SCAN, RK_WORLD_LANES, RK_WORLD_BLOCKS, RK_LANES_SHARED, RK_LANES_GLOBAL, RK_THREAD_LOCAL,
  RK_THREAD_GLOBAL
} rollout_kernel_kind;

static rollout_kernel_kind rollout_rule(const cfd_gpu_rollout* r, int B) {
  const int n = r->n, jf = r->chain_jf.home_R != NULL, W = world_lanes_width(n);
  const bool lanes = !r->tune.rollout_thread, world = lanes && !r->tune.rollout_link_frames;
  if (r->tree) return RK_THREAD_GLOBAL;  // the one kernel that takes a tree (aba_tree.h)
  // constraint rows (rollout_step.h): a thread per instance, its scratch local where it fits
  if (r->params.rows)
    return n <= ROLLOUT_LOCAL_MAX_N && r->params.neq <= ROLLOUT_LOCAL_MAX_EQ ? RK_THREAD_LOCAL
                                                                             : RK_THREAD_GLOBAL;
  if (r->scan && !r->tune.rollout_no_scan && B <= SCAN_MAX_B) return RK_SCAN;
  if (world && jf && n <= WL_MAX_N && (W <= 8 || (long)B * W <= WL_MAX_THREADS))
    return RK_WORLD_LANES;
  if (world && jf && n > WL_MAX_N && n <= WB_MAX_N && B <= WB_MAX_B) return RK_WORLD_BLOCKS;
  if (lanes && n <= ROLLOUT_LOCAL_MAX_N && B <= LANES_MAX_B) return RK_LANES_SHARED;
  if (lanes && n > ROLLOUT_LOCAL_MAX_N && B <= LANES_GLOBAL_MAX_B) return RK_LANES_GLOBAL;
  return n <= ROLLOUT_LOCAL_MAX_N ? RK_THREAD_LOCAL : RK_THREAD_GLOBAL;
}

int cfd_gpu_rollout_run(cfd_gpu_rollout* r, int B, int H, const double* init, int shared_init,
                        const double* ctrl, double* out, int final_only, cfd_memory where,
                        char* err, int err_size) {
  if (B < 1 || H < 0) {
    snprintf(err, err_size, "GPU rollout: need B >= 1 and H >= 0 (got B=%d, H=%d)", B, H);
    return 1;
  }
  r->last_B = 0;  // until this run succeeds
  r->last_warnings = 0;
  cudaError_t e = cudaSetDevice(r->device);
  if (e) return fail(err, err_size, "selecting the device", e);
  int n = r->n;
  size_t init_n = (size_t)(shared_init ? 1 : B) * 2 * n;
  size_t ctrl_n = (size_t)B * H * r->nu;
  size_t out_n = (size_t)B * (final_only ? 1 : H + 1) * 2 * n;
  const rollout_kernel_kind kind = rollout_rule(r, B);
  const bool scan = kind == RK_SCAN;
  const int xch = !r->tune.lanes_shuffle;
  if (scan && B > r->scan_capacity) {  // the state, reused
    cudaFree(r->sx);
    cudaFree(r->sflags);
    r->sx = NULL;
    r->sflags = NULL;
    r->scan_capacity = 0;
    e = cudaMalloc(&r->sx, sizeof(double) * SCAN_ARRAYS * (size_t)B * n);
    if (!e) e = cudaMalloc(&r->sflags, sizeof(int) * (1 + SCAN_INFO) * (size_t)B);
    if (e) return fail(err, err_size, "out of device memory for the batch's state", e);
    r->scan_capacity = B;
  }
  if (scan && !r->reset) {
    e = scan_reset_dynamics(r);
    if (e) return fail(err, err_size, "the dynamics at the reset state", e);
  }
  const bool global_work = kind == RK_WORLD_BLOCKS || kind == RK_LANES_GLOBAL || kind == RK_THREAD_GLOBAL;
  if (global_work && B > r->capacity) {  // global scratch, reused
    cudaFree(r->work);
    r->work = NULL;
    r->capacity = 0;
    size_t per = cfd_rollout_doubles(n, r->tree ? CFD_ROLLOUT_TREE : 1) +  // the larger of the
                 cfd_rollout_rows_doubles(n, r->params.rows != NULL, r->params.neq);
    if (per < lanes_instance_doubles(n)) per = lanes_instance_doubles(n);  // thread's and lanes'

    e = cudaMalloc(&r->work, sizeof(double) * per * ((size_t)B + LANES));  // + idle groups' slots
    if (e) return fail(err, err_size, "out of device memory for the batch's state", e);
    r->capacity = B;
  }
  if (B > r->warn_capacity) {  // the per-instance warnings, reused
    cudaFree(r->warn);
    r->warn = NULL;
    r->warn_capacity = 0;
    e = cudaMalloc(&r->warn, sizeof(int) * (size_t)B);
    if (e) return fail(err, err_size, "out of device memory for the batch's warnings", e);
    r->warn_capacity = B;
  }
  const double *dinit = init, *dctrl = ctrl;
  double* dout = out;
  if (where == CFD_HOST) {  // staging, reused while the shapes fit
    if (B > r->staged_B || H > r->staged_H) {
      cudaFree(r->init); cudaFree(r->ctrl); cudaFree(r->out);
      r->init = r->ctrl = r->out = NULL;
      r->staged_B = r->staged_H = 0;
      e = cudaMalloc(&r->init, sizeof(double) * (size_t)B * 2 * n);
      if (!e) e = cudaMalloc(&r->ctrl, sizeof(double) * (ctrl_n ? ctrl_n : 1));
      if (!e) e = cudaMalloc(&r->out, sizeof(double) * (size_t)B * (H + 1) * 2 * n);
      if (e) return fail(err, err_size, "out of device memory for the batch's transfers", e);
      r->staged_B = B;
      r->staged_H = H;
    }
    e = cudaMemcpyAsync(r->init, init, sizeof(double) * init_n, cudaMemcpyHostToDevice, r->stream);
    if (!e && ctrl_n) e = cudaMemcpyAsync(r->ctrl, ctrl, sizeof(double) * ctrl_n, cudaMemcpyHostToDevice, r->stream);
    if (e) return fail(err, err_size, "copying the inputs up", e);
    dinit = r->init;
    dctrl = r->ctrl;
    dout = r->out;
  }
  e = cudaMemsetAsync(r->flags, 0, sizeof(rollout_flags), r->stream);
  if (!e) e = cudaEventRecord(r->start, r->stream);
  if (e) return fail(err, err_size, "starting the rollout", e);
  int blocks = (B + ROLLOUT_THREADS - 1) / ROLLOUT_THREADS;
  int groups = LANES_BLOCK / LANES;
  switch (kind) {
    case RK_SCAN:
      e = scan_launches(r, B, H, dinit, shared_init, dctrl, dout, final_only);
      if (e) return fail(err, err_size, "launching the rollout", e);
      r->scan_steps += H;
      break;
    case RK_WORLD_LANES: launch_world_lanes(r, B, H, dinit, shared_init, dctrl, dout, final_only); break;
    case RK_WORLD_BLOCKS:
      rollout_world_blocks_kernel<<<B, 32, 0, r->stream>>>(
          r->chain_jf, r->params, B, H, dinit, shared_init, dctrl, dout, final_only,
          r->distinct_dofs, r->work, r->flags, r->warn);
      break;
    case RK_LANES_SHARED:
      rollout_lanes_kernel<false><<<(B + groups - 1) / groups, LANES_BLOCK,
                                    sizeof(double) * lanes_instance_doubles(n) * groups, r->stream>>>(
          r->chain, r->params, B, H, dinit, shared_init, dctrl, dout, final_only, r->distinct_dofs,
          NULL, r->flags, r->warn, xch);
      break;
    case RK_LANES_GLOBAL:
      rollout_lanes_kernel<true><<<(B + groups - 1) / groups, LANES_BLOCK, 0, r->stream>>>(
          r->chain, r->params, B, H, dinit, shared_init, dctrl, dout, final_only, r->distinct_dofs,
          r->work, r->flags, r->warn, xch);
      break;
    case RK_THREAD_LOCAL:
      if (r->params.rows)
        rollout_local_kernel<true><<<blocks, ROLLOUT_THREADS, 0, r->stream>>>(
            r->chain, r->params, B, H, dinit, shared_init, dctrl, dout, final_only, r->flags, r->warn);
      else
        rollout_local_kernel<false><<<blocks, ROLLOUT_THREADS, 0, r->stream>>>(
            r->chain, r->params, B, H, dinit, shared_init, dctrl, dout, final_only, r->flags, r->warn);
      break;
    case RK_THREAD_GLOBAL:
      if (r->params.rows)
        rollout_kernel<true><<<blocks, ROLLOUT_THREADS, 0, r->stream>>>(
            r->chain, r->params, B, H, dinit, shared_init, dctrl, dout, final_only, r->work,
            r->flags, r->warn, r->tree ? CFD_ROLLOUT_TREE : 1);
      else
        rollout_kernel<false><<<blocks, ROLLOUT_THREADS, 0, r->stream>>>(
            r->chain, r->params, B, H, dinit, shared_init, dctrl, dout, final_only, r->work,
            r->flags, r->warn, r->tree ? CFD_ROLLOUT_TREE : 1);
      break;
  }
  e = cudaGetLastError();
  if (e) return fail(err, err_size, "launching the rollout", e);
  rollout_flags flags = {0, 0};
  e = cudaEventRecord(r->stop, r->stream);
  if (!e) e = cudaMemcpyAsync(&flags, r->flags, sizeof flags, cudaMemcpyDeviceToHost, r->stream);
  if (!e && where == CFD_HOST)
    e = cudaMemcpyAsync(out, dout, sizeof(double) * out_n, cudaMemcpyDeviceToHost, r->stream);
  if (!e) e = cudaStreamSynchronize(r->stream);
  if (e) return fail(err, err_size, "running the rollout", e);
  if (cudaEventElapsedTime(&r->last_ms, r->start, r->stop)) r->last_ms = 0;  // timing only
  if (flags.status) {
    snprintf(err, err_size, "GPU rollout: %s at the reset state qpos0", cfd_status_str(flags.status));
    return 1;
  }
  r->last_B = B;
  r->last_warnings = (long)flags.warnings;
  return 0;
}

long cfd_gpu_rollout_last_warnings(const cfd_gpu_rollout* r) { return r->last_warnings; }

int cfd_gpu_rollout_instance_warnings(const cfd_gpu_rollout* r, int* counts, char* err, int err_size) {
  cudaError_t e = cudaSetDevice(r->device);
  if (!e && r->last_B)
    e = cudaMemcpy(counts, r->warn, sizeof(int) * (size_t)r->last_B, cudaMemcpyDeviceToHost);
  return e ? fail(err, err_size, "copying the warnings down", e) : 0;
}

double cfd_gpu_rollout_last_kernel_ms(const cfd_gpu_rollout* r) { return r->last_ms; }

int cfd_gpu_rollout_set_tuning(cfd_gpu_rollout* r, const cfd_gpu_tuning* t, char* err, int err_size) {
  static const cfd_gpu_tuning defaults = {};
  r->tune = t ? *t : defaults;
  return r->scan ? cfd_gpu_set_tuning(r->scan, t, err, err_size) : 0;
}

long cfd_gpu_rollout_scan_steps(const cfd_gpu_rollout* r) { return r->scan_steps; }
