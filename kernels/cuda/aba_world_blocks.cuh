// aba_world_blocks.cuh: the ABA in world coordinates (aba_world.h) for one instance of a chain of
// any length in blocks of 32 links, a link per lane: the right-looking sweeps of
// aba_world_lanes.cuh, run block after block, with what a block passes on carried in registers,
// by one warp (cfd_awb_qacc: batches up to a few thousand, the rollouts) or by a warp per block
// (cfd_awb_qacc_warps: one chain or a few, where each sweep's local part runs on every block at
// once and only the turns go block after block). For one long chain (and small batches of them),
// where a group of lanes in link frames walks the chain link by link through a 6x6 congruence
// each (aba_lanes.cuh: a long dependent step per link) and CFA pays a cluster barrier per level
// of elimination and scan.
//
//   out (base to tip): per block, the poses as a product scan and the velocities as a prefix sum,
//     relative to the link before the block (its anchor); then the anchors' poses and velocities
//     block after block; S_i, c_i, the world inertias J_i and bias forces.
//   in (tip to base): per block, the tip-ward sums of J and of the bias forces within the block
//     plus what the blocks beyond hand over, P (their articulated inertia, a symmetric 6x6) and
//     Pb (their bias force with the corrections); then, as aba_world_lanes.cuh, lane i keeps
//     Y_i = IA_i S_i, Z_i = IA_i c_i and three scalars, updated as each U_j (j > i in the block)
//     is broadcast. At the block's end a scan over the lanes sums its U_j U_j^T / d_j and G_j,
//     which with the block's J and bias totals gives the next block's P and Pb:
//       P' = P + sum_block J - sum_block U U^T / d,   Pb' = Pb + sum_block bias + sum_block G.
//   out again: per block, the unit triangular solve of aba_world_lanes.cuh from the acceleration
//     of the previous block's last link, which the block's sum of c_k + S_k qa_k carries on.
// Per link one broadcast of 13 numbers on the backward sweep's critical path, a shuffle scan per
// block and quantity elsewhere; scratch per link CFD_AWB_LINK_DOUBLES in global memory, read back by
// the lane that wrote it (and r_b by every lane, after a warp barrier). The sweeps are bound by
// latency (dependent results and shuffles), not by instruction issue. World coordinates cost
// rounding that grows with the distance from the reference point (aba_world.h), so each block
// works about the origin of its middle link, and what passes between blocks is moved from one
// origin to the next.
#ifndef CHAINFD_ABA_WORLD_BLOCKS_CUH
#define CHAINFD_ABA_WORLD_BLOCKS_CUH

#include "aba_world_lanes.cuh"
#include "aba_world_tau.h"

// the lane whose link's origin is its block's reference point (in a last block of fewer than 16
// links a massless stand-in, at the last link's origin)
#define CFD_AWB_MIDDLE 15
#define CFD_AWB_LINK_DOUBLES 31  // S 6, c 6, J 10 (then w 6, su 1), bias 6, r_b 3 (a block's last)

// I -= s U U^T for an articulated inertia in cfd_abw_inertia's parts
__device__ __forceinline__ void cfd_awb_rank1(cfd_abw_inertia* I, const double U[6], double s) {
  I->A[0] -= s * U[0] * U[0]; I->A[1] -= s * U[1] * U[1]; I->A[2] -= s * U[2] * U[2];
  I->A[3] -= s * U[0] * U[1]; I->A[4] -= s * U[0] * U[2]; I->A[5] -= s * U[1] * U[2];
  for (int r = 0; r < 3; r++)
    for (int k = 0; k < 3; k++) I->B[3 * r + k] -= s * U[r] * U[3 + k];
  I->C[0] -= s * U[3] * U[3]; I->C[1] -= s * U[4] * U[4]; I->C[2] -= s * U[5] * U[5];
  I->C[3] -= s * U[3] * U[4]; I->C[4] -= s * U[3] * U[5]; I->C[5] -= s * U[4] * U[5];
}

