// aba_world_lanes.cuh: the ABA in world coordinates (aba_world.h) for one instance by a group of 8
// lanes of a warp, for rollouts of short chains in batches of a few thousand (rollout.cu), where a
// thread per instance leaves most of the GPU idle. In world coordinates the work per link is
// independent across links except for four short serial chains, so the group splits it as:
//   per link (lanes take links in turn): sin/cos; world screws; c_i, the rigid inertia moved to the
//     world and the bias force
//   serially (lane 0): world poses (a few multiply-adds per link in joint frames); velocities
//   per row of the articulated inertia (lane r owns row r, every lane all of the bias force): the
//     backward sweep, which passes IA to the parent by addition: per link four 6-term dots,
//     twelve shuffles and a division, where aba_lanes.cuh's link frames need a 6x6 congruence
//   serially (lane 0): the accelerations.
// (Groups of 4 lanes, two rows each, measured slower: arm7 on the H100, 1.29e5 against 1.65e5
// env-steps/s at B = 1, 4.8e8 against 5.0e8 at B = 4096.) Same formulas as aba_world.h, so results
// equal the CPU's to rounding. The per-link arrays (any memory the group shares): sin/cos 2n, R 9n,
// p 3n, S 6n, V 6n, c 6n, rigid inertia 36n, bias 6n, U/d 6n, u/d n.
#ifndef CHAINFD_ABA_WORLD_LANES_CUH
#define CHAINFD_ABA_WORLD_LANES_CUH

#include "aba_lanes.cuh"
#include "aba_world.h"

#define CFD_WL_LINK_DOUBLES 81

struct cfd_wl_links {
  double *sc, *R, *p, *S, *V, *c, *J, *bias, *w, *ud;
};

__device__ __forceinline__ cfd_wl_links cfd_wl_links_at(double* s, int n) {
  cfd_wl_links L;
  L.sc = s; L.R = L.sc + 2 * n; L.p = L.R + 9 * n; L.S = L.p + 3 * n; L.V = L.S + 6 * n;
  L.c = L.V + 6 * n; L.J = L.c + 6 * n; L.bias = L.J + 36 * n; L.w = L.bias + 6 * n;
  L.ud = L.w + 6 * n;
  return L;
}

// The model's arrays copied into shared memory (model: CFD_WL_MODEL_DOUBLES(n)) by the block's
// threads; c's pointers then point there. The caller synchronises the block after.
#define CFD_WL_MODEL_DOUBLES(n) ((size_t)55 * (n))  // home_R, home_p, screw, inertia, armature
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

// Row r of a rigid world inertia J10 (I_O, h, m): [[I_O, h^], [h^T, m 1]]
__device__ __forceinline__ void cfd_wl_rigid_row(const double* J10, int r, double row[6]) {
  const double *I = J10, *h = J10 + 6;
  double m = J10[9];
  switch (r) {
    case 0: row[0] = I[0]; row[1] = I[3]; row[2] = I[4]; row[3] = 0; row[4] = -h[2]; row[5] = h[1]; break;
    case 1: row[0] = I[3]; row[1] = I[1]; row[2] = I[5]; row[3] = h[2]; row[4] = 0; row[5] = -h[0]; break;
    case 2: row[0] = I[4]; row[1] = I[5]; row[2] = I[2]; row[3] = -h[1]; row[4] = h[0]; row[5] = 0; break;
    case 3: row[0] = 0; row[1] = h[2]; row[2] = -h[1]; row[3] = m; row[4] = 0; row[5] = 0; break;
    case 4: row[0] = -h[2]; row[1] = 0; row[2] = h[0]; row[3] = 0; row[4] = m; row[5] = 0; break;
    default: row[0] = h[1]; row[1] = -h[0]; row[2] = 0; row[3] = 0; row[4] = 0; row[5] = m; break;
  }
}

