// dca.h: DCAe (paper 004: Critchley, Anderson, Binani), divide and conquer with the articulated-
// body algorithm inside each subsystem, for one unbranched chain (hinges, slides, balls): the
// steps its CPU twin (cpu/dca_cpu.c) and GPU kernel (cuda/dca.cu) share, in the twist/adjoint
// conventions of cfd_math.h.
//
// The chain is cut into p subsystems of consecutive links [a, e). Subsystem k meets the rest of
// the chain at two handles: its first link's joint, where its parent's acceleration arrives
// (A_in = Ad_{f_a^-1} a_{a-1}, in link a's frame) and the force f_in goes out to the parent (the
// force the parent exerts on link a, link a's frame); and the next subsystem's first joint, where
// the force f_out arrives (the force link e-1 exerts on link e, link e's frame) and the
// acceleration A_out goes out (Ad_{f_e^-1} a_{e-1}). Both outputs are affine in both inputs:
//   f_in  = P11 A_in + P12 f_out + b1
//   A_out = P21 A_in + P22 f_out + b2
// Paper 004 writes each handle's acceleration from the forces (a mobility form); this is the
// hybrid form, which needs no inverse of a subsystem's inertia (a massless link, such as the inner
// links MuJoCo's multi-joint bodies and ball joints make here, would have none): P11 is the
// subsystem's articulated inertia about its first joint and P22 = -(its mobility at the far
// handle), so the assembly below solves with I + Lambda Ia, whose eigenvalues are at least 1.
//
// The handle equations come from the ABA run with the inputs kept symbolic (cfd_dca_leaf):
//   in:   IA_i, pA_i as usual, plus P_i = d pA_i / d f_out (P_{e-1} = X_e^T, then
//         P_{i-1} = X_i^T (P_i - U_i w_i^T / d_i), w_i = P_i^T S_i), so u_i = u0_i - w_i . f_out
//         and f_in = Ia_a A_in + (P_a - U_a w_a^T / d_a) f_out + pa_a
//   out:  a_i = G_i A_in + H_i f_out + g_i with G_i = (1 - S U^T / d) G'_i,
//         H_i = (1 - S U^T / d) H'_i - S w_i^T / d, g_i = (1 - S U^T / d) g'_i + S u0_i / d,
//         G'_{i+1} = X_{i+1} G_i (G'_a = 1, H'_a = 0, g'_a = c_a); A_out = X_e a_{e-1}
// Two subsystems l (parent side) and r join at x = A_out^l = A_in^r, y = f_out^l = f_in^r:
//   (1 - P22^l P11^r) x = P21^l A_in + P22^l P12^r f_out + P22^l b1^r + b2^l,
//   y = P11^r x + P12^r f_out + b1^r,
// the assembled subsystem's equations follow by substitution (cfd_dca_assemble), pairwise up a
// binary tree in ceil(log2 p) levels. At the root A_in is the base's (gravity: -g) carried into
// link 0 and f_out = 0 (the chain's free end); down the tree each node hands (A_in, y) to its
// left and (x, f_out) to its right (cfd_dca_disassemble), and each subsystem finishes the ABA's
// outward sweep from its inputs (cfd_dca_finish). The velocities the bias terms need reach each
// subsystem the same way: its links' velocity map (pose, velocity with the parent at rest) up the
// tree, V_{a-1} down (aba_scan.h's velocity elements).
//
// A subsystem ends only where its last link has inertia about its own joint (aba_scan.h's
// cfd_abs_can_end: there d = S^T J S + armature, the rest of the chain being a force); a massless
// link followed in its subsystem by links that leave its axis free has d = 0 and is refused as
// singular, as the scans refuse it.
#ifndef CHAINFD_DCA_H
#define CHAINFD_DCA_H

#include "aba_scan.h"
#include "cfd_math.h"
#include "joints.h"

// links per subsystem where the caller does not choose (the GPU's measured choice, bench/results)
#define CFD_DCA_LINKS_DEFAULT 4

// per link: pose R (9) p (3), V (6), c (6), U (6), w (6), 1/d, u0, the rigid-body bias b (6). A
// subsystem [a, e) keeps e - a + 1 records, the last one link e's pose (the next subsystem's first
// link, whose joint is the far handle; unused for the last subsystem).
enum { CFD_DCA_LINK = 44, DCA_R = 0, DCA_P = 9, DCA_V = 12, DCA_C = 18, DCA_U = 24, DCA_W = 30,
       DCA_DINV = 36, DCA_U0 = 37, DCA_B = 38 };
