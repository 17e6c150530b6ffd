// aba_scan_lanes.cuh: the heavy steps of the scan ABA (aba_scan.h) by a group of 8 lanes per
// block of links: lane j < 6 holds column j of each 6x6 matrix (the articulated inertia, the
// Riccati map's Phi and G, the bias map's L; lane 6 the bias map's vector), so that a link's step
// or a map's composition is a few dependent multiply-adds per lane instead of a 6x6 algebra's
// worth on one thread (aba_scan.h's form, one long chain of dependent steps per link).
// Columns reach the group's other lanes through its slice of shared memory, ordered by
// __syncwarp. Symmetric matrices computed column by column are symmetrised through it too (a
// link's congruence X^T Q X, a composition's P0 and G): left to drift, their asymmetry grows
// along the chain and costs digits on long chains. The same mathematics as aba_scan.h's functions
// (its CPU twin computes with those): results agree to rounding.
//
// Every lane of a warp runs every loop the same number of times (the longest block of the warp;
// a group past its own block's end runs along without updating), since __syncwarp needs the
// whole warp.
#ifndef CHAINFD_ABA_SCAN_LANES_CUH
#define CHAINFD_ABA_SCAN_LANES_CUH

#include <float.h>

#include "aba_scan.h"

#define ABS_GROUP 8       // lanes per block of links
// doubles of shared memory per group for its scratch (the columns it passes round): 4 mod 16, as
// the four groups of a warp often read the same place in their slices at once, which must then
// lie in different banks (at 0 mod 16 they would be 4-way bank conflicts)
#define ABS_SCRATCH 84

// 1/x to within about an ulp: the hardware's approximate reciprocal and two Newton steps, a few
// dependent instructions where an IEEE division is a subroutine with a slow-path branch (each
// sits on a sweep's or a composition's chain of dependent steps). x: a pivot or a D, finite and
// at least DBL_MIN in magnitude (the callers refuse anything smaller as singular: the
// approximation flushes a subnormal to zero, and the Newton steps then give NaN); |x| >= 2^1022
// gives 0.
__device__ __forceinline__ double abs_rcp(double x) {
  double r;
  asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(r) : "d"(x));
  double e = fma(-x, r, 1.0);
  r = fma(r, e, r);
  e = fma(-x, r, 1.0);
  return fma(r, e, r);
}

// e_j as a twist or wrench (j < 6), else zero
__device__ __forceinline__ void abs_unit(int j, double e[6]) {
#pragma unroll
  for (int r = 0; r < 6; r++) e[r] = r == j ? 1.0 : 0.0;
}

// Column j of X^T Q X (X = Ad_{T^-1} of the pose R, p) from the columns of the symmetric Q in
// sm (column k at sm + 6k): X^T (Q (X e_j)).
__device__ __forceinline__ void abs_congruence_col(const double* R, const double* p,
                                                   const double* sm, int j, double out[6]) {
  double e[6], x[6], y[6];
  abs_unit(j, e);
  cfd_twist_to_child(R, p, e, x);
#pragma unroll
  for (int r = 0; r < 6; r++) {
    double s = 0;
#pragma unroll
    for (int k = 0; k < 6; k++) s += sm[6 * k + r] * x[k];
    y[r] = s;
  }
  cfd_wrench_to_parent(R, p, y, out);
}

// The warp's longest block, for the loops every lane runs
__device__ __forceinline__ int abs_warp_len(int len) {
  return (int)__reduce_max_sync(0xffffffffu, (unsigned)len);
}

// What a lane reads of link i in the lanes' sweeps: pose, screw, column j of J_i, d_i (armature +
// extra), and (the inertias' sweep) c_i, the rigid-body bias and tau_i. Loaded a link ahead (as
// cfd_abs_load): the next link's loads are in flight while this link's steps run.
struct abs_lane_rec {
  double R[9], p[3], S[6], J[6], d, c[6], pb[6], tau;
};

