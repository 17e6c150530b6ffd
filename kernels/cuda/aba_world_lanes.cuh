// aba_world_lanes.cuh: the ABA in world coordinates (aba_world.h) for one instance of a short chain
// (n <= W lanes, W = 4 ... 32) by a group of W lanes of a warp, one link per lane, everything in
// registers: for rollouts in batches of a few thousand (rollout.cu), where a thread per instance
// leaves most of the GPU idle and serialises every step on one thread's latency.
//
// In world coordinates every serial chain of the ABA is a sum or a product along the chain, so
// the group runs them as scans over its lanes (log2 W shuffle rounds):
//   poses         T_i = T_0 ... T_i                      (inclusive product scan)
//   velocities    V_i = sum_{k<=i} S_k qd_k               (inclusive sum scan)
//   inertias      sum_{k>=i} J_k and the bias forces      (suffix sum scans)
// The backward sweep's rank-one corrections run right-looking: with IA_i = sum_{k>=i} J_k -
// sum_{j>i} U_j U_j^T / d_j, lane i keeps Y_i = IA_i S_i and Z_i = IA_i c_i and the scalars
// S_i.Y_i, Y_i.c_i, S_i.pA_i, and updates them as each U_j (j > i) is broadcast from lane j:
// per link one broadcast of 13 numbers and three dots per lane, where a sweep by rows needs four
// dots, twelve shuffles and shared-memory traffic. The accelerations are a unit lower-triangular
// solve: qa_i = su_i - w_i.(a_0 + sum_{k<=i} c_k) - sum_{k<i} (w_i.S_k) qa_k, one broadcast per
// link on its critical path.
// Same quantities as aba_world.h, summed in another order: the results differ from the CPU's
// world ABA by rounding, which grows with the chain's length (figures in docs/RESULTS.md).
#ifndef CHAINFD_ABA_WORLD_LANES_CUH
#define CHAINFD_ABA_WORLD_LANES_CUH

#include "aba_world.h"

#define CFD_WL_MASK 0xffffffffu

// Link `lane`'s constants, in joint frames (cfd_chain_in_joint_frames): home pose (link 0's
// translation left out, as cfd_abw_local), inertia parts, armature, joint kind. Lanes past the
// chain get a massless identity link, which adds nothing to any scan.
struct cfd_wl_link {
  double H[9], h[3], Io[9], mc[3], m, armature;
  int slide;
};

__device__ __forceinline__ cfd_wl_link cfd_wl_link_of(const cfd_chain& c, int i) {
  cfd_wl_link L;
  bool link = i < c.n;
  int j = link ? i : 0;
  for (int k = 0; k < 9; k++) L.H[k] = link ? c.home_R[9 * j + k] : (k % 4 == 0);
  for (int k = 0; k < 3; k++) L.h[k] = link && i > 0 ? c.home_p[3 * j + k] : 0;
  cfd_abw_inertia_parts(c.inertia + 36 * j, L.Io, L.mc, &L.m);
  if (!link) {
    for (int k = 0; k < 9; k++) L.Io[k] = 0;
    for (int k = 0; k < 3; k++) L.mc[k] = 0;
    L.m = 0;
  }
  L.armature = link ? c.armature[j] : 1;
  L.slide = link && c.screw[6 * j + 2] == 0;
  return L;
}

template <int W>
__device__ __forceinline__ double cfd_wl_get(double x, int src) {
  return __shfl_sync(CFD_WL_MASK, x, src, W);
}

// Inclusive product scan of poses: lane i's (R, p) becomes T_0 ... T_i.
template <int W>
__device__ __forceinline__ void cfd_wl_pose_scan(int lane, double R[9], double p[3]) {
#pragma unroll
  for (int d = 1; d < W; d *= 2) {
    double Rb[9], pb[3], Rn[9], pn[3];
    for (int k = 0; k < 9; k++) Rb[k] = __shfl_up_sync(CFD_WL_MASK, R[k], d, W);
    for (int k = 0; k < 3; k++) pb[k] = __shfl_up_sync(CFD_WL_MASK, p[k], d, W);
    if (lane >= d) {
      cfd_se3_mul(Rb, pb, R, p, Rn, pn);
      for (int k = 0; k < 9; k++) R[k] = Rn[k];
      for (int k = 0; k < 3; k++) p[k] = pn[k];
    }
  }
}

// Inclusive sum scan of K numbers per lane: lane i's x becomes sum_{k<=i} x_k.
template <int W, int K>
__device__ __forceinline__ void cfd_wl_prefix_sum(int lane, double x[K]) {
#pragma unroll
  for (int d = 1; d < W; d *= 2)
    for (int k = 0; k < K; k++) {
      double y = __shfl_up_sync(CFD_WL_MASK, x[k], d, W);
      if (lane >= d) x[k] += y;
    }
}

// Suffix sum: lane i's x becomes sum_{k>=i} x_k (over the group's W lanes).
template <int W, int K>
__device__ __forceinline__ void cfd_wl_suffix_sum(int lane, double x[K]) {
#pragma unroll
  for (int d = 1; d < W; d *= 2)
    for (int k = 0; k < K; k++) {
      double y = __shfl_down_sync(CFD_WL_MASK, x[k], d, W);
      if (lane + d < W) x[k] += y;
    }
}

// The right-looking backward sweep's two halves, shared with aba_world_blocks.cuh. A link's turn
// (its U = Y final): returns 1/d (of d = 1 when d is not positive: *ok false), u/d in *su and what
// the parent takes, G = IA c + U (u - U.c) / d, in G.
__device__ __forceinline__ double cfd_wl_turn(const double Y[6], const double Z[6], double d,
                                              double yc, double u, double* su, double G[6],
                                              bool* ok) {
  *ok = d > 0;
  double inv = 1 / (*ok ? d : 1);
  *su = u * inv;
  for (int k = 0; k < 6; k++) G[k] = Z[k] + Y[k] * (*su - yc * inv);
  return inv;
}