// a subsystem's handle equations: P11, P12, P21, P22 (6x6 row-major), b1, b2
enum { CFD_DCA_HANDLE = 156, DCA_P11 = 0, DCA_P12 = 36, DCA_P21 = 72, DCA_P22 = 108, DCA_B1 = 144,
       DCA_B2 = 150 };
// an assembly's interface: x = Xa A_in + Xf f_out + xb, y = Ya A_in + Yf f_out + yb
enum { CFD_DCA_JOIN = 156, DCA_XA = 0, DCA_XF = 36, DCA_YA = 72, DCA_YF = 108, DCA_XB = 144,
       DCA_YB = 150 };
// a leaf's working set (the sweeps' matrices, shared by a group of lanes): two 6x6 buffers that
// take the articulated inertia in turn (S_A, S_B), P, pA, G, H, g, and the outward sweep's row
// products (13)
enum { S_A = 0, S_B = 36, S_P = 72, S_PA = 108, S_G = 114, S_H = 150, S_G6 = 186, S_R = 192,
       CFD_DCA_SCRATCH = 208 };

// ---- the velocities --------------------------------------------------------------------------------

// Each stage below takes the entries lane, lane + lanes, ... of its outputs (the CPU: lane 0 of
// 1; the GPU: a group of lanes with a warp barrier between stages), so both run the same
// arithmetic per entry.

// The poses of links [a, e] (e too unless last) into the subsystem's records L
CFD_HD void cfd_dca_poses(const cfd_chain* c, int a, int e, int last, const double* q, double* L,
                          int lane, int lanes) {
  for (int i = a + lane; i <= e - last; i += lanes)
    cfd_link_pose(c, i, q, 1, L + CFD_DCA_LINK * (i - a) + DCA_R, L + CFD_DCA_LINK * (i - a) + DCA_P);
}

// (one lane) The subsystem's velocity map into fk: V_{e-1} = Ad V_{a-1} + w (aba_scan.h's
// velocity element), from the poses in L
CFD_HD void cfd_dca_velocity_map(const cfd_chain* c, int a, int e, const double* qd, const double* L,
                                 double* fk) {
  double t[18], u[18];
  for (int i = a; i < e; i++) {
    const double* Li = L + CFD_DCA_LINK * (i - a);
    double* out = i == a ? fk : t;
    for (int k = 0; k < 12; k++) out[k] = Li[k];
    for (int k = 0; k < 6; k++) out[12 + k] = c->screw[6 * i + k] * qd[i];
    if (i > a) {
      cfd_abs_fk_compose(t, fk, u);
      for (int k = 0; k < 18; k++) fk[k] = u[k];
    }
  }
}

// The velocity at the end of a map from the velocity before it
CFD_HD void cfd_dca_velocity_apply(const double* fk, const double* Vin, double* V) {
  cfd_twist_to_child(fk, fk + 9, Vin, V);
  for (int k = 0; k < 6; k++) V[k] += fk[12 + k];
}

// (one lane) The links' velocities from the one before the subsystem, Vin
CFD_HD void cfd_dca_velocities(const cfd_chain* c, int a, int e, const double* qd, const double* Vin,
                               double* L) {
  for (int i = a; i < e; i++) {
    double* Li = L + CFD_DCA_LINK * (i - a);
    cfd_twist_to_child(Li + DCA_R, Li + DCA_P, i == a ? Vin : Li - CFD_DCA_LINK + DCA_V, Li + DCA_V);
    for (int k = 0; k < 6; k++) Li[DCA_V + k] += c->screw[6 * i + k] * qd[i];
  }
}

// Each link's velocity term c and rigid-body bias b = -ad*_V J V, a link per entry
CFD_HD void cfd_dca_link_terms(const cfd_chain* c, int a, int e, const double* qd, double* L,
                               int lane, int lanes) {
  for (int i = a + lane; i < e; i += lanes) {
    double* Li = L + CFD_DCA_LINK * (i - a);
    double JV[6];
    cfd_link_c_local(c, i, Li + DCA_V, qd, Li + DCA_C);
    cfd_mat6_vec(c->inertia + 36 * i, Li + DCA_V, JV);
    cfd_neg_adstar(Li + DCA_V, JV, Li + DCA_B);
  }
}