__device__ __forceinline__ void abs_lane_load(const cfd_chain& c, const double* links,
                                              const double* extra, const double* tau, int i,
                                              int j, bool vecs, abs_lane_rec& r) {
  const double* L = links + CFD_ABS_LINK * (long)i;
  int col = j < 6 ? j : 0;
#pragma unroll
  for (int k = 0; k < 9; k++) r.R[k] = L[ABS_R + k];
#pragma unroll
  for (int k = 0; k < 3; k++) r.p[k] = L[ABS_P + k];
#pragma unroll
  for (int k = 0; k < 6; k++) {
    r.S[k] = c.screw[6 * i + k];
    r.J[k] = c.inertia[36 * i + 6 * k + col];  // column j = row j
    if (vecs) r.c[k] = L[ABS_C + k], r.pb[k] = L[ABS_OFF + k];
  }
  r.d = c.armature[i] + (extra ? extra[i] : 0);
  r.tau = vecs ? tau[i] : 0;
}

// 1. (aba_scan.h, cfd_abs_block_maps) poses, the velocity map and the Riccati map of block [s, e)
// (len = e - s; 0: a group with no block). Returns nonzero when a D0 is not positive.
__device__ int abs_lanes_maps(const cfd_chain& c, int s, int len, int j, const double* q,
                              const double* qd, const double* extra, double* links, double* fk,
                              double* ric, double* sm) {
  int e = s + len;
  for (int i = s + j; i < e; i += ABS_GROUP) {  // the poses, a link per lane
    double* L = links + CFD_ABS_LINK * (long)i;
    cfd_link_pose(&c, i, q, 1, L + ABS_R, L + ABS_P);
  }
  __syncwarp();
  if (j == 0 && len > 0) {  // the velocity map: cheap, on one lane
    double T[18], link[18], t[18];
    for (int k = 0; k < 18; k++) T[k] = (k == 0 || k == 4 || k == 8) ? 1.0 : 0.0;
    double next[18];  // a link ahead, as abs_lane_load
    for (int k = 0; k < 12; k++) next[k] = links[CFD_ABS_LINK * (long)s + k];
    for (int k = 0; k < 6; k++) next[12 + k] = c.screw[6 * s + k] * qd[s];
    for (int i = s; i < e; i++) {
      for (int k = 0; k < 18; k++) link[k] = next[k];
      int in = i + 1 < e ? i + 1 : i;
      for (int k = 0; k < 12; k++) next[k] = links[CFD_ABS_LINK * (long)in + k];
      for (int k = 0; k < 6; k++) next[12 + k] = c.screw[6 * in + k] * qd[in];
      cfd_abs_fk_compose(link, T, t);
      for (int k = 0; k < 18; k++) T[k] = t[k];
    }
    for (int k = 0; k < 18; k++) fk[k] = T[k];
  }
  // the Riccati map, links prepended from the tip: lane j keeps column j of P0, Phi, G
  double P[6], Phi[6], G[6];
  abs_unit(j, Phi);
#pragma unroll
  for (int r = 0; r < 6; r++) P[r] = G[r] = 0;
  int bad = 0, steps = abs_warp_len(len);
  abs_lane_rec cur, next;
  abs_lane_load(c, links, extra, NULL, len > 0 ? e - 1 : s, j, false, cur);
  for (int t = 0; t < steps; t++) {
    bool on = t < len && j < 6;
    abs_lane_load(c, links, extra, NULL, t + 1 < len ? e - 2 - t : s, j, false, next);
    double Q[6];
    double Uj = 0, gj = 0;
    if (on) {
      if (t > 0)  // the previous link's congruence, symmetrised
#pragma unroll
        for (int r = 0; r < 6; r++) P[r] = 0.5 * (P[r] + sm[48 + 6 * r + j]);
#pragma unroll
      for (int r = 0; r < 6; r++) Q[r] = cur.J[r] + P[r];  // Q0 = J_i + P0
#pragma unroll
      for (int r = 0; r < 6; r++) Uj += Q[r] * cur.S[r], gj += Phi[r] * cur.S[r];
      sm[j] = Uj;
      sm[6 + j] = gj;
    }
    __syncwarp();
    if (on) {
      double U[6], g[6];
#pragma unroll
      for (int r = 0; r < 6; r++) U[r] = sm[r], g[r] = sm[6 + r];
      double D = cfd_dot6(cur.S, U) + cur.d;
      bad |= !(D >= DBL_MIN);  // (abs_rcp flushes a subnormal D to 0)
      double inv = abs_rcp(D);
#pragma unroll
      for (int r = 0; r < 6; r++) {
        G[r] += g[r] * gj * inv;
        Phi[r] -= U[r] * gj * inv;
        Q[r] -= U[r] * Uj * inv;
        sm[12 + 6 * j + r] = Q[r];
      }
    }
    __syncwarp();
    if (on) {
      abs_congruence_col(cur.R, cur.p, sm + 12, j, P);
#pragma unroll
      for (int r = 0; r < 6; r++) sm[48 + 6 * j + r] = P[r];
      double t6[6];
      cfd_wrench_to_parent(cur.R, cur.p, Phi, t6);
#pragma unroll
      for (int r = 0; r < 6; r++) Phi[r] = t6[r];
    }
    __syncwarp();
    cur = next;
  }
  if (j < 6 && len > 0)
#pragma unroll
    for (int r = 0; r < 6; r++) {
      ric[6 * r + j] = 0.5 * (P[r] + sm[48 + 6 * r + j]);
      ric[36 + 6 * r + j] = Phi[r];
      ric[72 + 6 * r + j] = G[r];
    }
  return bad;
}