// Moving the reference point from o' to o = o' - r: a twist about o becomes T x about o' with
// T = [[1, 0], [-r^, 1]], so an inertia about o' becomes T^T P T about o:
//   A' = A - B r^ + r^ B^T - r^ C r^,   B' = B + r^ C,   C' = C,
// a wrench [m; f] about o' becomes [m + r x f; f] about o, a twist [w; v] about o becomes
// [w; v + w x r] about o'.
__device__ __forceinline__ void cfd_awb_sym_full(const double s[6], double M[9]) {
  M[0] = s[0]; M[4] = s[1]; M[8] = s[2];
  M[1] = M[3] = s[3]; M[2] = M[6] = s[4]; M[5] = M[7] = s[5];
}

static __device__ void cfd_awb_shift_inertia(cfd_abw_inertia* P, const double r[3]) {
  double A[9], C[9], X[9];  // X = r^
  cfd_awb_sym_full(P->A, A);
  cfd_awb_sym_full(P->C, C);
  X[0] = 0; X[1] = -r[2]; X[2] = r[1]; X[3] = r[2]; X[4] = 0; X[5] = -r[0];
  X[6] = -r[1]; X[7] = r[0]; X[8] = 0;
  double XC[9], BX[9], XCX[9], An[9];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) {
      double xc = 0, bx = 0;
      for (int k = 0; k < 3; k++) xc += X[3 * i + k] * C[3 * k + j], bx += P->B[3 * i + k] * X[3 * k + j];
      XC[3 * i + j] = xc;
      BX[3 * i + j] = bx;
    }
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) {
      double xcx = 0;
      for (int k = 0; k < 3; k++) xcx += XC[3 * i + k] * X[3 * k + j];
      XCX[3 * i + j] = xcx;
    }
  // r^ B^T = -(B r^)^T
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) An[3 * i + j] = A[3 * i + j] - BX[3 * i + j] - BX[3 * j + i] - XCX[3 * i + j];
  P->A[0] = An[0]; P->A[1] = An[4]; P->A[2] = An[8];
  P->A[3] = 0.5 * (An[1] + An[3]); P->A[4] = 0.5 * (An[2] + An[6]); P->A[5] = 0.5 * (An[5] + An[7]);
  for (int k = 0; k < 9; k++) P->B[k] += XC[k];
}

__device__ __forceinline__ void cfd_awb_broadcast(double* x, int K, int src) {
  for (int k = 0; k < K; k++) x[k] = __shfl_sync(CFD_WL_MASK, x[k], src);
}

// --- a block's part of each sweep, for one warp running the blocks in turn (cfd_awb_qacc) or a
// warp per block (cfd_awb_qacc_warps). Each sweep has a part that needs nothing from the other
// blocks (_local) and a part that takes what the block before it in the sweep hands over (_turn,
// _world): only the latter runs block after block. (The accelerations' two parts serve the warp
// per block only: cfd_awb_qacc runs them as one loop, which spares the rollouts' kernel spills.)

// out, local: link `lane`'s pose and velocity relative to the link before its block (the block's
// anchor), in the anchor's frame and about its origin.
struct cfd_awb_rel {
  double R[9], p[3], V[6], qd;
};

static __device__ __forceinline__ void cfd_awb_out_local(const cfd_chain& c, int i, int lane,
                                                         double qi, double qdi, cfd_awb_rel* r) {
  const cfd_wl_link L = cfd_wl_link_of(c, i < c.n ? i : c.n);  // past the chain: massless
  double s = 0, co = 1, S[6];
  if (!L.slide) sincos(qi, &s, &co);
  cfd_abw_local_jf(L.H, L.h, L.slide, qi, s, co, r->R, r->p);
  cfd_wl_pose_scan<32>(lane, r->R, r->p);
  for (int k = 0; k < 3; k++) S[k] = L.slide ? 0 : r->R[3 * k + 2], S[3 + k] = L.slide ? r->R[3 * k + 2] : 0;
  if (!L.slide) cfd_cross(r->p, S, S + 3);
  for (int k = 0; k < 6; k++) r->V[k] = S[k] * qdi;
  cfd_wl_prefix_sum<32, 6>(lane, r->V);
  r->qd = qdi;
}

// A block's anchor: the world rotation R of the link before it and that link's velocity V about
// its origin a_b. The block's origin o_b = a_b + m_b, m_b = R p_15 (its middle lane's offset).
struct cfd_awb_anchor {
  double R[9], V[6];
};