// ---- the handle equations: the ABA with f_out kept symbolic ----------------------------------------
// The articulated inertia sits in S_A at links e-1, e-3, ... and in S_B at e-2, e-4, ... (each
// link's steps read one and write the other, so that no lane overwrites what another reads).

CFD_HD double* cfd_dca_ia(double* s, int a, int e, int i) { return s + ((e - 1 - i) % 2 ? S_B : S_A); }
CFD_HD double* cfd_dca_ia_other(double* s, int a, int e, int i) {
  return s + ((e - 1 - i) % 2 ? S_A : S_B);
}

// The inward sweep's start at link e-1: IA = J, pA = b, P = X_e^T (the force on link e moved into
// link e-1's frame: [[R, p^ R], [0, R]] for link e's pose (R, p); zero when last)
CFD_HD void cfd_dca_in_start(const cfd_chain* c, int a, int e, int last, const double* L, double* s,
                             int lane, int lanes) {
  const double* Ll = L + CFD_DCA_LINK * (e - 1 - a);
  const double *Re = Ll + CFD_DCA_LINK + DCA_R, *pe = Ll + CFD_DCA_LINK + DCA_P;
  double* IA = cfd_dca_ia(s, a, e, e - 1);
  for (int k = lane; k < 78; k += lanes) {
    if (k < 36) {
      IA[k] = c->inertia[36 * (e - 1) + k];
    } else if (k < 72) {
      int r = (k - 36) / 6, col = (k - 36) % 6;
      double v = 0;
      if (!last && col < 3 && r < 3) v = Re[3 * r + col];
      else if (!last && col >= 3 && r >= 3) v = Re[3 * (r - 3) + col - 3];
      else if (!last && col >= 3) {  // (p^ R)_{r, col-3}
        int j = col - 3;
        double x = Re[3 * 0 + j], y = Re[3 * 1 + j], z = Re[3 * 2 + j];
        v = r == 0 ? pe[1] * z - pe[2] * y : r == 1 ? pe[2] * x - pe[0] * z : pe[0] * y - pe[1] * x;
      }
      s[S_P + k - 36] = v;
    } else {
      s[S_PA + k - 72] = Ll[DCA_B + k - 72];
    }
  }
}

// 1. U = IA S, w = P^T S and u0 = tau - S^T pA for link i
CFD_HD void cfd_dca_in_u(const cfd_chain* c, int a, int e, int i, const double* tau, double* L,
                         double* s, int lane, int lanes) {
  double* Li = L + CFD_DCA_LINK * (i - a);
  const double* S = c->screw + 6 * i;
  const double* IA = cfd_dca_ia(s, a, e, i);
  for (int k = lane; k < 13; k += lanes) {
    double t = 0;
    if (k < 6)
      for (int j = 0; j < 6; j++) t += IA[6 * k + j] * S[j];
    else if (k < 12)
      for (int j = 0; j < 6; j++) t += s[S_P + 6 * j + k - 6] * S[j];
    else
      for (int j = 0; j < 6; j++) t += S[j] * s[S_PA + j];
    Li[k < 6 ? DCA_U + k : k < 12 ? DCA_W + k - 6 : DCA_U0] = k < 12 ? t : tau[i] - t;
  }
}

// 2. d = S^T U + armature + extra (every entry works it out; one records 1/d), then
// Ia = IA - U U^T / d (into the other buffer), Pa = P - U w^T / d and
// pa = pA + IA c - U (U.c) / d + U u0 / d in place. Returns 1 when d is not positive.
CFD_HD int cfd_dca_in_downdate(const cfd_chain* c, int a, int e, int i, const double* extra_diag,
                               double* L, double* s, int lane, int lanes) {
  double* Li = L + CFD_DCA_LINK * (i - a);
  const double *S = c->screw + 6 * i, *U = Li + DCA_U, *w = Li + DCA_W, *cv = Li + DCA_C;
  const double* IA = cfd_dca_ia(s, a, e, i);
  double* Ia = cfd_dca_ia_other(s, a, e, i);
  double d = c->armature[i] + (extra_diag ? extra_diag[i] : 0), uc = 0;
  for (int j = 0; j < 6; j++) d += S[j] * U[j], uc += U[j] * cv[j];
  if (!(d > 0)) return 1;
  double dinv = 1 / d, u0 = Li[DCA_U0];
  if (lane == 0) Li[DCA_DINV] = dinv;
  for (int k = lane; k < 78; k += lanes) {
    if (k < 36) {
      Ia[k] = IA[k] - U[k / 6] * U[k % 6] * dinv;
    } else if (k < 72) {
      int r = (k - 36) / 6, col = (k - 36) % 6;
      s[S_P + k - 36] -= U[r] * w[col] * dinv;
    } else {
      int r = k - 72;
      double t = 0;
      for (int j = 0; j < 6; j++) t += IA[6 * r + j] * cv[j];
      s[S_PA + r] += t + U[r] * (u0 - uc) * dinv;
    }
  }
  return 0;
}

