// aba_lanes.cuh: the articulated-body algorithm for one instance by a group of 8 lanes of a warp,
// shared by the rollout kernel (rollout.cu: short chains, state in shared memory) and the batch
// forward-dynamics kernel for long chains in small batches (abia.cu: state in global memory).
// One thread per instance leaves the GPU idle at such batch sizes and serialises every link on
// one thread's latency; the group splits the sweeps of aba_core.h by what is independent:
//   per link (lanes take links in turn): poses, then c_i and bias forces;
//   per row of the articulated inertia (lane r owns row r): the backward sweep, whose congruence
//     X^T Ia X is the bulk of the ABA's arithmetic: row r of Y = Ia X is [R a + p x R b; R b] for
//     row r = [a; b], and row r of X^T Y combines the rows of Y, exchanged by warp shuffles;
//   serially (lane 0): the velocity and acceleration recursions, which are short.
// Same formulas as aba_core.h (not lean), so results equal the CPU's to rounding. The per-link
// arrays (any memory the group shares): R 9n, p 3n, V 6n, c 6n, bias 6n, U 6n, 1/d n, u n.
#ifndef CHAINFD_ABA_LANES_CUH
#define CHAINFD_ABA_LANES_CUH

#include "aba_core.h"

#define CFD_LANES 8

struct cfd_lanes_links {
  double *R, *p, *V, *c, *bias, *U, *d, *u;
};

// doubles of cfd_lanes_links for n links
#define CFD_LANES_LINK_DOUBLES 38

__device__ __forceinline__ cfd_lanes_links cfd_lanes_links_at(double* s, int n) {
  cfd_lanes_links L;
  L.R = s; L.p = L.R + 9 * n; L.V = L.p + 3 * n; L.c = L.V + 6 * n; L.bias = L.c + 6 * n;
  L.U = L.bias + 6 * n; L.d = L.U + 6 * n; L.u = L.d + n;
  return L;
}

// a . b as a tree (three products at a time): half the dependent chain of cfd_dot6, which is on
// the backward sweep's critical path
__device__ __forceinline__ double cfd_lanes_dot6(const double* a, const double* b) {
  return (a[0] * b[0] + a[1] * b[1] + a[2] * b[2]) + (a[3] * b[3] + a[4] * b[4] + a[5] * b[5]);
}

__device__ __forceinline__ double cfd_lane_get(double x, int src) {
  return __shfl_sync(0xffffffffu, x, src, CFD_LANES);
}

// Velocities (lane 0), then c_i and the rigid-body bias force of each link (lanes in turn).
// The poses must be in L.R, L.p. Ends with the group in step.
__device__ __forceinline__ void cfd_lanes_velocities(const cfd_chain& c, int lane, const double* qd,
                                                     const cfd_lanes_links& L) {
  int n = c.n;
  if (lane == 0) {
    double V[6] = {0, 0, 0, 0, 0, 0};
    for (int i = 0; i < n; i++) {
      const double* S = c.screw + 6 * i;
      double Vc[6];
      cfd_twist_to_child(L.R + 9 * i, L.p + 3 * i, V, Vc);
      for (int k = 0; k < 6; k++) L.V[6 * i + k] = V[k] = Vc[k] + S[k] * qd[i];
    }
  }
  __syncwarp();
  for (int i = lane; i < n; i += CFD_LANES) {
    const double* S = c.screw + 6 * i;
    double Sqd[6], JV[6];
    for (int k = 0; k < 6; k++) Sqd[k] = S[k] * qd[i];
    cfd_ad(L.V + 6 * i, Sqd, L.c + 6 * i);
    cfd_mat6_vec(c.inertia + 36 * i, L.V + 6 * i, JV);
    cfd_neg_adstar(L.V + 6 * i, JV, L.bias + 6 * i);
  }
  __syncwarp();
}

// shared doubles per group for cfd_lanes_backward's exchange (36, padded so that the four groups
// of a warp read from different banks; even, so that each group's part stays 16-byte aligned)
#define CFD_LANES_XCH 50