// From block b's anchor to block b+1's, given block b's last lane's relative pose and velocity
// (R31, p31, V31); d = a_{b+1} - a_b.
static __device__ __forceinline__ void cfd_awb_next_anchor(cfd_awb_anchor* a, const double R31[9],
                                                           const double p31[3],
                                                           const double V31[6], double d[3]) {
  double Rn[9], w[6], t[3];
  cfd_mat3_mul(a->R, R31, Rn);
  cfd_rot(a->R, p31, d);
  cfd_rot(a->R, V31, w);
  cfd_rot(a->R, V31 + 3, w + 3);
  for (int k = 0; k < 6; k++) a->V[k] += w[k];
  cfd_cross(a->V, d, t);  // about a_{b+1}
  for (int k = 0; k < 3; k++) a->V[3 + k] += t[k];
  for (int k = 0; k < 9; k++) a->R[k] = Rn[k];
}

// A link's quantities about its block's origin o_b, between the sweeps: world screw S, velocity
// product c, world inertia J, bias force; zero past the chain.
struct cfd_awb_lane {
  double S[6], c[6], J[10], bias[6];
};

// out, given the anchor: the world quantities of link i about o_b (m: o_b - a_b).
static __device__ __forceinline__ void cfd_awb_out_world(const cfd_chain& c, int i,
                                                         const cfd_awb_anchor& a, const double m[3],
                                                         const cfd_awb_rel& r, cfd_awb_lane* x) {
  const cfd_wl_link L = cfd_wl_link_of(c, i < c.n ? i : c.n);
  double R[9], p[3], V[6], Sqd[6], t[3];
  cfd_mat3_mul(a.R, r.R, R);
  cfd_rot(a.R, r.p, p);
  for (int k = 0; k < 3; k++) p[k] -= m[k];
  double* S = x->S;
  for (int k = 0; k < 3; k++) S[k] = L.slide ? 0 : R[3 * k + 2], S[3 + k] = L.slide ? R[3 * k + 2] : 0;
  if (!L.slide) cfd_cross(p, S, S + 3);
  cfd_rot(a.R, r.V, V);  // the relative velocity in the world, plus the anchor's, about o_b
  cfd_rot(a.R, r.V + 3, V + 3);
  for (int k = 0; k < 6; k++) V[k] += a.V[k];
  cfd_cross(V, m, t);
  for (int k = 0; k < 3; k++) V[3 + k] += t[k];
  for (int k = 0; k < 6; k++) Sqd[k] = S[k] * r.qd;
  cfd_ad(V, Sqd, x->c);
  cfd_abw_rigid_parts(L.Io, L.mc, L.m, R, p, x->J);
  cfd_abw_bias(x->J, V, x->bias);
  if (i >= c.n) *x = cfd_awb_lane{};
}

// in: lane i keeps Y_i = IA_i S_i, Z_i = IA_i c_i, d_i = S_i.Y_i (+ diagonal terms), yc = Y_i.c_i
// and u_i = tau_i - S_i.pA_i (aba_world_lanes.cuh).
struct cfd_awb_in {
  double Y[6], Z[6], d, yc, u;
};

// in, local: the tip-ward sums of J and of the bias forces within the block; Jt, bt: the block's
// totals. dj: the joint-diagonal terms (1 past the chain). BIAS false: the inertias alone (u and
// bt left unset; the split call's first half, where the bias forces' sweep is the host's).
template <bool BIAS = true>
static __device__ __forceinline__ void cfd_awb_in_local(int lane, const cfd_awb_lane& x,
                                                        double tau_i, double dj, cfd_awb_in* s,
                                                        double Jt[10], double bt[6]) {
  double J[10], bias[6];
  for (int k = 0; k < 10; k++) J[k] = x.J[k];
  cfd_wl_suffix_sum<32, 10>(lane, J);
  cfd_abw_rigid_mul(J, x.S, s->Y);
  cfd_abw_rigid_mul(J, x.c, s->Z);
  s->d = dj;
  for (int k = 0; k < 10; k++) Jt[k] = __shfl_sync(CFD_WL_MASK, J[k], 0);
  if (BIAS) {
    for (int k = 0; k < 6; k++) bias[k] = x.bias[k];
    cfd_wl_suffix_sum<32, 6>(lane, bias);
    s->u = tau_i - cfd_dot6(x.S, bias);
    for (int k = 0; k < 6; k++) bt[k] = __shfl_sync(CFD_WL_MASK, bias[k], 0);
  }
}