// 3. towards link i - 1 (X = Ad of link i's pose): Z = X^T Ia into the first buffer (a column per
// entry), P = X^T Pa (a column per entry), pA = X^T pa + b_{i-1}
CFD_HD void cfd_dca_in_move(int a, int e, int i, const double* L, double* s, int lane, int lanes) {
  const double* Li = L + CFD_DCA_LINK * (i - a);
  const double *R = Li + DCA_R, *p = Li + DCA_P;
  const double* Ia = cfd_dca_ia_other(s, a, e, i);
  double* Z = cfd_dca_ia(s, a, e, i);
  for (int k = lane; k < 13; k += lanes) {
    double col[6], t[6];
    const double* M = k < 6 ? Ia : s + S_P;
    int j = k % 6;
    if (k < 12)
      for (int r = 0; r < 6; r++) col[r] = M[6 * r + j];
    else
      for (int r = 0; r < 6; r++) col[r] = s[S_PA + r];
    cfd_wrench_to_parent(R, p, col, t);
    if (k < 6)
      for (int r = 0; r < 6; r++) Z[6 * r + j] = t[r];
    else if (k < 12)
      for (int r = 0; r < 6; r++) s[S_P + 6 * r + j] = t[r];
    else
      for (int r = 0; r < 6; r++) s[S_PA + r] = t[r] + (Li - CFD_DCA_LINK)[DCA_B + r];
  }
}

// 4. IA_{i-1} = J_{i-1} + X^T Z^T (column j: X^T applied to row j of Z) into the other buffer
CFD_HD void cfd_dca_in_congruence(const cfd_chain* c, int a, int e, int i, const double* L,
                                  double* s, int lane, int lanes) {
  const double* Li = L + CFD_DCA_LINK * (i - a);
  const double* Z = cfd_dca_ia(s, a, e, i);
  double* IA = cfd_dca_ia_other(s, a, e, i);  // (link i - 1's buffer)
  const double* J = c->inertia + 36 * (i - 1);
  for (int j = lane; j < 6; j += lanes) {
    double t[6];
    cfd_wrench_to_parent(Li + DCA_R, Li + DCA_P, Z + 6 * j, t);
    for (int r = 0; r < 6; r++) IA[6 * r + j] = J[6 * r + j] + t[r];
  }
}

// Handle 1 from link a's: P11 = Ia_a, P12 = Pa_a, b1 = pa_a
CFD_HD void cfd_dca_handle1(int a, int e, double* s, double* h, int lane, int lanes) {
  const double* Ia = cfd_dca_ia_other(s, a, e, a);
  for (int k = lane; k < 78; k += lanes)
    if (k < 36) h[DCA_P11 + k] = Ia[k];
    else if (k < 72) h[DCA_P12 + k - 36] = s[S_P + k - 36];
    else h[DCA_B1 + k - 72] = s[S_PA + k - 72];
}

// The outward sweep's start at link a: G' = 1, H' = 0, g' = c_a
CFD_HD void cfd_dca_out_start(const double* L, double* s, int lane, int lanes) {
  for (int k = lane; k < 78; k += lanes)
    if (k < 36) s[S_G + k] = k % 7 == 0;
    else if (k < 72) s[S_H + k - 36] = 0;
    else s[S_G6 + k - 72] = L[DCA_C + k - 72];
}