// The backward sweep, lane r holding row r of the articulated inertia (lanes 6, 7 shadow row 5):
// U, d, u of every link into L. diag (may be NULL) is added to d beside the armature. xch: the
// group's CFD_LANES_XCH doubles of shared memory, through which the rows of Y are exchanged (NULL:
// by shuffles). Returns whether some d was not positive (the group keeps in step; the caller
// reports it). Every lane of the warp must call it (shuffles). Ends with the group in step.
__device__ __forceinline__ bool cfd_lanes_backward(const cfd_chain& c, int lane, const double* tau,
                                                   const double* diag, const cfd_lanes_links& L,
                                                   double* xch) {
  int n = c.n, r = lane < 6 ? lane : 5;
  bool bad = false;
  double row[6], pA[6] = {0, 0, 0, 0, 0, 0};
  for (int k = 0; k < 6; k++) row[k] = c.inertia[36 * (n - 1) + 6 * r + k];
  for (int i = n - 1; i >= 0; i--) {
    const double* S = c.screw + 6 * i;
    const double* R = L.R + 9 * i;
    const double* pp = L.p + 3 * i;
    for (int k = 0; k < 6; k++) pA[k] += L.bias[6 * i + k];
    double Ur = cfd_lanes_dot6(row, S), U[6];
    for (int k = 0; k < 6; k++) U[k] = cfd_lane_get(Ur, k);
    double d = cfd_lanes_dot6(S, U) + c.armature[i] + (diag ? diag[i] : 0);
    if (!(d > 0)) bad = true, d = 1;
    double u = tau[i] - cfd_lanes_dot6(S, pA), inv = 1 / d;
    if (lane < 6) L.U[6 * i + lane] = Ur;
    if (lane == 0) L.d[i] = inv, L.u[i] = u;  // 1/d: the accelerations multiply
    if (i == 0) break;
    for (int k = 0; k < 6; k++) row[k] -= Ur * U[k] * inv;
    double Icr = cfd_lanes_dot6(row, L.c + 6 * i), pa[6], su = u * inv;
    for (int k = 0; k < 6; k++) pa[k] = pA[k] + cfd_lane_get(Icr, k) + U[k] * su;
    cfd_wrench_to_parent(R, pp, pa, pA);
    double Ra[3], Rb[3], pRb[3], y[6], xr[6];
    cfd_rot(R, row, Ra);
    cfd_rot(R, row + 3, Rb);
    cfd_cross(pp, Rb, pRb);
    for (int k = 0; k < 3; k++) y[k] = Ra[k] + pRb[k], y[3 + k] = Rb[k];
    if (r < 3) {  // row r of X^T = [[R, p^ R], [0, R]]
      for (int j = 0; j < 3; j++) {
        double col[3] = {R[j], R[3 + j], R[6 + j]}, pc[3];
        cfd_cross(pp, col, pc);
        xr[j] = R[3 * r + j];
        xr[3 + j] = pc[r];
      }
    } else {
      for (int j = 0; j < 3; j++) xr[j] = 0, xr[3 + j] = R[3 * (r - 3) + j];
    }
    const double* Jp = c.inertia + 36 * (i - 1) + 6 * r;
    for (int k = 0; k < 6; k++) row[k] = Jp[k];
    if (xch) {
      if (lane < 6)
        for (int k = 0; k < 6; k++) xch[6 * lane + k] = y[k];
      __syncwarp();
      for (int j = 0; j < 6; j++)
        for (int k = 0; k < 6; k += 2) {  // 16-byte reads (xch is 16-byte aligned)
          double2 y2 = *reinterpret_cast<const double2*>(xch + 6 * j + k);
          row[k] += xr[j] * y2.x;
          row[k + 1] += xr[j] * y2.y;
        }
      __syncwarp();  // read before the next link's writes
    } else {
      for (int j = 0; j < 6; j++)
        for (int k = 0; k < 6; k++) row[k] += xr[j] * cfd_lane_get(y[k], j);
    }
  }
  __syncwarp();
  return bad;
}

// Accelerations (lane 0 only; the caller syncs the group after).
__device__ __forceinline__ void cfd_lanes_accelerations(const cfd_chain& c,
                                                        const cfd_lanes_links& L, double* qacc) {
  double a[6] = {0, 0, 0, -c.gravity[0], -c.gravity[1], -c.gravity[2]};
  for (int i = 0; i < c.n; i++) {
    const double* S = c.screw + 6 * i;
    double ai[6];
    cfd_twist_to_child(L.R + 9 * i, L.p + 3 * i, a, ai);
    for (int k = 0; k < 6; k++) ai[k] += L.c[6 * i + k];
    double qa = (L.u[i] - cfd_lanes_dot6(L.U + 6 * i, ai)) * L.d[i];
    qacc[i] = qa;
    for (int k = 0; k < 6; k++) a[k] = ai[k] + S[k] * qa;
  }
}

#endif  // CHAINFD_ABA_LANES_CUH
