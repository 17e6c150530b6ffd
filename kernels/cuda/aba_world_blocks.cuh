// aba_world_blocks.cuh: the ABA in world coordinates (aba_world.h) for one instance of a chain of
// any length by one warp, in blocks of 32 links, a link per lane: the right-looking sweeps of
// aba_world_lanes.cuh, run block after block, with what a block passes on carried in registers.
// For one long chain (and small batches of them), where a group of lanes in link frames walks the
// chain link by link through a 6x6 congruence each (aba_lanes.cuh: about 1.5 us a link) and CFA
// pays a cluster barrier per elimination level and scan.
//
//   out (base to tip): per block, the poses as a product scan, composed with the pose of the
//     previous block's last link; the velocities as a prefix sum plus its velocity; S_i, c_i, the
//     world inertias J_i and bias forces to scratch.
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
// the lane that wrote it (and r_b by every lane, after a warp barrier). ncu (256 links, one
// chain): the warp issues every 4 cycles, half the samples waiting on dependent results, a third
// at shuffles; about 240 instructions per link. World coordinates cost rounding that grows with the distance from the
// reference point (aba_world.h: a 200-link chain with slides reached 1.3e-10 with the base's
// origin for the whole chain; 1.1e-10 with the origin of the link before each block), so each
// block works about the origin of its middle link, and what passes between blocks is moved from
// one origin to the next.
#ifndef CHAINFD_ABA_WORLD_BLOCKS_CUH
#define CHAINFD_ABA_WORLD_BLOCKS_CUH

#include "aba_world_lanes.cuh"

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