// 1. the row products U^T G', U^T H', u0 - U^T g'
CFD_HD void cfd_dca_out_rows(int a, int i, const double* L, double* s, int lane, int lanes) {
  const double* U = L + CFD_DCA_LINK * (i - a) + DCA_U;
  for (int k = lane; k < 13; k += lanes) {
    double t = 0;
    if (k < 12)
      for (int r = 0; r < 6; r++) t += U[r] * s[(k < 6 ? S_G : S_H) + 6 * r + k % 6];
    else
      for (int r = 0; r < 6; r++) t -= U[r] * s[S_G6 + r];
    s[S_R + k] = k < 12 ? t : t + L[CFD_DCA_LINK * (i - a) + DCA_U0];
  }
}

// 2. a_i's coefficients: G = G' - S (U^T G') / d, H = H' - S (w + U^T H')^T / d,
// g = g' + S (u0 - U^T g') / d
CFD_HD void cfd_dca_out_joint(const cfd_chain* c, int a, int i, const double* L, double* s, int lane,
                              int lanes) {
  const double* Li = L + CFD_DCA_LINK * (i - a);
  const double *S = c->screw + 6 * i, *w = Li + DCA_W;
  double dinv = Li[DCA_DINV];
  for (int k = lane; k < 78; k += lanes) {
    if (k < 36) s[S_G + k] -= S[k / 6] * s[S_R + k % 6] * dinv;
    else if (k < 72) s[S_H + k - 36] -= S[(k - 36) / 6] * (w[k % 6] + s[S_R + 6 + k % 6]) * dinv;
    else s[S_G6 + k - 72] += S[k - 72] * s[S_R + 12] * dinv;
  }
}

// 3. into link i + 1's frame (a column of G or H, or g, per entry); c_{i+1} added to g unless
// link i + 1 is the next subsystem's
CFD_HD void cfd_dca_out_move(int a, int e, int i, const double* L, double* s, int lane, int lanes) {
  const double* Ln = L + CFD_DCA_LINK * (i + 1 - a);
  for (int k = lane; k < 13; k += lanes) {
    double col[6], t[6];
    int j = k % 6, off = k < 6 ? S_G : S_H;
    if (k < 12)
      for (int r = 0; r < 6; r++) col[r] = s[off + 6 * r + j];
    else
      for (int r = 0; r < 6; r++) col[r] = s[S_G6 + r];
    cfd_twist_to_child(Ln + DCA_R, Ln + DCA_P, col, t);
    if (k < 12)
      for (int r = 0; r < 6; r++) s[off + 6 * r + j] = t[r];
    else
      for (int r = 0; r < 6; r++) s[S_G6 + r] = t[r] + (i + 1 < e ? Ln[DCA_C + r] : 0);
  }
}

// Handle 2: P21 = G', P22 = H', b2 = g' (zero when last)
CFD_HD void cfd_dca_handle2(int last, const double* s, double* h, int lane, int lanes) {
  for (int k = lane; k < 78; k += lanes)  // (G, H lie as P21, P22 do; g apart)
    h[k < 72 ? DCA_P21 + k : DCA_B2 + k - 72] = last ? 0 : s[S_G + k];
}

// Subsystem [a, e) with the velocity before it in its records: the handle equations into h, the
// sweeps' scalars into its records, on lane `lane` of `lanes` with `sync` between stages (the CPU:
// lane 0 of 1, nothing). s: CFD_DCA_SCRATCH doubles. Returns 0, or CFD_ERR_SINGULAR when a pivot
// is not positive.
#define CFD_DCA_LEAF(c, a, e, last, qd, tau, extra, Vin, L, h, s, lane, lanes, sync, bad)          \
  do {                                                                                           \
    if ((lane) == 0) cfd_dca_velocities(c, a, e, qd, Vin, L);                                    \
    sync;                                                                                        \
    cfd_dca_link_terms(c, a, e, qd, L, lane, lanes);                                             \
    sync;                                                                                        \
    cfd_dca_in_start(c, a, e, last, L, s, lane, lanes);                                          \
    sync;                                                                                        \
    for (int i_ = (e) - 1; i_ >= (a); i_--) {                                                    \
      cfd_dca_in_u(c, a, e, i_, tau, L, s, lane, lanes);                                         \
      sync;                                                                                      \
      bad |= cfd_dca_in_downdate(c, a, e, i_, extra, L, s, lane, lanes);                         \
      sync;                                                                                      \
      if (i_ > (a)) {                                                                            \
        cfd_dca_in_move(a, e, i_, L, s, lane, lanes);                                            \
        sync;                                                                                    \
        cfd_dca_in_congruence(c, a, e, i_, L, s, lane, lanes);                                   \
        sync;                                                                                    \
      }                                                                                          \
    }                                                                                            \
    cfd_dca_handle1(a, e, s, h, lane, lanes);                                                    \
    cfd_dca_out_start(L, s, lane, lanes);                                                        \
    sync;                                                                                        \
    for (int i_ = (a); i_ < (e); i_++) {                                                         \
      cfd_dca_out_rows(a, i_, L, s, lane, lanes);                                                \
      sync;                                                                                      \
      cfd_dca_out_joint(c, a, i_, L, s, lane, lanes);                                            \
      sync;                                                                                      \
      if (i_ + 1 < (e) || !(last)) {                                                             \
        cfd_dca_out_move(a, e, i_, L, s, lane, lanes);                                           \
        sync;                                                                                    \
      }                                                                                          \
    }                                                                                            \
    cfd_dca_handle2(last, s, h, lane, lanes);                                                    \
  } while (0)