// in, the block's turn: P and Pb (the articulated inertia and bias force of the blocks beyond,
// about o_{b+1}) moved to o_b by r = o_{b+1} - o_b (NULL: the last block, nothing beyond), the
// right-looking sweep over the block's count links, each lane's w = U / d, su = u / d and 1/d,
// then P and Pb handed over about o_b:
//   P' = P + sum_block J - sum_block U U^T / d,   Pb' = Pb + sum_block bias + sum_block G.
// Returns whether some d on this lane's link was not positive (the sweep goes on with d = 1).
// BIAS false: the inertias alone (Pb, u, G, su left alone; a third of each link's turn), and in
// ac the lane's IA^a c = Z - U (U.c) / d, the share of c in what it hands to the link before.
template <bool BIAS = true>
static __device__ __forceinline__ bool cfd_awb_in_turn(int lane, int count, bool link,
                                                       const cfd_awb_lane& x, cfd_awb_in s,
                                                       const double Jt[10], const double bt[6],
                                                       const double* r, cfd_abw_inertia* P,
                                                       double Pb[6], double w[6], double* su,
                                                       double* inv_d, double* ac = nullptr) {
  if (r) {
    cfd_awb_shift_inertia(P, r);
    if (BIAS) {
      double rf[3];
      cfd_cross(r, Pb + 3, rf);
      for (int k = 0; k < 3; k++) Pb[k] += rf[k];
    }
  }
  double PS[6], Pc[6];
  cfd_abw_mul(P, x.S, PS);
  cfd_abw_mul(P, x.c, Pc);
  double Y[6], Z[6];
  for (int k = 0; k < 6; k++) Y[k] = s.Y[k] + PS[k], Z[k] = s.Z[k] + Pc[k];
  double d = cfd_dot6(x.S, Y) + s.d, yc = cfd_dot6(Y, x.c), u = BIAS ? s.u - cfd_dot6(x.S, Pb) : 0;
#pragma unroll 1
  for (int j = count - 1; j > 0; j--) {  // lane j's U_j = Y is final: to the lanes below
    bool ok;
    double sj, U[6], Gj[6], ij;
    if (BIAS) ij = cfd_wl_turn(Y, Z, d, yc, u, &sj, Gj, &ok);
    else ij = 1 / (d > 0 ? d : 1);
    for (int k = 0; k < 6; k++) U[k] = Y[k];
    cfd_awb_broadcast(U, 6, j);
    if (BIAS) cfd_awb_broadcast(Gj, 6, j);
    ij = __shfl_sync(CFD_WL_MASK, ij, j);
    cfd_wl_absorb<BIAS>(lane < j, U, Gj, ij, x.S, x.c, Y, Z, &d, &yc, &u);
  }
  // each lane's own link as it was at its turn (nothing changed it since): 1/d, u/d, G
  bool ok;
  double my_G[6], my_inv = cfd_wl_turn(Y, Z, d, yc, u, su, my_G, &ok);
  if (!link) {  // past the chain: nothing to the sums below
    my_inv = *su = 0;
    for (int k = 0; k < 6; k++) my_G[k] = 0;
  }
  for (int k = 0; k < 6; k++) w[k] = Y[k] * my_inv;
  *inv_d = my_inv;
  if (!BIAS)
    for (int k = 0; k < 6; k++) ac[k] = Z[k] - w[k] * yc;
  // the sums over the block's lanes as a scan (the same total on every lane, in a fixed order)
  constexpr int NT = BIAS ? 27 : 21;  // U U^T / d (A 6, B 9, C 6), then G 6
  double t[27];
  cfd_abw_inertia T = {{0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0}};
  cfd_awb_rank1(&T, Y, -my_inv);
  for (int k = 0; k < 6; k++) t[k] = T.A[k], t[15 + k] = T.C[k], t[21 + k] = my_G[k];
  for (int k = 0; k < 9; k++) t[6 + k] = T.B[k];
  cfd_wl_prefix_sum<32, NT>(lane, t);
  cfd_awb_broadcast(t, NT, 31);
  for (int k = 0; k < 6; k++) P->A[k] -= t[k], P->C[k] -= t[15 + k];
  if (BIAS)
    for (int k = 0; k < 6; k++) Pb[k] += bt[k] + t[21 + k];
  for (int k = 0; k < 9; k++) P->B[k] -= t[6 + k];
  cfd_abw_add(P, Jt);
  return link && !ok;
}