// 2. (cfd_abs_block_inertias) with V_{s-1} (Vin) and the inertia handed in (Cin; NULL: none),
// the block's velocities and articulated inertias (per link c_i, U_i, d_i, r_i, u0_i) and
// its bias map (aff; keep: L again). Returns nonzero when a d_i is not positive.
__device__ int abs_lanes_inertias(const cfd_chain& c, int s, int len, int j, const double* qd,
                                  const double* tau, const double* extra, const double* Vin,
                                  const double* Cin, double* links, double* aff, double* keep,
                                  double* sm) {
  int e = s + len;
  if (j == 0 && len > 0) {  // velocities, c_i and the rigid-body bias: cheap, on one lane
    double V[6];
    for (int k = 0; k < 6; k++) V[k] = Vin ? Vin[k] : 0;
    double nx[18], cu[18];  // R, p, S qd: a link ahead, as abs_lane_load
    for (int k = 0; k < 12; k++) nx[k] = links[CFD_ABS_LINK * (long)s + k];
    for (int k = 0; k < 6; k++) nx[12 + k] = c.screw[6 * s + k] * qd[s];
    for (int i = s; i < e; i++) {
      int in = i + 1 < e ? i + 1 : i;
      for (int k = 0; k < 18; k++) cu[k] = nx[k];
      for (int k = 0; k < 12; k++) nx[k] = links[CFD_ABS_LINK * (long)in + k];
      for (int k = 0; k < 6; k++) nx[12 + k] = c.screw[6 * in + k] * qd[in];
      double* L = links + CFD_ABS_LINK * (long)i;
      double Vc[6], JV[6];
      cfd_twist_to_child(cu, cu + 9, V, Vc);
      for (int k = 0; k < 6; k++) V[k] = Vc[k] + cu[12 + k];
      if (c.kind[i] == CFD_LINK_BALL_NEXT) cfd_link_c_local(&c, i, V, qd, L + ABS_C);
      else cfd_ad(V, cu + 12, L + ABS_C);
      cfd_mat6_vec(c.inertia + 36 * i, V, JV);
      cfd_neg_adstar(V, JV, L + ABS_OFF);
    }
  }
  __syncwarp();
  // lane j < 6: column j of the inertia C and of L; lane 6: the vector l
  double C[6], Lc[6];
#pragma unroll
  for (int r = 0; r < 6; r++) {
    C[r] = Cin && j < 6 ? Cin[6 * r + j] : 0;
    Lc[r] = r == j ? 1.0 : 0.0;
  }
  int bad = 0, steps = abs_warp_len(len);
  abs_lane_rec cur, next;
  abs_lane_load(c, links, extra, tau, len > 0 ? e - 1 : s, j, true, cur);
  for (int t = 0; t < steps; t++) {
    bool on = t < len;
    int i = on ? e - 1 - t : s;
    double* L = links + CFD_ABS_LINK * (long)i;
    abs_lane_load(c, links, extra, tau, t + 1 < len ? e - 2 - t : s, j, true, next);
    double Q[6];
    double Uj = 0;
    if (on && j < 6) {
      if (t > 0)  // the previous link's congruence, symmetrised
#pragma unroll
        for (int r = 0; r < 6; r++) C[r] = 0.5 * (C[r] + sm[48 + 6 * r + j]);
#pragma unroll
      for (int r = 0; r < 6; r++) Q[r] = cur.J[r] + C[r];
#pragma unroll
      for (int r = 0; r < 6; r++) Uj += Q[r] * cur.S[r];
      sm[j] = Uj;
    }
    __syncwarp();
    double U[6], D = 1, inv = 1;
    if (on) {
#pragma unroll
      for (int r = 0; r < 6; r++) U[r] = sm[r];
      D = cfd_dot6(cur.S, U) + cur.d;
      bad |= !(D >= DBL_MIN);  // (abs_rcp flushes a subnormal D to 0)
      inv = abs_rcp(D);
      if (j < 6) {
        double h = 0;  // (Qa c_i)_j, Qa symmetric
#pragma unroll
        for (int r = 0; r < 6; r++) {
          Q[r] -= U[r] * Uj * inv;
          h += Q[r] * cur.c[r];
          sm[12 + 6 * j + r] = Q[r];
        }
        sm[6 + j] = h;
      }
    }
    __syncwarp();
    double off[6], Spb = 0, Sc = 0;
    if (on) {
      // off_i = X^T ((1 - U S^T / D) pb + Qa c_i + U tau_i / D), the same on every lane
      double h[6];
      Spb = cfd_dot6(cur.S, cur.pb);
      double su = (cur.tau - Spb) * inv;
#pragma unroll
      for (int k = 0; k < 6; k++) h[k] = sm[6 + k] + cur.pb[k] + U[k] * su;
      cfd_wrench_to_parent(cur.R, cur.p, h, off);
      // (L, l) <- (L_i L, L_i l + off_i), L_i = X^T (1 - U S^T / D): a column per lane, its
      // S^T first (r_i and u0_i's S^T l, aba_scan.h)
      double col[6];
      Sc = cfd_dot6(cur.S, Lc);
#pragma unroll
      for (int r = 0; r < 6; r++) col[r] = Lc[r] - U[r] * Sc * inv;
      cfd_wrench_to_parent(cur.R, cur.p, col, Lc);
      if (j == 6)
#pragma unroll
        for (int r = 0; r < 6; r++) Lc[r] += off[r];
      if (j < 6) {
        abs_congruence_col(cur.R, cur.p, sm + 12, j, C);
#pragma unroll
        for (int r = 0; r < 6; r++) sm[48 + 6 * j + r] = C[r];
      }
    }
    __syncwarp();  // every lane has read this link's pb: r_i may take its place
    if (on && j < 6) L[ABS_OFF + j] = Sc;
    if (on && j == 6) L[ABS_SB] = cur.tau - Spb - Sc;  // u0_i
    if (on && j == 0) {
#pragma unroll
      for (int k = 0; k < 6; k++) L[ABS_U + k] = U[k];
      L[ABS_DINV] = inv;
    }
    cur = next;
  }
  if (j < 7 && len > 0)
#pragma unroll
    for (int r = 0; r < 6; r++) {
      if (j < 6) {
        aff[6 * r + j] = Lc[r];
        keep[6 * r + j] = Lc[r];
      } else {
        aff[36 + r] = Lc[r];
      }
    }
  return bad;
}