// ---- the assembly, in stages a group of lanes shares ----------------------------------------------
// Each stage takes the entries lane, lane + lanes, ... of its outputs (the CPU: lane 0 of 1; the GPU:
// a group of lanes, a warp barrier between stages), so both run the same arithmetic per entry.
// A join's scratch: W (36), the right-hand sides R (6 x 13), the pivot order (6)
enum { CFD_DCA_JOIN_SCRATCH = 36 + 78 + 6 };

// 1. W = 1 - P22^l P11^r and R = [P21^l | P22^l P12^r | P22^l b1^r + b2^l]
CFD_HD void cfd_dca_join_rhs(const double* l, const double* r, double* W, double* R, int lane,
                             int lanes) {
  for (int e = lane; e < 36 + 78; e += lanes) {
    if (e < 36) {
      int row = e / 6, col = e % 6;
      double t = 0;
      for (int k = 0; k < 6; k++) t += l[DCA_P22 + 6 * row + k] * r[DCA_P11 + 6 * k + col];
      W[e] = (row == col) - t;
    } else {
      int f = e - 36, row = f / 13, col = f % 13;
      double t = 0;
      if (col < 6) {
        t = l[DCA_P21 + 6 * row + col];
      } else if (col < 12) {
        for (int k = 0; k < 6; k++) t += l[DCA_P22 + 6 * row + k] * r[DCA_P12 + 6 * k + col - 6];
      } else {
        for (int k = 0; k < 6; k++) t += l[DCA_P22 + 6 * row + k] * r[DCA_B1 + k];
        t += l[DCA_B2 + row];
      }
      R[f] = t;
    }
  }
}

// 2. (one lane) W = P^-1 L U in place, partial pivoting: piv[i] the row of the original that
// row i of P W is. Returns 0, or 1 when W is singular (it is not for physical inertias: its
// eigenvalues are >= 1).
CFD_HD int cfd_dca_join_factor(double* W, double* piv) {
  int order[6] = {0, 1, 2, 3, 4, 5}, bad = 0;
  for (int j = 0; j < 6; j++) {
    int best = j;
    for (int row = j + 1; row < 6; row++)
      if (fabs(W[6 * row + j]) > fabs(W[6 * best + j])) best = row;
    if (best != j) {
      for (int k = 0; k < 6; k++) {
        double t = W[6 * j + k];
        W[6 * j + k] = W[6 * best + k], W[6 * best + k] = t;
      }
      int t = order[j];
      order[j] = order[best], order[best] = t;
    }
    bad |= !(fabs(W[7 * j]) > 0);
    double inv = 1 / W[7 * j];
    for (int row = j + 1; row < 6; row++) {
      double f = W[6 * row + j] * inv;
      W[6 * row + j] = f;
      for (int k = j + 1; k < 6; k++) W[6 * row + k] -= f * W[6 * j + k];
    }
  }
  for (int k = 0; k < 6; k++) piv[k] = order[k];
  return bad;
}