// out again: qa_i = su_i - w_i.(Ac + sum_{k<=i} c_k) - sum_{k<i} (w_i.S_k) qa_k over the block,
// Ac the acceleration of the link before it about o_b. Local: every w_i.S_k, qa without Ac, the
// block's sum of c.
struct cfd_awb_acc {
  double qa, wS[31], ct[6];
};

static __device__ __forceinline__ void cfd_awb_acc_local(int lane, int count, const double S[6],
                                                         const double c[6], const double w[6],
                                                         double su, cfd_awb_acc* a) {
  double cs[6];
  for (int k = 0; k < 6; k++) cs[k] = c[k];
  cfd_wl_prefix_sum<32, 6>(lane, cs);
  a->qa = su - cfd_dot6(w, cs);
  for (int k = 0; k < 6; k++) a->ct[k] = __shfl_sync(CFD_WL_MASK, cs[k], 31);
#pragma unroll
  for (int k = 0; k < 31; k++) {
    if (k + 1 >= count) break;
    double Sk[6];
    for (int e = 0; e < 6; e++) Sk[e] = __shfl_sync(CFD_WL_MASK, S[e], k);
    a->wS[k] = cfd_dot6(w, Sk);
  }
}

// The block's turn: qa of the lane's link, and Ac moved on to the next block's origin (r =
// o_{b+1} - o_b; NULL for the last block).
static __device__ __forceinline__ double cfd_awb_acc_turn(int lane, int count, const double S[6],
                                                          const double w[6], const cfd_awb_acc& a,
                                                          const double* r, double Ac[6]) {
  double qa = a.qa - cfd_dot6(w, Ac);
#pragma unroll
  for (int k = 0; k < 31; k++) {
    if (k + 1 >= count) break;
    double qk = __shfl_sync(CFD_WL_MASK, qa, k);
    if (lane > k) qa -= a.wS[k] * qk;
  }
  if (!r) return qa;
  double x[6], wr[3];  // the block's share of its last link's acceleration
  for (int k = 0; k < 6; k++) x[k] = S[k] * qa;
  cfd_wl_prefix_sum<32, 6>(lane, x);
  cfd_awb_broadcast(x, 6, 31);
  for (int k = 0; k < 6; k++) Ac[k] += a.ct[k] + x[k];
  cfd_cross(Ac, r, wr);  // then to the next block's origin
  for (int k = 0; k < 3; k++) Ac[3 + k] += wr[k];
  return qa;
}