// qacc for the instance whose per-link vectors are q, qd, tau, diag (diag may be NULL), by the
// group; jf: c is in joint frames. Every lane of the warp must call it (shuffles). Returns whether
// some d was not positive (the group keeps in step; the caller reports it). Ends in step.
__device__ __forceinline__ bool cfd_wl_fd(const cfd_chain& c, int jf, int lane, const double* q,
                                          const double* qd, const double* tau, const double* diag,
                                          double* qacc, const cfd_wl_links& L) {
  int n = c.n;
  for (int i = lane; i < n; i += CFD_LANES) cfd_abw_sincos(&c, jf, i, q[i], L.sc + 2 * i, L.sc + 2 * i + 1);
  __syncwarp();
  if (lane == 0) {  // world poses: the one chain that needs every link before it
    double R[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1}, p[3] = {0, 0, 0};
    for (int i = 0; i < n; i++) {
      cfd_abw_next(&c, jf, i, q[i], L.sc[2 * i], L.sc[2 * i + 1], R, p);
      for (int k = 0; k < 9; k++) L.R[9 * i + k] = R[k];
      for (int k = 0; k < 3; k++) L.p[3 * i + k] = p[k];
    }
  }
  __syncwarp();
  for (int i = lane; i < n; i += CFD_LANES) {  // world screws times qd (into V for now)
    double Sw[6];
    cfd_abw_screw(c.screw + 6 * i, jf, L.R + 9 * i, L.p + 3 * i, Sw);
    for (int k = 0; k < 6; k++) L.S[6 * i + k] = Sw[k], L.V[6 * i + k] = Sw[k] * qd[i];
  }
  __syncwarp();
  if (lane == 0)  // velocities: V_i = V_{i-1} + S_i qd_i
    for (int i = 1; i < n; i++)
      for (int k = 0; k < 6; k++) L.V[6 * i + k] += L.V[6 * (i - 1) + k];
  __syncwarp();
  // per link: c_i = V_i x S_i qd_i, the rigid inertia in the world (as its six rows, so that the
  // backward sweep's lanes read theirs without branching) and the bias force
  for (int i = lane; i < n; i += CFD_LANES) {
    double Sqd[6], J10[10];
    for (int k = 0; k < 6; k++) Sqd[k] = L.S[6 * i + k] * qd[i];
    cfd_ad(L.V + 6 * i, Sqd, L.c + 6 * i);
    cfd_abw_rigid(c.inertia + 36 * i, L.R + 9 * i, L.p + 3 * i, J10);
    cfd_abw_bias(J10, L.V + 6 * i, L.bias + 6 * i);
    for (int r = 0; r < 6; r++) cfd_wl_rigid_row(J10, r, L.J + 36 * i + 6 * r);
  }
  __syncwarp();
  // backward: lane r holds row r of IA (lanes 6, 7 shadow row 5), every lane all of pA
  int r = lane < 6 ? lane : 5;
  bool bad = false;
  double row[6] = {0, 0, 0, 0, 0, 0}, pA[6] = {0, 0, 0, 0, 0, 0};
  for (int i = n - 1; i >= 0; i--) {
    const double *S = L.S + 6 * i, *jr = L.J + 36 * i + 6 * r;
    double U[6], Ic[6];
    for (int k = 0; k < 6; k++) row[k] += jr[k], pA[k] += L.bias[6 * i + k];
    double Ur = cfd_lanes_dot6(row, S);
    for (int k = 0; k < 6; k++) U[k] = cfd_lane_get(Ur, k);
    double d = cfd_lanes_dot6(S, U) + c.armature[i] + (diag ? diag[i] : 0);
    if (!(d > 0)) bad = true, d = 1;
    double inv = 1 / d, su = (tau[i] - cfd_lanes_dot6(S, pA)) * inv, wr = Ur * inv;
    L.w[6 * i + r] = wr;  // the shadows write row 5's again, the same value
    if (lane == 0) L.ud[i] = su;
    if (i == 0) break;
    for (int k = 0; k < 6; k++) row[k] -= wr * U[k];
    double Icr = cfd_lanes_dot6(row, L.c + 6 * i);
    for (int k = 0; k < 6; k++) Ic[k] = cfd_lane_get(Icr, k);
    for (int k = 0; k < 6; k++) pA[k] += Ic[k] + U[k] * su;
  }
  __syncwarp();
  if (lane == 0) {  // accelerations
    double a[6] = {0, 0, 0, -c.gravity[0], -c.gravity[1], -c.gravity[2]};
    for (int i = 0; i < n; i++) {
      for (int k = 0; k < 6; k++) a[k] += L.c[6 * i + k];
      double qa = L.ud[i] - cfd_lanes_dot6(L.w + 6 * i, a);
      qacc[i] = qa;
      for (int k = 0; k < 6; k++) a[k] += L.S[6 * i + k] * qa;
    }
  }
  __syncwarp();
  return bad;
}

#endif  // CHAINFD_ABA_WORLD_LANES_CUH