// Riccati maps by a group: F1 after F2 (cfd_abs_riccati_compose) into out, both in shared memory:
// A = 1 + P02 G1 reduced by Gauss-Jordan with partial pivoting, lane j carrying column j of A, of
// Z = A^-1 P02 and of Y = A^-1 Phi2 (the pivot column passed round through the group's scratch),
// then
//   P0 = P01 + Phi1 Z Phi1^T,  Phi = Phi1 Y,  G = G2 + Phi2^T G1 Y.
// APPLY: F1 applied to an inertia, F2 = C (36 doubles): the map (C, 1, 0) composed, of which only
// P0 = F1(C) is wanted (no Y, Phi or G). Every lane of the warp calls it (active: this group
// composes). Returns nonzero on a pivot that is zero or too small for abs_rcp.
template <bool APPLY>
__device__ int abs_lanes_riccati(const double* __restrict__ F1, const double* __restrict__ F2,
                                 double* __restrict__ out, int j, bool active, double* sm) {
  const double *P01 = F1, *Phi1 = F1 + 36, *G1 = F1 + 72;
  const double *P02 = F2, *Phi2 = F2 + 36, *G2 = F2 + 72;
  bool lane = active && j < 6;
  double a[6], z[6], y[6];
  int bad = 0;
  if (lane) {
#pragma unroll
    for (int r = 0; r < 6; r++) {
      double s = r == j ? 1.0 : 0.0;
#pragma unroll
      for (int k = 0; k < 6; k++) s += P02[6 * r + k] * G1[6 * k + j];
      a[r] = s;
      z[r] = P02[6 * r + j];
      y[r] = APPLY ? 0 : Phi2[6 * r + j];
    }
  }
#pragma unroll
  for (int k = 0; k < 6; k++) {
    if (lane && j == k)
#pragma unroll
      for (int r = 0; r < 6; r++) sm[r] = a[r];
    __syncwarp();
    if (lane) {
      double col[6];
#pragma unroll
      for (int r = 0; r < 6; r++) col[r] = sm[r];
      int piv = k;
      double big = fabs(col[k]);
#pragma unroll
      for (int r = k + 1; r < 6; r++)
        if (fabs(col[r]) > big) big = fabs(col[r]), piv = r;
#pragma unroll
      for (int r = k + 1; r < 6; r++) {  // swap rows k and piv
        bool sw = r == piv;
        double t;
        t = a[k]; a[k] = sw ? a[r] : a[k]; a[r] = sw ? t : a[r];
        t = z[k]; z[k] = sw ? z[r] : z[k]; z[r] = sw ? t : z[r];
        if (!APPLY) { t = y[k]; y[k] = sw ? y[r] : y[k]; y[r] = sw ? t : y[r]; }
        t = col[k]; col[k] = sw ? col[r] : col[k]; col[r] = sw ? t : col[r];
      }
      bad |= !(fabs(col[k]) >= DBL_MIN);  // (abs_rcp flushes a subnormal to 0)
      double inv = abs_rcp(col[k]);
      a[k] *= inv, z[k] *= inv;
      if (!APPLY) y[k] *= inv;
#pragma unroll
      for (int r = 0; r < 6; r++) {
        if (r == k) continue;
        double f = col[r];
        a[r] -= f * a[k], z[r] -= f * z[k];
        if (!APPLY) y[r] -= f * y[k];
      }
    }
    __syncwarp();
  }
  // Lane-local first: column j of T = Phi1 Z (into shared memory: P0's product needs all of T),
  // of Phi = Phi1 Y and of G1 Y, three products side by side on the same rows; then P0 = P01 +
  // T Phi1^T and G = G2 + Phi2^T (G1 Y) side by side, so that their dependent chains overlap
  // (one after another, each product would wait on the last).
  double pc[6], gc[6];  // columns j of P0 and G, symmetrised below
  double gy[6];
  if (lane)
#pragma unroll
    for (int r = 0; r < 6; r++) {
      double t = 0, f = 0, g = 0;
#pragma unroll
      for (int k = 0; k < 6; k++) {
        double p = Phi1[6 * r + k];
        t += p * z[k];
        if (!APPLY) f += p * y[k], g += G1[6 * r + k] * y[k];
      }
      sm[6 * j + r] = t;
      if (!APPLY) out[36 + 6 * r + j] = f, gy[r] = g;
    }
  __syncwarp();
  if (lane) {
    double phi_j[6];
#pragma unroll
    for (int k = 0; k < 6; k++) phi_j[k] = Phi1[6 * j + k];
#pragma unroll
    for (int r = 0; r < 6; r++) {
      double v = P01[6 * r + j], w = APPLY ? 0 : G2[6 * r + j];
#pragma unroll
      for (int k = 0; k < 6; k++) {
        v += sm[6 * k + r] * phi_j[k];
        if (!APPLY) w += Phi2[6 * k + r] * gy[k];
      }
      pc[r] = v;
      gc[r] = w;
    }
  }
  __syncwarp();
  if (lane)
#pragma unroll
    for (int r = 0; r < 6; r++) {
      sm[6 * j + r] = pc[r];
      if (!APPLY) sm[36 + 6 * j + r] = gc[r];
    }
  __syncwarp();
  if (lane)
#pragma unroll
    for (int r = 0; r < 6; r++) {
      out[6 * r + j] = 0.5 * (pc[r] + sm[6 * r + j]);
      if (!APPLY) out[72 + 6 * r + j] = 0.5 * (gc[r] + sm[36 + 6 * r + j]);
    }
  __syncwarp();
  return bad;
}