// A link nearer the base (below: lane < j) takes U_j, G_j and 1/d_j (ij) of a turn: IA_i -= U U^T
// / d_j, pA_i += G_j, on its Y = IA S, Z = IA c, d = S.IA S (+ diagonal terms), yc = Y.c and u =
// tau - S.pA. The other lanes run along with a zero 1/d_j and change nothing: a branch around the
// call costs the world-blocks kernel more than the skipped arithmetic saves. (Unchanged holds for
// finite values; a non-finite U makes them NaN, where the result is NaN anyway.)
// BIAS false: the inertias alone (u and Gj untouched; aba_world_blocks.cuh's split call).
template <bool BIAS = true>
__device__ __forceinline__ void cfd_wl_absorb(bool below, const double U[6], const double Gj[6],
                                              double ij, const double S[6], const double c[6],
                                              double Y[6], double Z[6], double* d, double* yc,
                                              double* u) {
  ij = below ? ij : 0;
  double US = cfd_dot6(U, S), a = US * ij, b = cfd_dot6(U, c) * ij;
  for (int k = 0; k < 6; k++) Y[k] -= U[k] * a, Z[k] -= U[k] * b;
  *d -= a * US;
  *yc -= b * US;
  if (BIAS) *u -= below ? cfd_dot6(Gj, S) : 0;
}

// qacc of link `lane` for the instance whose link-`lane` values are q (the chain's coordinate),
// qd, tau and diag (the joint-diagonal term); every lane of the warp calls it, lanes past n with
// zeros. Sets *bad when some d is not positive (the sweep goes on with d = 1).
template <int W>
__device__ __forceinline__ double cfd_wl_qacc(const cfd_wl_link& L, int n, int lane,
                                              const double gravity[3], double q, double qd,
                                              double tau, double diag, bool* bad) {
  // out: poses, world screws, velocities, c_i, world inertias and bias forces
  double s = 0, co = 1, R[9], p[3];
  if (!L.slide) sincos(q, &s, &co);
  cfd_abw_local_jf(L.H, L.h, L.slide, q, s, co, R, p);
  cfd_wl_pose_scan<W>(lane, R, p);
  double S[6], Sqd[6], V[6], c[6], J10[10], bias[6];  // S: [z; p x z] (hinge), [0; z] (slide)
  for (int k = 0; k < 3; k++) S[k] = L.slide ? 0 : R[3 * k + 2], S[3 + k] = L.slide ? R[3 * k + 2] : 0;
  if (!L.slide) cfd_cross(p, S, S + 3);
  for (int k = 0; k < 6; k++) V[k] = Sqd[k] = S[k] * qd;
  cfd_wl_prefix_sum<W, 6>(lane, V);
  cfd_ad(V, Sqd, c);
  cfd_abw_rigid_parts(L.Io, L.mc, L.m, R, p, J10);
  cfd_abw_bias(J10, V, bias);
  // in: the tip-ward sums, then the right-looking rank-one corrections
  cfd_wl_suffix_sum<W, 10>(lane, J10);
  cfd_wl_suffix_sum<W, 6>(lane, bias);
  double Y[6], Z[6], w[6] = {0, 0, 0, 0, 0, 0}, su = 0;
  cfd_abw_rigid_mul(J10, S, Y);
  cfd_abw_rigid_mul(J10, c, Z);
  double d = cfd_dot6(S, Y) + L.armature + diag;  // S.IA S + the joint-diagonal terms
  double yc = cfd_dot6(Y, c);                     // U.c
  double u = tau - cfd_dot6(S, bias);             // tau - S.pA
#pragma unroll 1
  for (int j = n - 1; j >= 0; j--) {
    // lane j's U_j = Y is final: d, su and what its parent gets
    bool ok;
    double sj, G[6], inv = cfd_wl_turn(Y, Z, d, yc, u, &sj, G, &ok);
    if (lane == j) {
      for (int k = 0; k < 6; k++) w[k] = Y[k] * inv;
      su = sj;
      if (!ok) *bad = true;
    }
    if (j == 0) break;
    double U[6], Gj[6];
    for (int k = 0; k < 6; k++) U[k] = cfd_wl_get<W>(Y[k], j), Gj[k] = cfd_wl_get<W>(G[k], j);
    double ij = cfd_wl_get<W>(inv, j);
    cfd_wl_absorb(lane < j, U, Gj, ij, S, c, Y, Z, &d, &yc, &u);
  }
  // out: qa_i = su_i - w_i.(a_0 + sum_{k<=i} c_k) - sum_{k<i} (w_i.S_k) qa_k, with a_0 = -gravity
  cfd_wl_prefix_sum<W, 6>(lane, c);
  double a0c[6] = {c[0], c[1], c[2], c[3] - gravity[0], c[4] - gravity[1], c[5] - gravity[2]};
  double qa = su - cfd_dot6(w, a0c), wS[W];
#pragma unroll
  for (int k = 0; k < W; k++) {  // off the critical path: every w_i.S_k
    if (k + 1 >= n) break;       // (the last link's S is never needed; n is the warp's own)
    double Sk[6];
    for (int e = 0; e < 6; e++) Sk[e] = cfd_wl_get<W>(S[e], k);
    wS[k] = cfd_dot6(w, Sk);
  }
#pragma unroll
  for (int k = 0; k < W - 1; k++) {
    if (k + 1 >= n) break;
    double qk = cfd_wl_get<W>(qa, k);
    if (lane > k) qa -= wS[k] * qk;
  }
  return qa;
}

#endif  // CHAINFD_ABA_WORLD_LANES_CUH