// 3. column c of W^-1 R (13 columns) into the join: Xa, Xf, xb
CFD_HD void cfd_dca_join_solve(const double* W, const double* piv, const double* R, double* j,
                               int lane, int lanes) {
  for (int c = lane; c < 13; c += lanes) {
    double x[6];
    for (int i = 0; i < 6; i++) {
      double t = R[13 * (int)piv[i] + c];
      for (int k = 0; k < i; k++) t -= W[6 * i + k] * x[k];
      x[i] = t;
    }
    for (int i = 5; i >= 0; i--) {
      double t = x[i];
      for (int k = i + 1; k < 6; k++) t -= W[6 * i + k] * x[k];
      x[i] = t / W[7 * i];
    }
    for (int i = 0; i < 6; i++) {
      if (c < 6) j[DCA_XA + 6 * i + c] = x[i];
      else if (c < 12) j[DCA_XF + 6 * i + c - 6] = x[i];
      else j[DCA_XB + i] = x[i];
    }
  }
}

// 4. Ya = P11^r Xa, Yf = P11^r Xf + P12^r, yb = P11^r xb + b1^r
CFD_HD void cfd_dca_join_y(const double* r, double* j, int lane, int lanes) {
  for (int e = lane; e < 78; e += lanes) {
    int m = e < 72 ? e / 36 : 2, row = e < 72 ? (e % 36) / 6 : e - 72, col = e < 72 ? e % 6 : 0;
    const double* P = r + DCA_P11 + 6 * row;
    double t = 0;
    for (int k = 0; k < 6; k++)
      t += P[k] * (m == 0 ? j[DCA_XA + 6 * k + col] : m == 1 ? j[DCA_XF + 6 * k + col] : j[DCA_XB + k]);
    if (m == 0) j[DCA_YA + 6 * row + col] = t;
    else if (m == 1) j[DCA_YF + 6 * row + col] = t + r[DCA_P12 + 6 * row + col];
    else j[DCA_YB + row] = t + r[DCA_B1 + row];
  }
}

// 5. the assembled handle equations: P11 = P11^l + P12^l Ya, P12 = P12^l Yf, b1 = b1^l + P12^l yb,
// P21 = P21^r Xa, P22 = P22^r + P21^r Xf, b2 = b2^r + P21^r xb (h may not alias l or r)
CFD_HD void cfd_dca_join_handles(const double* l, const double* r, const double* j, double* h,
                                 int lane, int lanes) {
  for (int e = lane; e < CFD_DCA_HANDLE; e += lanes) {
    int m = e < 144 ? e / 36 : 4 + (e - 144) / 6;  // P11, P12, P21, P22, b1, b2
    int row = e < 144 ? (e % 36) / 6 : (e - 144) % 6, col = e < 144 ? e % 6 : 0;
    int left = m == 0 || m == 1 || m == 4;
    const double* A = left ? l + DCA_P12 + 6 * row : r + DCA_P21 + 6 * row;
    int off = m == 0 ? DCA_YA : m == 1 ? DCA_YF : m == 2 ? DCA_XA : m == 3 ? DCA_XF : m == 4 ? DCA_YB : DCA_XB;
    int stride = m < 4 ? 6 : 1;
    double t = 0;
    for (int k = 0; k < 6; k++) t += A[k] * j[off + stride * k + col];
    double add = m == 0 ? l[DCA_P11 + e] : m == 3 ? r[DCA_P22 + e - 108] : m == 4 ? l[DCA_B1 + row]
               : m == 5 ? r[DCA_B2 + row] : 0;
    h[e] = t + add;
  }
}

// Subsystems l (the parent side) and r joined: the join's equations into j, the assembled
// subsystem's handle equations into h (not aliasing l or r), s: CFD_DCA_JOIN_SCRATCH. Returns 0,
// or 1 when 1 - P22^l P11^r is singular.
CFD_HD int cfd_dca_assemble(const double* l, const double* r, double* j, double* h, double* s) {
  cfd_dca_join_rhs(l, r, s, s + 36, 0, 1);
  if (cfd_dca_join_factor(s, s + 114)) return 1;
  cfd_dca_join_solve(s, s + 114, s + 36, j, 0, 1);
  cfd_dca_join_y(r, j, 0, 1);
  cfd_dca_join_handles(l, r, j, h, 0, 1);
  return 0;
}