// Affine maps by a group: A1 after A2 into out, lane j < 6 a column of L1 L2, lane 6 L1 l2 + l1.
// Every load before the first store, so that they are all in flight at once (a store between
// them, which the compiler cannot prove apart from the next loads, would make each row wait for
// the last).
__device__ __forceinline__ void abs_lanes_affine(const double* __restrict__ A1,
                                                 const double* __restrict__ A2,
                                                 double* __restrict__ out, int j, bool active) {
  if (!active || j > 6) return;
  double x[6], s[6];
#pragma unroll
  for (int k = 0; k < 6; k++) x[k] = j == 6 ? A2[36 + k] : A2[6 * k + j];
#pragma unroll
  for (int r = 0; r < 6; r++) {
    double v = j == 6 ? A1[36 + r] : 0;
#pragma unroll
    for (int k = 0; k < 6; k++) v += A1[6 * r + k] * x[k];
    s[r] = v;
  }
#pragma unroll
  for (int r = 0; r < 6; r++) out[j == 6 ? 36 + r : 6 * r + j] = s[r];
}

// Velocity maps by a group: later after earlier (cfd_abs_fk_compose), output k of the 18 on lane
// k mod 8, where one lane composing alone would run all 18 in sequence. Each output is a
// constant plus a dot product of three:
//   R = Re Rl,  p = pe + Re pl,  w = Rl^T we + wl,  v = Rl^T (ve + we x pl) + vl
// (twist order w, v), so that every lane runs the same instructions on its own addresses.
__device__ __forceinline__ void abs_lanes_fk(const double* __restrict__ later,
                                             const double* __restrict__ earlier,
                                             double* __restrict__ out, int j, bool active) {
  if (!active) return;
  const double *Rl = later, *pl = later + 9, *Re = earlier, *we = earlier + 12;
  double t[3];  // ve + we x pl (v's right-hand side), on every lane
#pragma unroll
  for (int r = 0; r < 3; r++)
    t[r] = earlier[15 + r] + we[(r + 1) % 3] * pl[(r + 2) % 3] - we[(r + 2) % 3] * pl[(r + 1) % 3];
  double res[3];
#pragma unroll
  for (int u = 0; u < 3; u++) {
    int k = j + ABS_GROUP * u;
    int cls = k < 9 ? 0 : k < 12 ? 1 : k < 15 ? 2 : 3;  // R, p, w, v
    int r = cls == 0 ? k / 3 : cls == 1 ? k - 9 : cls == 2 ? k - 12 : k - 15;
    // a: a row of Re (R, p) or a column of Rl (w, v); b: a column of Rl, pl, we or t
    const double* a = cls < 2 ? Re + 3 * r : Rl + r;
    int as = cls < 2 ? 1 : 3;
    const double* b = cls == 0 ? Rl + k % 3 : cls == 1 ? pl : we;
    int bs = cls == 0 ? 3 : 1;
    double v = cls == 0 ? 0 : cls == 1 ? earlier[k] : later[k < 18 ? k : 0];
#pragma unroll
    for (int m = 0; m < 3; m++) v += a[as * m] * (cls == 3 ? t[m] : b[bs * m]);
    res[u] = v;
  }
#pragma unroll
  for (int u = 0; u < 3; u++)
    if (j + ABS_GROUP * u < CFD_ABS_FK) out[j + ABS_GROUP * u] = res[u];
}