// qacc of one chain (c in joint frames) by the 32 lanes of a warp; q, qd, tau, diag (or NULL) and
// qacc are the instance's n-vectors, scratch CFD_AWB_LINK_DOUBLES * n doubles. Returns (on every
// lane) whether some d was not positive (the sweep goes on with d = 1).
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

  // out: poses, screws, velocities, c, J, bias. Rc: the rotation of the link before the block;
  // Vc: its velocity about its origin a_b (the block's anchor); r31: the previous block's last
  // link's origin about that block's origin (then r_{b-1} = r31 + the new block's offset)
  double Rc[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1}, Vc[6] = {0, 0, 0, 0, 0, 0}, r31[3] = {0, 0, 0};
  for (int base = 0; base < n; base += 32) {
    int i = base + lane;
    bool link = i < n;
    const cfd_wl_link L = cfd_wl_link_of(c, link ? i : n);  // past the chain: a massless link
    double qi = link ? q[i] : 0, qdi = link ? qd[i] : 0;
    double s = 0, co = 1, Rl[9], pl[3], R[9], p[3], m[3];
    if (!L.slide) sincos(qi, &s, &co);
    cfd_abw_local_jf(L.H, L.h, L.slide, qi, s, co, Rl, pl);
    cfd_wl_pose_scan<32>(lane, Rl, pl);  // relative to the link before the block
    cfd_mat3_mul(Rc, Rl, R);
    cfd_rot(Rc, pl, p);  // about the anchor; the block's origin o_b: its middle link's origin
    for (int k = 0; k < 3; k++) m[k] = p[k];
    cfd_awb_broadcast(m, 3, CFD_AWB_MIDDLE);
    for (int k = 0; k < 3; k++) p[k] -= m[k];
    if (base > 0 && lane == 0) {
      double* prev_last = AWB_LINK(base - 1) + 28;
      for (int k = 0; k < 3; k++) prev_last[k] = r31[k] + m[k];  // r_{b-1} = o_b - o_{b-1}
    }
    double wm[3];
    cfd_cross(Vc, m, wm);
    for (int k = 0; k < 3; k++) Vc[3 + k] += wm[k];  // about o_b
    double S[6], Sqd[6], V[6], cc[6], J10[10], bias[6];
    for (int k = 0; k < 3; k++) S[k] = L.slide ? 0 : R[3 * k + 2], S[3 + k] = L.slide ? R[3 * k + 2] : 0;
    if (!L.slide) cfd_cross(p, S, S + 3);
    for (int k = 0; k < 6; k++) V[k] = Sqd[k] = S[k] * qdi;
    cfd_wl_prefix_sum<32, 6>(lane, V);
    for (int k = 0; k < 6; k++) V[k] += Vc[k];
    cfd_ad(V, Sqd, cc);
    cfd_abw_rigid_parts(L.Io, L.mc, L.m, R, p, J10);
    cfd_abw_bias(J10, V, bias);
    if (link) {
      double* w = AWB_LINK(i);
      for (int k = 0; k < 6; k++) w[k] = S[k], w[6 + k] = cc[k], w[22 + k] = bias[k];
      for (int k = 0; k < 10; k++) w[12 + k] = J10[k];
    }
    // the block's last lane: the next block's rotation, anchor and velocity about it
    for (int k = 0; k < 9; k++) Rc[k] = R[k];
    for (int k = 0; k < 6; k++) Vc[k] = V[k];
    for (int k = 0; k < 3; k++) r31[k] = p[k];
    cfd_awb_broadcast(Rc, 9, 31);
    cfd_awb_broadcast(Vc, 6, 31);
    cfd_awb_broadcast(r31, 3, 31);
    double wr[3];
    cfd_cross(Vc, r31, wr);
    for (int k = 0; k < 3; k++) Vc[3 + k] += wr[k];
  }
  __syncwarp();  // lane 31's r_b, read by every lane below
  // in: blocks from the tip, each with what the blocks beyond hand over (P, Pb), moved to its origin
  cfd_abw_inertia P = {{0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0}};
  double Pb[6] = {0, 0, 0, 0, 0, 0};
  for (int base = (n - 1) / 32 * 32; base >= 0; base -= 32) {
    int i = base + lane, last = min(n, base + 32) - 1;
    bool link = i < n;
    if (base + 32 < n) {  // from o_{b+1} to o_b
      const double* r = AWB_LINK(base + 31) + 28;
      double rf[3];
      cfd_awb_shift_inertia(&P, r);
      cfd_cross(r, Pb + 3, rf);
      for (int k = 0; k < 3; k++) Pb[k] += rf[k];
    }
    double* w = AWB_LINK(link ? i : 0);
    double S[6], cc[6], J10[10], bias[6];
    for (int k = 0; k < 6; k++) {
      S[k] = link ? w[k] : 0;
      cc[k] = link ? w[6 + k] : 0;
      bias[k] = link ? w[22 + k] : 0;
    }
    for (int k = 0; k < 10; k++) J10[k] = link ? w[12 + k] : 0;
    cfd_wl_suffix_sum<32, 10>(lane, J10);
    cfd_wl_suffix_sum<32, 6>(lane, bias);
    double Y[6], Z[6], PS[6], Pc[6];
    cfd_abw_rigid_mul(J10, S, Y);
    cfd_abw_rigid_mul(J10, cc, Z);
    cfd_abw_mul(&P, S, PS);
    cfd_abw_mul(&P, cc, Pc);
    for (int k = 0; k < 6; k++) Y[k] += PS[k], Z[k] += Pc[k], bias[k] += Pb[k];
    double d = cfd_dot6(S, Y) + (link ? c.armature[i] + (diag ? diag[i] : 0) : 1);
    double yc = cfd_dot6(Y, cc);
    double u = (link ? tau[i] : 0) - cfd_dot6(S, bias);
    // the block's J total and bias total with Pb (lane 0's suffix sums), for the hand-over
    double Jt[10], bt[6];
    for (int k = 0; k < 10; k++) Jt[k] = __shfl_sync(CFD_WL_MASK, J10[k], 0);
    for (int k = 0; k < 6; k++) bt[k] = __shfl_sync(CFD_WL_MASK, bias[k], 0);
#pragma unroll 1
    for (int j = last; j > base; j--) {  // lane j - base's U_j = Y is final: to the lanes below
      int lj = j - base;
      bool ok;
      double sj, U[6], Gj[6], ij = cfd_wl_turn(Y, Z, d, yc, u, &sj, Gj, &ok);
      for (int k = 0; k < 6; k++) U[k] = Y[k];
      cfd_awb_broadcast(U, 6, lj);
      cfd_awb_broadcast(Gj, 6, lj);
      ij = __shfl_sync(CFD_WL_MASK, ij, lj);
      if (lane < lj) cfd_wl_absorb(U, Gj, ij, S, cc, Y, Z, &d, &yc, &u);
    }
    // each lane's own link as it was at its turn (nothing changed it since): 1/d, u/d, G
    bool ok;
    double my_su, my_G[6], my_inv = cfd_wl_turn(Y, Z, d, yc, u, &my_su, my_G, &ok);
    if (link && !ok) bad = true;
    if (!link) {  // past the chain: nothing to the sums below
      my_inv = my_su = 0;
      for (int k = 0; k < 6; k++) my_G[k] = 0;
    }
    if (link) {  // J's slots now hold w = U / d and su = u / d for the accelerations
      for (int k = 0; k < 6; k++) w[12 + k] = Y[k] * my_inv;
      w[18] = my_su;
    }
    // the hand-over: P + sum J - sum U U^T / d, Pb + sum bias + sum G over the block's links,
    // the sums over lanes as a scan (the same total on every lane, in a fixed order)
    double x[27];  // U U^T / d (A 6, B 9, C 6), G 6
    cfd_abw_inertia T = {{0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0}};
    cfd_awb_rank1(&T, Y, -my_inv);
    for (int k = 0; k < 6; k++) x[k] = T.A[k], x[15 + k] = T.C[k], x[21 + k] = my_G[k];
    for (int k = 0; k < 9; k++) x[6 + k] = T.B[k];
    cfd_wl_prefix_sum<32, 27>(lane, x);
    cfd_awb_broadcast(x, 27, 31);
    for (int k = 0; k < 6; k++) P.A[k] -= x[k], P.C[k] -= x[15 + k], Pb[k] = bt[k] + x[21 + k];
    for (int k = 0; k < 9; k++) P.B[k] -= x[6 + k];
    cfd_abw_add(&P, Jt);
  }

  // out: accelerations, block by block from the base, from the acceleration Ac of the link
  // before the block (about the block's origin)
  double Ac[6] = {0, 0, 0, -c.gravity[0], -c.gravity[1], -c.gravity[2]};
  for (int base = 0; base < n; base += 32) {
    int i = base + lane, count = min(32, n - base);  // the same on every lane
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
    double x[6];  // the block's share of its last link's acceleration: sum of c_k + S_k qa_k
    for (int k = 0; k < 6; k++) x[k] = cc[k] + S[k] * qa;
    cfd_wl_prefix_sum<32, 6>(lane, x);
    cfd_awb_broadcast(x, 6, 31);
    const double* r = AWB_LINK(base + 31) + 28;  // then to the next block's origin
    for (int k = 0; k < 6; k++) Ac[k] += x[k];
    double wr[3];
    cfd_cross(Ac, r, wr);
    for (int k = 0; k < 3; k++) Ac[3 + k] += wr[k];
  }
#undef AWB_LINK
  return __any_sync(CFD_WL_MASK, bad);  // a lane's own link may be the singular one
}

#endif  // CHAINFD_ABA_WORLD_BLOCKS_CUH