// Down the tree, a join's entries: its right part's A_in (x) and left part's f_out (y) from the
// assembled subsystem's inputs A, f; the left part's A_in and the right part's f_out are A and f
CFD_HD void cfd_dca_disassemble(const double* j, const double* A, const double* f, double* leftA,
                                double* leftf, double* rightA, double* rightf, int lane, int lanes) {
  for (int e = lane; e < 24; e += lanes) {
    int row = e % 6;
    if (e < 12) {
      const double *Ma = j + (e < 6 ? DCA_XA : DCA_YA) + 6 * row, *Mf = j + (e < 6 ? DCA_XF : DCA_YF) + 6 * row;
      double t = j[(e < 6 ? DCA_XB : DCA_YB) + row];
      for (int k = 0; k < 6; k++) t += Ma[k] * A[k] + Mf[k] * f[k];
      if (e < 6) rightA[row] = t;
      else leftf[row] = t;
    } else if (e < 18) {
      leftA[row] = A[row];
    } else {
      rightf[row] = f[row];
    }
  }
}

// Subsystem [a, e)'s joint accelerations from its inputs: the ABA's outward sweep
CFD_HD void cfd_dca_finish(const cfd_chain* c, int a, int e, const double* L, const double* A_in,
                           const double* f_out, double* qacc) {
  double ap[6];
  for (int k = 0; k < 6; k++) ap[k] = A_in[k] + L[DCA_C + k];
  for (int i = a; i < e; i++) {
    const double* Li = L + CFD_DCA_LINK * (i - a);
    const double* S = c->screw + 6 * i;
    double qdd = (Li[DCA_U0] - cfd_dot6(Li + DCA_W, f_out) - cfd_dot6(Li + DCA_U, ap)) * Li[DCA_DINV];
    qacc[i] = qdd;
    if (i + 1 < e) {
      const double* Ln = Li + CFD_DCA_LINK;
      double ai[6];
      for (int k = 0; k < 6; k++) ai[k] = ap[k] + S[k] * qdd;
      cfd_twist_to_child(Ln + DCA_R, Ln + DCA_P, ai, ap);
      for (int k = 0; k < 6; k++) ap[k] += Ln[DCA_C + k];
    }
  }
}

// ---- the tree ----------------------------------------------------------------------------------

// per tree node: the velocity map (18), handle equations, the join (internal nodes) and its
// scratch, and the node's inputs: the velocity before it, A_in, f_out
enum { DCA_NODE_FK = 0, DCA_NODE_H = 18, DCA_NODE_J = DCA_NODE_H + CFD_DCA_HANDLE,
       DCA_NODE_S = DCA_NODE_J + CFD_DCA_JOIN, DCA_NODE_V = DCA_NODE_S + CFD_DCA_JOIN_SCRATCH,
       DCA_NODE_A = DCA_NODE_V + 6, DCA_NODE_F = DCA_NODE_A + 6, CFD_DCA_NODE = DCA_NODE_F + 6 };
#define CFD_DCA_MAX_LEVELS 34

// The tree's levels over p subsystems: level 0 the subsystems, level l + 1 joins level l's pairs
// (2j, 2j + 1; an odd last node passes through). first[l]: level l's first node, count[l] its
// nodes. Returns the top level (the root's; 0 for one subsystem).
CFD_HD int cfd_dca_levels(int p, int* first, int* count) {
  int top = 0;
  first[0] = 0, count[0] = p;
  while (count[top] > 1) {
    first[top + 1] = first[top] + count[top];
    count[top + 1] = (count[top] + 1) / 2;
    top++;
  }
  return top;
}

// One instance's scratch (doubles) for n links in p subsystems: the links' records (and each
// subsystem's copy of the next one's first pose), the tree's nodes (p + ceil(p / 2) + ... < 2p +
// its levels), a leaf's scratch per subsystem
CFD_HD size_t cfd_dca_doubles(int n, int p) {
  return ((size_t)n + p) * CFD_DCA_LINK + (2 * (size_t)p + CFD_DCA_MAX_LEVELS) * CFD_DCA_NODE +
         (size_t)p * CFD_DCA_SCRATCH;
}

// The root's acceleration input: the base's (-g, the world frame) carried into link 0's frame
// (its pose at L0)
CFD_HD void cfd_dca_base_input(const cfd_chain* c, const double* L0, double* A) {
  double base[6] = {0, 0, 0, -c->gravity[0], -c->gravity[1], -c->gravity[2]};
  cfd_twist_to_child(L0 + DCA_R, L0 + DCA_P, base, A);
}

#endif  // CHAINFD_DCA_H