// A scan's step for one group (cfd_abs_scan_step): out = own composed after other (own applied
// last), or a copy of own where other is NULL; all in shared memory. Every lane of the warp calls
// it (active: the group has an element). Returns nonzero on a zero pivot (Riccati).
__device__ __forceinline__ int abs_lanes_combine(int kind, const double* own, const double* other,
                                                 double* out, int j, bool active, double* sm) {
  bool pair = active && other;
  if (active && !other)
    for (int w = j; w < cfd_abs_width(kind); w += ABS_GROUP) out[w] = own[w];
  if (!other) other = own;  // (read by no lane)
  if (kind == CFD_ABS_SCAN_RIC) return abs_lanes_riccati<false>(own, other, out, j, pair, sm);
  if (kind == CFD_ABS_SCAN_FK) {
    abs_lanes_fk(own, other, out, j, pair);
  } else {
    abs_lanes_affine(own, other, out, j, pair);
  }
  return 0;
}

// doubles of a scan kind's value: what a block of links hands on (an inertia, a velocity, a force
// or an acceleration)
__device__ __forceinline__ int abs_value_width(int kind) { return kind == CFD_ABS_SCAN_RIC ? 36 : 6; }

// where an element (map) keeps the value it gives when it receives nothing: P0, w or l
__device__ __forceinline__ int abs_value_at(int kind) {
  return kind == CFD_ABS_SCAN_RIC ? 0 : kind == CFD_ABS_SCAN_FK ? 12 : 36;
}

// The value the map own (shared memory) gives for the value in (shared memory; NULL: nothing
// received, the map's own value), into out: P0 + Phi C (1 + G C)^-1 Phi^T, X_own V + w or
// L t + l. Every lane of the warp calls it. Returns nonzero on a zero pivot (Riccati).
__device__ __forceinline__ int abs_lanes_value(int kind, const double* own, const double* in,
                                               double* out, int j, bool active, double* sm) {
  int at = abs_value_at(kind);
  if (!in) {
    if (active)
      for (int w = j; w < abs_value_width(kind); w += ABS_GROUP) out[w] = own[at + w];
    return 0;
  }
  if (kind == CFD_ABS_SCAN_RIC) return abs_lanes_riccati<true>(own, in, out, j, active, sm);
  if (active && j < 6) {
    double v = own[at + j];
    if (kind == CFD_ABS_SCAN_FK) {
      double x[6];
      cfd_twist_to_child(own, own + 9, in, x);
      v += x[j];
    } else {
#pragma unroll
      for (int k = 0; k < 6; k++) v += own[6 * j + k] * in[k];
    }
    out[j] = v;
  }
  return 0;
}

#endif  // CHAINFD_ABA_SCAN_LANES_CUH