// qacc of one chain (c in joint frames) by the 32 lanes of a warp, block after block; q, qd, tau,
// diag (or NULL) and qacc are the instance's n-vectors, scratch CFD_AWB_LINK_DOUBLES * n doubles.
// Returns (on every lane) whether some d was not positive (the sweep goes on with d = 1).
// Each block's quantities are about its own origin o_b, the origin of its middle link, so that
// rounding grows with half a block's extent rather than the chain's; what passes between blocks
// moves by r_b = o_{b+1} - o_b, kept in the scratch of the block's last link.
static __device__ bool cfd_awb_qacc(const cfd_chain& c, const double* __restrict__ q,
                                    const double* __restrict__ qd, const double* __restrict__ tau,
                                    const double* __restrict__ diag, double* __restrict__ qacc,
                                    double* __restrict__ scratch) {
  const int n = c.n, lane = threadIdx.x & 31;
  bool bad = false;
#define AWB_LINK(i) (scratch + (size_t)CFD_AWB_LINK_DOUBLES * (i))
  // out, block by block; dm: a_{b+1} - o_b, to which the next block's m adds up to r_b
  cfd_awb_anchor a = {{1, 0, 0, 0, 1, 0, 0, 0, 1}, {0, 0, 0, 0, 0, 0}};
  double dm[3] = {0, 0, 0};
  for (int base = 0; base < n; base += 32) {
    int i = base + lane;
    bool link = i < n;
    cfd_awb_rel r;
    cfd_awb_out_local(c, i, lane, link ? q[i] : 0, link ? qd[i] : 0, &r);
    double p15[3], m[3];
    for (int k = 0; k < 3; k++) p15[k] = __shfl_sync(CFD_WL_MASK, r.p[k], CFD_AWB_MIDDLE);
    cfd_rot(a.R, p15, m);
    if (base > 0 && lane == 0)
      for (int k = 0; k < 3; k++) AWB_LINK(base - 1)[28 + k] = dm[k] + m[k];
    cfd_awb_lane x;
    cfd_awb_out_world(c, i, a, m, r, &x);
    if (link) {
      double* w = AWB_LINK(i);
      for (int k = 0; k < 6; k++) w[k] = x.S[k], w[6 + k] = x.c[k], w[22 + k] = x.bias[k];
      for (int k = 0; k < 10; k++) w[12 + k] = x.J[k];
    }
    double R31[9], p31[3], V31[6], d[3];
    for (int k = 0; k < 9; k++) R31[k] = __shfl_sync(CFD_WL_MASK, r.R[k], 31);
    for (int k = 0; k < 3; k++) p31[k] = __shfl_sync(CFD_WL_MASK, r.p[k], 31);
    for (int k = 0; k < 6; k++) V31[k] = __shfl_sync(CFD_WL_MASK, r.V[k], 31);
    cfd_awb_next_anchor(&a, R31, p31, V31, d);
    for (int k = 0; k < 3; k++) dm[k] = d[k] - m[k];
  }
  __syncwarp();  // lane 0's r_b, read by every lane below
  // in: blocks from the tip
  cfd_abw_inertia P = {{0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0}};
  double Pb[6] = {0, 0, 0, 0, 0, 0};
  for (int base = (n - 1) / 32 * 32; base >= 0; base -= 32) {
    int i = base + lane, count = min(32, n - base);
    bool link = i < n;
    double* w = AWB_LINK(link ? i : 0);
    cfd_awb_lane x = {};
    if (link) {
      for (int k = 0; k < 6; k++) x.S[k] = w[k], x.c[k] = w[6 + k], x.bias[k] = w[22 + k];
      for (int k = 0; k < 10; k++) x.J[k] = w[12 + k];
    }
    cfd_awb_in s;
    double Jt[10], bt[6], wi[6], su, inv_d;
    cfd_awb_in_local(lane, x, link ? tau[i] : 0, link ? c.armature[i] + (diag ? diag[i] : 0) : 1,
                     &s, Jt, bt);
    bad |= cfd_awb_in_turn(lane, count, link, x, s, Jt, bt,
                           base + 32 < n ? AWB_LINK(base + 31) + 28 : NULL, &P, Pb, wi, &su,
                           &inv_d);
    if (link) {  // J's slots now hold w = U / d and su = u / d for the accelerations
      for (int k = 0; k < 6; k++) w[12 + k] = wi[k];
      w[18] = su;
    }
  }
  // out again, block by block from the base (inline rather than cfd_awb_acc_local and _turn,
  // whose split makes the rollouts' kernel spill registers)
  double Ac[6] = {0, 0, 0, -c.gravity[0], -c.gravity[1], -c.gravity[2]};
  for (int base = 0; base < n; base += 32) {
    int i = base + lane, count = min(32, n - base);
    bool link = i < n;
    const double* w = AWB_LINK(link ? i : 0);
    double S[6], cc[6], wi[6], cs[6], su = link ? w[18] : 0;
    for (int k = 0; k < 6; k++) {
      S[k] = link ? w[k] : 0;
      cs[k] = cc[k] = link ? w[6 + k] : 0;
      wi[k] = link ? w[12 + k] : 0;
    }
    cfd_wl_prefix_sum<32, 6>(lane, cs);
    for (int k = 0; k < 6; k++) cs[k] += Ac[k];
    double qa = su - cfd_dot6(wi, cs), wS[31];
#pragma unroll
    for (int k = 0; k < 31; k++) {  // off the critical path: every w_i.S_k
      if (k + 1 >= count) break;
      double Sk[6];
      for (int e = 0; e < 6; e++) Sk[e] = __shfl_sync(CFD_WL_MASK, S[e], k);
      wS[k] = cfd_dot6(wi, Sk);
    }
#pragma unroll
    for (int k = 0; k < 31; k++) {
      if (k + 1 >= count) break;
      double qk = __shfl_sync(CFD_WL_MASK, qa, k);
      if (lane > k) qa -= wS[k] * qk;
    }
    if (link) qacc[i] = qa;
    if (base + 32 >= n) break;
    double x[6], wr[3];  // the block's share of its last link's acceleration: sum of c_k + S_k qa_k
    for (int k = 0; k < 6; k++) x[k] = cc[k] + S[k] * qa;
    cfd_wl_prefix_sum<32, 6>(lane, x);
    cfd_awb_broadcast(x, 6, 31);
    const double* r = AWB_LINK(base + 31) + 28;  // then to the next block's origin
    for (int k = 0; k < 6; k++) Ac[k] += x[k];
    cfd_cross(Ac, r, wr);
    for (int k = 0; k < 3; k++) Ac[3 + k] += wr[k];
  }
#undef AWB_LINK
  return __any_sync(CFD_WL_MASK, bad);  // a lane's own link may be the singular one
}

// The same with a warp per block (blockDim.x = 32 * ceil(n / 32), up to CFD_AWB_MAX_WARPS), for
// one chain or a few: each warp keeps its block's links in registers; the local parts of every
// sweep run on all warps at once, the turns (the right-looking sweep, the accelerations' unit
// triangular solve) warp after warp, handing over through shared memory. Returns this warp's
// vote on a bad pivot. FACTORS: a split call's first half (aba_world_tau.h): the sweep out and the
// inertias' part of the sweep in, then each link's factors (each block's as soon as its turn
// ends), each block's r_b and the state's status written to factors instead of qacc (and false
// returned; factors may be page-locked host memory, the writes fenced system-wide); tau unused.
// block_done[b] = seq for each block b > 0 once its factors are there (set by its warp during
// the next block's turn), so that the host can start on them.
#define CFD_AWB_MAX_WARPS 8

template <bool FACTORS>
static __device__ bool cfd_awb_qacc_warps(const cfd_chain& c, const double* __restrict__ q,
                                          const double* __restrict__ qd,
                                          const double* __restrict__ tau,
                                          const double* __restrict__ diag,
                                          double* __restrict__ qacc,
                                          double* __restrict__ factors,
                                          unsigned long long* block_done = nullptr,
                                          unsigned long long seq = 0) {
  __shared__ double tot[CFD_AWB_MAX_WARPS][21];  // per block: lane 31's R, p, V; lane 15's p
  __shared__ double hand[27];                    // P (A, B, C) and Pb; then Ac
  const int n = c.n, lane = threadIdx.x & 31, blk = threadIdx.x >> 5, blocks = (n + 31) / 32;
  const int i = 32 * blk + lane, count = min(32, n - 32 * blk);
  const bool link = i < n;
  cfd_awb_rel r;
  cfd_awb_out_local(c, i, lane, link ? q[i] : 0, link ? qd[i] : 0, &r);
  if (lane == 31) {
    for (int k = 0; k < 9; k++) tot[blk][k] = r.R[k];
    for (int k = 0; k < 3; k++) tot[blk][9 + k] = r.p[k];
    for (int k = 0; k < 6; k++) tot[blk][12 + k] = r.V[k];
  }
  if (lane == CFD_AWB_MIDDLE)
    for (int k = 0; k < 3; k++) tot[blk][18 + k] = r.p[k];
  __syncthreads();
  // this block's anchor from the blocks before it; m = o_b - a_b, rb = o_{b+1} - o_b
  cfd_awb_anchor a = {{1, 0, 0, 0, 1, 0, 0, 0, 1}, {0, 0, 0, 0, 0, 0}};
  double d[3], m[3], rb[3] = {0, 0, 0};
  for (int b = 0; b < blk; b++) cfd_awb_next_anchor(&a, tot[b], tot[b] + 9, tot[b] + 12, d);
  cfd_rot(a.R, tot[blk] + 18, m);
  if (blk + 1 < blocks) {
    cfd_awb_anchor an = a;
    double mn[3];
    cfd_awb_next_anchor(&an, tot[blk], tot[blk] + 9, tot[blk] + 12, d);
    cfd_rot(an.R, tot[blk + 1] + 18, mn);
    for (int k = 0; k < 3; k++) rb[k] = (d[k] - m[k]) + mn[k];  // as cfd_awb_qacc sums it
  }
  cfd_awb_lane x;
  cfd_awb_out_world(c, i, a, m, r, &x);
  // in: the local parts at once, then the turns from the tip
  cfd_awb_in s;
  double Jt[10], bt[6], w[6], su, inv_d, ac[6];
  cfd_awb_in_local<!FACTORS>(lane, x, link && !FACTORS ? tau[i] : 0,
                             link ? c.armature[i] + (diag ? diag[i] : 0) : 1, &s, Jt, bt);
  bool bad = false;
  for (int b = blocks - 1; b >= 0; b--) {
    if (blk == b) {
      cfd_abw_inertia P = {{0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0}};
      double Pb[6] = {0, 0, 0, 0, 0, 0};
      if (b + 1 < blocks) {
        for (int k = 0; k < 6; k++) P.A[k] = hand[k], P.C[k] = hand[15 + k], Pb[k] = hand[21 + k];
        for (int k = 0; k < 9; k++) P.B[k] = hand[6 + k];
      }
      bad = cfd_awb_in_turn<!FACTORS>(lane, count, link, x, s, Jt, bt, b + 1 < blocks ? rb : NULL,
                                      &P, Pb, w, &su, &inv_d, ac);
      __syncwarp();  // every lane has read hand
      if (lane == 0) {
        for (int k = 0; k < 6; k++) hand[k] = P.A[k], hand[15 + k] = P.C[k], hand[21 + k] = Pb[k];
        for (int k = 0; k < 9; k++) hand[6 + k] = P.B[k];
      }
      if (FACTORS && link) {  // the block's factors are final: on their way while the others turn
        double* f = factors + cfd_awt_at(i);
        const int s32 = CFD_AWT_BLOCK;
        for (int k = 0; k < 6; k++) {
          f[k * s32] = x.S[k], f[(6 + k) * s32] = w[k], f[(14 + k) * s32] = x.c[k];
          f[(20 + k) * s32] = x.bias[k] + ac[k];
        }
        f[12 * s32] = inv_d;
        f[13 * s32] = cfd_dot6(x.S, x.bias);
      }
      if (FACTORS && lane == 0 && blk + 1 < blocks)  // with them, as the host takes them
        for (int k = 0; k < 3; k++) factors[cfd_awt_rb(n, blk) + k] = rb[k];
    }
    if (FACTORS && blk == b + 1) {  // the block turned last: flagged as there, off the path
      __threadfence_system();
      __syncwarp();
      if (lane == 0) *(volatile unsigned long long*)(block_done + blk) = seq;
    }
    __syncthreads();
  }
  if (FACTORS) {  // a split call's first half: the rest is the host's (aba_world_tau.h)
    __threadfence_system();  // this thread's factors before the status (the caller's done flag)
    bad = __syncthreads_or(bad);
    if (threadIdx.x == 0) factors[cfd_awt_doubles(n) - 1] = bad ? CFD_ERR_SINGULAR : 0;
    return false;
  }
  // out again: the local parts at once, then the turns from the base
  cfd_awb_acc acc;
  cfd_awb_acc_local(lane, count, x.S, x.c, w, su, &acc);
  for (int b = 0; b < blocks; b++) {
    if (blk == b) {
      double Ac[6] = {0, 0, 0, -c.gravity[0], -c.gravity[1], -c.gravity[2]};
      if (b > 0)
        for (int k = 0; k < 6; k++) Ac[k] = hand[k];
      double qa = cfd_awb_acc_turn(lane, count, x.S, w, acc, b + 1 < blocks ? rb : NULL, Ac);
      if (link) qacc[i] = qa;
      __syncwarp();
      if (lane == 0)
        for (int k = 0; k < 6; k++) hand[k] = Ac[k];
    }
    __syncthreads();
  }
  return __any_sync(CFD_WL_MASK, bad);
}

#endif  // CHAINFD_ABA_WORLD_BLOCKS_CUH
