// aba_scan.h: the articulated-body algorithm for one long chain as scans over blocks of links:
// the CPU twin's steps (cpu/abia_scan_cpu.c), and what the GPU kernel (cuda/abia_scan.cu) shares
// with it (the partition, the element layouts, the velocity composition, the bias and
// acceleration sweeps); the GPU runs the 6x6 steps by a group of lanes (cuda/aba_scan_lanes.cuh).
//
// Each of the ABA's sweeps hands one value from link to link. Over a block of links [s, e) that
// hand-over is a map of what the block receives, and maps of one kind compose into maps of the
// same kind:
//   velocities (outward):        V_{e-1} = X V_{s-1} + w                  X: a pose's Ad_{T^-1}
//   articulated inertia (inward): C' = P0 + Phi C (1 + G C)^-1 Phi^T      a Riccati map
//   bias force (inward, once the inertias are known): t' = L t + l
//   accelerations (outward):      a_{e-1} = L^T a_{s-1} + m               the same L
// (C, t: what the block's last link receives from its child, in its frame; C', t': what the
// block's first link hands to its parent, in the parent's frame.) So a scan over the blocks
// (Hillis-Steele, ceil(log2 blocks) steps) gives every block what it receives, after which the
// blocks run their own sweeps at once: O(n / blocks + log blocks) steps in sequence, where the
// sequential sweeps take n. The Riccati form is the one that stays accurate: composing the maps
// never divides by a pivot smaller than a block's own, so it stays accurate at chain lengths
// where CFA's elimination does not (bench/riccati_blocks.py; figures in docs/RESULTS.md).
//
// The Riccati map of link i: C -> X_i^T Pi(J_i + C) X_i with the rank-one downdate
// Pi(Q) = Q - Q S S^T Q / (S^T Q S + d_i) (d_i: armature + extra diagonal). Prepending link i to
// a block's map F(C) = P0 + Phi Y Phi^T (Y = C (1 + G C)^-1) is the Kalman update in information
// form: with Q0 = J_i + P0, U0 = Q0 S, D0 = S^T U0 + d_i, g = Phi^T S,
//   P0' = X^T (Q0 - U0 U0^T / D0) X,  Phi' = X^T (1 - U0 S^T / D0) Phi,  G' = G + g g^T / D0,
// which needs D0 > 0. For a block's last link D0 = S^T J S + d_i, so a block must not end in a
// link that moves freely about its own joint (no inertia about S, no armature: MuJoCo's inner
// links of multi-joint bodies), which the partition sees to (cfd_abs_partition). Further in, D0
// counts only the block's own links beyond: a massless link followed in its block by links whose
// inertia leaves its axis free (a point mass on it, say) has D0 = 0 where the whole chain's pivot
// is positive, and the scan refuses such a chain as singular (CFD_ERR_SINGULAR) where the
// sequential sweeps would not.
//
// Ball and free joints (joints.h): a ball's first link takes the pose of the ball's whole
// rotation, its later links sit at the identity, so the maps are those of any three links; only
// their velocity terms differ, taken against the velocity before the ball (cfd_link_c_local),
// which a link reads from the ball's earlier links' screws and rates, so a block may begin or end
// inside a ball where its links' inertia or armature lets it end.
//
// Scratch per chain (doubles): CFD_ABS_LINK per link, CFD_ABS_BLOCK per block (the CPU twin's; the
// GPU kernel keeps its maps in shared memory and less per block, abia_scan.cu's ABS_VALUES).
#ifndef CHAINFD_ABA_SCAN_H
#define CHAINFD_ABA_SCAN_H

#include <float.h>

#include "aba_core.h"
#include "cfd_math.h"
#include "joints.h"

// per link: pose R (9) p (3), c_i (6), U_i (6), 1/d_i (1: the later sweeps multiply, a division
// being a long dependent step on a GPU), 6 doubles at ABS_OFF (the rigid-body bias force, then
// r_i, then w_i: cfd_abs_block_inertias, _out), 1 at ABS_SB (u0_i, u_i, then qdd0_i)
enum { CFD_ABS_LINK = 32, ABS_R = 0, ABS_P = 9, ABS_C = 12, ABS_U = 18, ABS_DINV = 24, ABS_OFF = 25,
       ABS_SB = 31 };
// element widths: velocities (R, p, w), Riccati (P0, Phi, G), affine (L, l)
enum { CFD_ABS_FK = 18, CFD_ABS_RIC = 108, CFD_ABS_AFF = 42 };
// per block: two buffers of each kind for the scans, and the block's own L (the accelerations'
// map is its transpose)
enum { CFD_ABS_BLOCK = 2 * (CFD_ABS_FK + CFD_ABS_RIC + CFD_ABS_AFF) + 36 };

// Whether a block may end after link i: the link resists motion about its own joint
// (S^T J S + armature > 0; MuJoCo's multi-joint bodies give massless inner links, which may not).
CFD_HD int cfd_abs_can_end(const cfd_chain* c, int i) {
  const double* S = c->screw + 6 * i;
  double JS[6];
  cfd_mat6_vec(c->inertia + 36 * i, S, JS);
  return cfd_dot6(S, JS) + c->armature[i] > 0;
}

// The blocks of links: about m links each, a block ending only where can_end (n flags, from
// cfd_abs_can_end) allows. starts: room for n + 1 entries; block b is [starts[b], starts[b + 1]).
// Returns the number of blocks.
CFD_HD int cfd_abs_partition(const unsigned char* can_end, int n, int m, int* starts) {
  int nb = 0, s = 0;
  if (m < 1) m = 1;
  while (s < n) {
    int e = s + m < n ? s + m : n;
    while (e < n && !can_end[e - 1]) e++;
    starts[nb++] = s;
    s = e;
  }
  starts[nb] = n;
  return nb;
}

// ---- composing maps -------------------------------------------------------------------------------

// Velocities: `later` after `earlier` (poses multiply, w = X_later w_earlier + w_later).
CFD_HD void cfd_abs_fk_compose(const double* CFD_RESTRICT later, const double* CFD_RESTRICT earlier,
                               double* CFD_RESTRICT out) {
  double w[6];
  cfd_se3_mul(earlier, earlier + 9, later, later + 9, out, out + 9);
  cfd_twist_to_child(later, later + 9, earlier + 12, w);
  for (int k = 0; k < 6; k++) out[12 + k] = w[k] + later[12 + k];
}

// Affine maps: A1 after A2: (L1 L2, L1 l2 + l1).
CFD_HD void cfd_abs_affine_compose(const double* CFD_RESTRICT A1, const double* CFD_RESTRICT A2,
                                   double* CFD_RESTRICT out) {
  double l[6];
  cfd_mat6_mul(A1, 0, A2, 0, out);
  cfd_mat6_vec(A1, A2 + 36, l);
  for (int k = 0; k < 6; k++) out[36 + k] = l[k] + A1[36 + k];
}

// LU factors of a 6x6 A in place, with partial pivoting: piv[k] is the row swapped with row k at
// step k, the diagonal holds the pivots' reciprocals. Every loop unrolled and the swaps as selects,
// so that the code is straight-line. Returns nonzero on a pivot below DBL_MIN in magnitude.
CFD_HD int cfd_lu6_factor(double* CFD_RESTRICT A, int piv[6]) {
  CFD_UNROLL for (int k = 0; k < 6; k++) {
    int pk = k;
    double big = fabs(A[7 * k]);
    CFD_UNROLL for (int r = k + 1; r < 6; r++)
      if (fabs(A[6 * r + k]) > big) big = fabs(A[6 * r + k]), pk = r;
    piv[k] = pk;
    CFD_UNROLL for (int r = k + 1; r < 6; r++) {
      int swap = r == pk;
      CFD_UNROLL for (int j = 0; j < 6; j++) {
        double a = A[6 * k + j], b = A[6 * r + j];
        A[6 * k + j] = swap ? b : a;
        A[6 * r + j] = swap ? a : b;
      }
    }
    if (!(fabs(A[7 * k]) >= DBL_MIN)) return 1;  // (as the GPU: below DBL_MIN is singular)
    double inv = 1 / A[7 * k];
    A[7 * k] = inv;
    CFD_UNROLL for (int r = k + 1; r < 6; r++) {
      double f = A[6 * r + k] * inv;
      A[6 * r + k] = f;
      CFD_UNROLL for (int j = k + 1; j < 6; j++) A[6 * r + j] -= f * A[6 * k + j];
    }
  }
  return 0;
}

// B <- A^-1 B for a 6x6 B (row-major), with cfd_lu6_factor's factors: the row swaps first (the
// multipliers moved with their rows), then the two triangular solves
CFD_HD void cfd_lu6_solve(const double* CFD_RESTRICT A, const int piv[6], double* CFD_RESTRICT B) {
  CFD_UNROLL for (int k = 0; k < 6; k++)
    CFD_UNROLL for (int r = k + 1; r < 6; r++) {
      int swap = r == piv[k];
      CFD_UNROLL for (int j = 0; j < 6; j++) {
        double a = B[6 * k + j], b = B[6 * r + j];
        B[6 * k + j] = swap ? b : a;
        B[6 * r + j] = swap ? a : b;
      }
    }
  CFD_UNROLL for (int k = 0; k < 6; k++) {
    CFD_UNROLL for (int r = k + 1; r < 6; r++)
      CFD_UNROLL for (int j = 0; j < 6; j++) B[6 * r + j] -= A[6 * r + k] * B[6 * k + j];
  }
  CFD_UNROLL for (int k = 5; k >= 0; k--)
    CFD_UNROLL for (int j = 0; j < 6; j++) {
      double s = B[6 * k + j];
      CFD_UNROLL for (int c = k + 1; c < 6; c++) s -= A[6 * k + c] * B[6 * c + j];
      B[6 * k + j] = s * A[7 * k];
    }
}

// Riccati maps: F1 after F2 (F1 nearer the base). With A = 1 + P02 G1 (invertible: P02 G1 has
// no negative eigenvalue), Z = A^-1 P02 and Y = A^-1 Phi2:
//   P0 = P01 + Phi1 Z Phi1^T,  Phi = Phi1 Y,  G = G2 + Phi2^T G1 Y
// P0 and G from their upper triangles (symmetric). In an order that keeps few 6x6 matrices live
// at once (A and one of Z, Y and G's sum). Returns nonzero on a zero pivot.
CFD_HD int cfd_abs_riccati_compose(const double* CFD_RESTRICT F1, const double* CFD_RESTRICT F2,
                                   double* CFD_RESTRICT out) {
  const double *P01 = F1, *Phi1 = F1 + 36, *G1 = F1 + 72;
  const double *P02 = F2, *Phi2 = F2 + 36, *G2 = F2 + 72;
  double A[36], X[36];
  int piv[6];
  CFD_UNROLL for (int r = 0; r < 6; r++)
    CFD_UNROLL for (int c = 0; c < 6; c++) {
      double s = r == c ? 1.0 : 0.0;
      CFD_UNROLL for (int k = 0; k < 6; k++) s += P02[6 * r + k] * G1[6 * k + c];
      A[6 * r + c] = s;
      X[6 * r + c] = P02[6 * r + c];
    }
  if (cfd_lu6_factor(A, piv)) return 1;
  cfd_lu6_solve(A, piv, X);  // Z
  CFD_UNROLL for (int r = 0; r < 6; r++) {  // row r of Phi1 Z, then row r of P0's upper triangle
    double t[6];
    CFD_UNROLL for (int c = 0; c < 6; c++) {
      double z = 0;
      CFD_UNROLL for (int k = 0; k < 6; k++) z += Phi1[6 * r + k] * X[6 * k + c];
      t[c] = z;
    }
    CFD_UNROLL for (int c = r; c < 6; c++) {
      double v = P01[6 * r + c];
      CFD_UNROLL for (int k = 0; k < 6; k++) v += t[k] * Phi1[6 * c + k];
      out[6 * r + c] = out[6 * c + r] = v;
    }
  }
  CFD_UNROLL for (int k = 0; k < 36; k++) X[k] = Phi2[k];
  cfd_lu6_solve(A, piv, X);  // Y
  double Gs[36];
  CFD_UNROLL for (int k = 0; k < 36; k++) Gs[k] = G2[k];
  CFD_UNROLL for (int r = 0; r < 6; r++) {  // rows r of Phi1 Y and of G1 Y; G += Phi2^T (G1 Y)
    double gy[6];
    CFD_UNROLL for (int c = 0; c < 6; c++) {
      double y = 0, g = 0;
      CFD_UNROLL for (int k = 0; k < 6; k++) {
        y += Phi1[6 * r + k] * X[6 * k + c];
        g += G1[6 * r + k] * X[6 * k + c];
      }
      out[36 + 6 * r + c] = y;
      gy[c] = g;
    }
    CFD_UNROLL for (int a = 0; a < 6; a++)
      CFD_UNROLL for (int c = a; c < 6; c++) Gs[6 * a + c] += Phi2[6 * r + a] * gy[c];
  }
  CFD_UNROLL for (int a = 0; a < 6; a++)
    CFD_UNROLL for (int c = a; c < 6; c++) out[72 + 6 * a + c] = out[72 + 6 * c + a] = Gs[6 * a + c];
  return 0;
}

// One step of a Hillis-Steele scan for element b of nb at distance k: out_b = in_b composed with
// in_{b-k} (forward kinds) or in_{b+k} (inward kinds), a copy where there is none. Returns
// nonzero on a zero pivot (Riccati).
enum { CFD_ABS_SCAN_FK, CFD_ABS_SCAN_RIC, CFD_ABS_SCAN_BIAS, CFD_ABS_SCAN_ACC };
// doubles per element of a scan kind
CFD_HD int cfd_abs_width(int kind) {
  return kind == CFD_ABS_SCAN_FK ? CFD_ABS_FK : kind == CFD_ABS_SCAN_RIC ? CFD_ABS_RIC : CFD_ABS_AFF;
}

CFD_HD int cfd_abs_scan_step(int kind, int b, int nb, int k, const double* CFD_RESTRICT in,
                             double* CFD_RESTRICT out) {
  int width = cfd_abs_width(kind);
  int inward = kind == CFD_ABS_SCAN_RIC || kind == CFD_ABS_SCAN_BIAS;
  int other = inward ? b + k : b - k;
  const double* mine = in + (long)width * b;
  double* o = out + (long)width * b;
  if (other < 0 || other >= nb) {
    for (int j = 0; j < width; j++) o[j] = mine[j];
    return 0;
  }
  const double* them = in + (long)width * other;
  switch (kind) {
    case CFD_ABS_SCAN_FK: cfd_abs_fk_compose(mine, them, o); return 0;
    case CFD_ABS_SCAN_RIC: return cfd_abs_riccati_compose(mine, them, o);
    default: cfd_abs_affine_compose(mine, them, o); return 0;  // mine applied last
  }
}

// ---- a block's own sweeps -------------------------------------------------------------------------

// Q <- Q - U U^T / D, and Q + J (J dense)
CFD_HD void cfd_abs_inertia3_downdate(cfd_inertia3* Q, const double U[6], double inv) {
  CFD_UNROLL for (int r = 0; r < 3; r++)
    CFD_UNROLL for (int k = 0; k < 3; k++) {
      Q->A[3 * r + k] -= U[r] * U[k] * inv;
      Q->B[3 * r + k] -= U[r] * U[3 + k] * inv;
      Q->C[3 * r + k] -= U[3 + r] * U[3 + k] * inv;
    }
}

CFD_HD void cfd_abs_inertia3_add(cfd_inertia3* Q, const double J[36]) {
  CFD_UNROLL for (int r = 0; r < 3; r++)
    CFD_UNROLL for (int k = 0; k < 3; k++) {
      Q->A[3 * r + k] += J[6 * r + k];
      Q->B[3 * r + k] += J[6 * r + 3 + k];
      Q->C[3 * r + k] += J[6 * (3 + r) + 3 + k];
    }
}

CFD_HD void cfd_abs_inertia3_dense(const cfd_inertia3* Q, double* out) {
  CFD_UNROLL for (int r = 0; r < 3; r++)
    CFD_UNROLL for (int k = 0; k < 3; k++) {
      out[6 * r + k] = Q->A[3 * r + k];
      out[6 * r + 3 + k] = Q->B[3 * r + k];
      out[6 * (3 + r) + k] = Q->B[3 * k + r];
      out[6 * (3 + r) + 3 + k] = Q->C[3 * r + k];
    }
}

// M <- X^T M, column by column (M: 6 x cols, row-major with row length cols)
CFD_HD void cfd_abs_wrench_cols(const double R[9], const double p[3], double* M, int cols) {
  CFD_UNROLL for (int k = 0; k < 6; k++) {
    if (k >= cols) break;
    double col[6], t[6];
    CFD_UNROLL for (int r = 0; r < 6; r++) col[r] = M[cols * r + k];
    cfd_wrench_to_parent(R, p, col, t);
    CFD_UNROLL for (int r = 0; r < 6; r++) M[cols * r + k] = t[r];
  }
}

// 1. Poses, and the block's velocity map (fk: its pose and w from V_{s-1} = 0) and Riccati map
// (ric: from the identity, links prepended from the tip). Running values stay local (registers
// on a GPU); fk and ric are written once. Returns nonzero when a D0 is not positive.
CFD_HD int cfd_abs_block_maps(const cfd_chain* c, int s, int e, const double* q, const double* qd,
                              const double* extra, double* links, double* fk, double* ric) {
  double T[18];
  CFD_UNROLL for (int k = 0; k < 18; k++) T[k] = (k == 0 || k == 4 || k == 8) ? 1.0 : 0.0;
  for (int i = s; i < e; i++) {
    double* L = links + CFD_ABS_LINK * (long)i;
    const double* S = c->screw + 6 * i;
    double link[18], t[18];
    cfd_link_pose(c, i, q, 1, link, link + 9);
    CFD_UNROLL for (int k = 0; k < 12; k++) L[k] = link[k];
    CFD_UNROLL for (int k = 0; k < 6; k++) link[12 + k] = S[k] * qd[i];
    cfd_abs_fk_compose(link, T, t);
    CFD_UNROLL for (int k = 0; k < 18; k++) T[k] = t[k];
  }
  CFD_UNROLL for (int k = 0; k < 18; k++) fk[k] = T[k];
  cfd_inertia3 P;
  double Phi[36], G[36], zero[36];
  CFD_UNROLL for (int k = 0; k < 36; k++) Phi[k] = (k % 7 == 0) ? 1.0 : 0.0, G[k] = zero[k] = 0;
  CFD_UNROLL for (int k = 0; k < 9; k++) P.A[k] = P.B[k] = P.C[k] = 0;
  int bad = 0;
  for (int i = e - 1; i >= s; i--) {
    const double* L = links + CFD_ABS_LINK * (long)i;
    const double* S = c->screw + 6 * i;
    double R[9], p[3], U[6], g[6];
    CFD_UNROLL for (int k = 0; k < 9; k++) R[k] = L[ABS_R + k];
    CFD_UNROLL for (int k = 0; k < 3; k++) p[k] = L[ABS_P + k];
    cfd_abs_inertia3_add(&P, c->inertia + 36 * i);  // Q0 = J_i + P0
    cfd_inertia3_vec(&P, S, U);
    double D = cfd_dot6(S, U) + c->armature[i] + (extra ? extra[i] : 0);
    bad |= !(D >= DBL_MIN);  // (the GPU's reciprocal flushes a subnormal D to zero)
    double inv = 1 / D;
    CFD_UNROLL for (int k = 0; k < 6; k++) {
      double t = 0;
      CFD_UNROLL for (int r = 0; r < 6; r++) t += Phi[6 * r + k] * S[r];
      g[k] = t;
    }
    CFD_UNROLL for (int r = 0; r < 6; r++)
      CFD_UNROLL for (int k = 0; k < 6; k++) {
        G[6 * r + k] += g[r] * g[k] * inv;
        Phi[6 * r + k] -= U[r] * g[k] * inv;
      }
    cfd_abs_inertia3_downdate(&P, U, inv);
    cfd_inertia3 Pp;
    cfd_inertia3_to_parent(R, p, &P, zero, &Pp);
    P = Pp;
    cfd_abs_wrench_cols(R, p, Phi, 6);
  }
  cfd_abs_inertia3_dense(&P, ric);
  CFD_UNROLL for (int k = 0; k < 36; k++) ric[36 + k] = Phi[k], ric[72 + k] = G[k];
  return bad;
}

// 2. With V_{s-1} (Vin) and the inertia handed in (Cin; NULL: none), the block's velocities and
// articulated inertias, kept per link as c_i, U_i, 1/d_i and u_i's two parts (below), and its
// bias map (aff: L, l; keep: L again). The map grows from the tip, so that before link i joins
// it, (L, l) is that of links i + 1 ... e - 1: link i receives t_i = L t + l from its child when
// the block is handed t, and u_i = tau_i - S_i^T (bias_i + t_i) = u0_i - r_i . t with
// r_i = L^T S_i and u0_i = tau_i - S_i^T (bias_i + l), kept in off_i's and u_i's places: step 3
// then takes every link at once where a sweep in would take them in turn. Returns nonzero when a
// d_i is not positive.
CFD_HD int cfd_abs_block_inertias(const cfd_chain* c, int s, int e, const double* qd,
                                  const double* tau, const double* extra, const double* Vin,
                                  const double* Cin, double* links, double* aff, double* keep) {
  double V[6];
  CFD_UNROLL for (int k = 0; k < 6; k++) V[k] = Vin ? Vin[k] : 0;
  for (int i = s; i < e; i++) {
    double* L = links + CFD_ABS_LINK * (long)i;
    const double* S = c->screw + 6 * i;
    double Vc[6], Sqd[6], JV[6], ci[6], pb[6];
    cfd_twist_to_child(L + ABS_R, L + ABS_P, V, Vc);
    CFD_UNROLL for (int k = 0; k < 6; k++) Sqd[k] = S[k] * qd[i], V[k] = Vc[k] + Sqd[k];
    cfd_link_c_local(c, i, V, qd, ci);
    cfd_mat6_vec(c->inertia + 36 * i, V, JV);
    cfd_neg_adstar(V, JV, pb);
    CFD_UNROLL for (int k = 0; k < 6; k++) L[ABS_C + k] = ci[k], L[ABS_OFF + k] = pb[k];
  }
  cfd_inertia3 Q;
  double Lm[42], zero[36];  // L, then l
  CFD_UNROLL for (int k = 0; k < 36; k++) Lm[k] = (k % 7 == 0) ? 1.0 : 0.0, zero[k] = 0;
  CFD_UNROLL for (int k = 0; k < 6; k++) Lm[36 + k] = 0;
  if (Cin) cfd_inertia3_from(Cin, &Q);
  else CFD_UNROLL for (int k = 0; k < 9; k++) Q.A[k] = Q.B[k] = Q.C[k] = 0;
  int bad = 0;
  for (int i = e - 1; i >= s; i--) {
    double* L = links + CFD_ABS_LINK * (long)i;
    const double* S = c->screw + 6 * i;
    double R[9], p[3], U[6], pb[6], ci[6], h[6], t[6];
    CFD_UNROLL for (int k = 0; k < 9; k++) R[k] = L[ABS_R + k];
    CFD_UNROLL for (int k = 0; k < 3; k++) p[k] = L[ABS_P + k];
    CFD_UNROLL for (int k = 0; k < 6; k++) pb[k] = L[ABS_OFF + k], ci[k] = L[ABS_C + k];
    cfd_abs_inertia3_add(&Q, c->inertia + 36 * i);
    cfd_inertia3_vec(&Q, S, U);
    double D = cfd_dot6(S, U) + c->armature[i] + (extra ? extra[i] : 0);
    bad |= !(D >= DBL_MIN);  // (the GPU's reciprocal flushes a subnormal D to zero)
    double inv = 1 / D;
    cfd_abs_inertia3_downdate(&Q, U, inv);
    // off_i = X^T ((1 - U S^T / D) pb + Qa c_i + U tau_i / D)
    double Spb = cfd_dot6(S, pb), su = (tau[i] - Spb) * inv;
    cfd_inertia3_vec(&Q, ci, h);
    CFD_UNROLL for (int k = 0; k < 6; k++) h[k] += pb[k] + U[k] * su;
    cfd_wrench_to_parent(R, p, h, t);
    CFD_UNROLL for (int k = 0; k < 6; k++) L[ABS_U + k] = U[k];
    L[ABS_DINV] = inv;
    // (L, l) <- (L_i L, L_i l + off_i), L_i = X^T (1 - U S^T / D): seven columns, each one's S^T
    // first (r_i, and u0_i's S^T l)
    {
      double col[6], Sc;
      CFD_UNROLL for (int k = 0; k < 6; k++) {
        Sc = 0;
        CFD_UNROLL for (int r = 0; r < 6; r++) Sc += S[r] * Lm[6 * r + k];
        L[ABS_OFF + k] = Sc;
        CFD_UNROLL for (int r = 0; r < 6; r++) col[r] = Lm[6 * r + k] - U[r] * Sc * inv;
        cfd_wrench_to_parent(R, p, col, h);
        CFD_UNROLL for (int r = 0; r < 6; r++) Lm[6 * r + k] = h[r];
      }
      Sc = cfd_dot6(S, Lm + 36);
      L[ABS_SB] = tau[i] - Spb - Sc;
      CFD_UNROLL for (int r = 0; r < 6; r++) col[r] = Lm[36 + r] - U[r] * Sc * inv;
      cfd_wrench_to_parent(R, p, col, h);
      CFD_UNROLL for (int r = 0; r < 6; r++) Lm[36 + r] = h[r] + t[r];
    }
    cfd_inertia3 Qp;
    cfd_inertia3_to_parent(R, p, &Q, zero, &Qp);
    Q = Qp;
  }
  CFD_UNROLL for (int k = 0; k < 42; k++) aff[k] = Lm[k];
  CFD_UNROLL for (int k = 0; k < 36; k++) keep[k] = Lm[k];
  return bad;
}

// What the sweep out reads of link i: its pose, screw, U_i, 1/d_i, u_i and c_i. Loaded a link
// ahead of its use, so that on a GPU the next link's loads are in flight while this link's
// arithmetic runs (the sweep is a chain of dependent steps, and a load from L2 costs as much as a
// step).
typedef struct {
  double R[9], p[3], S[6], U[6], v[6], dinv, sb;
} cfd_abs_rec;

CFD_HD void cfd_abs_load(const cfd_chain* c, const double* links, int i, cfd_abs_rec* r) {
  const double* L = links + CFD_ABS_LINK * (long)i;
  for (int k = 0; k < 9; k++) r->R[k] = L[ABS_R + k];
  for (int k = 0; k < 3; k++) r->p[k] = L[ABS_P + k];
  for (int k = 0; k < 6; k++)
    r->S[k] = c->screw[6 * i + k], r->U[k] = L[ABS_U + k], r->v[k] = L[ABS_C + k];
  r->dinv = L[ABS_DINV];
  r->sb = L[ABS_SB];
}

// 3. With the bias force handed in (tin; NULL: none), the block's u_i (each link on its own,
// from step 2's u0_i and r_i), then its acceleration map (acc: L^T from keep, m = a_{e-1} from
// a_{s-1} = 0; the first block's from the base acceleration, with no linear part) by a sweep out,
// which also keeps per link what gives its qdd once the acceleration a_{s-1} handed in is known:
//   qdd_i = qdd0_i - w_i . a_{s-1},   w_i = M_{i-1}^T X_i^T U_i / d_i
// (qdd0_i: the sweep's own; M_{i-1}: the map from a_{s-1} to a_{i-1}, carried column by column,
// M_i = (1 - S U^T / d) X_i M_{i-1}), so that step 4 takes all the block's links at once where a
// sweep takes them in turn. The sweep out in seven independent parts (cfd_abs_block_out), which
// the GPU runs on seven lanes.
CFD_HD void cfd_abs_block_u(int s, int e, const double* tin, double* links) {
  for (int i = s; i < e; i++) {
    double* L = links + CFD_ABS_LINK * (long)i;
    if (tin) L[ABS_SB] -= cfd_dot6(L + ABS_OFF, tin);
  }
}

// Part `part` of the sweep out, after cfd_abs_block_u: part k < 6 carries column k of M and
// writes each link's (w_i)_k in off_i's place (0 for the first block, whose a_{s-1} is the
// base's, already in qdd0); part 6 the accelerations from a_{s-1} = 0 (the base's for the first
// block), writing qdd0_i in u_i's place, and a_{e-1} into out (out: M's column k for the others).
// The parts read and write disjoint fields.
CFD_HD void cfd_abs_block_out(const cfd_chain* c, int s, int e, int part, double* links,
                              double out[6]) {
  double a[6];
  for (int k = 0; k < 6; k++) a[k] = part < 6 ? (k == part) : 0;
  if (part == 6 && s == 0)
    for (int k = 0; k < 3; k++) a[3 + k] = -c->gravity[k];
  cfd_abs_rec cur, next;
  cfd_abs_load(c, links, s, &cur);
  for (int i = s; i < e; i++) {
    cfd_abs_load(c, links, i + 1 < e ? i + 1 : i, &next);  // (the last: itself)
    double* L = links + CFD_ABS_LINK * (long)i;
    double ai[6];
    cfd_twist_to_child(cur.R, cur.p, a, ai);
    if (part == 6) {
      for (int k = 0; k < 6; k++) ai[k] += cur.v[k];
      double qa = (cur.sb - cfd_dot6(cur.U, ai)) * cur.dinv;
      for (int k = 0; k < 6; k++) a[k] = ai[k] + cur.S[k] * qa;
      L[ABS_SB] = qa;
    } else {
      double w = s > 0 ? cfd_dot6(cur.U, ai) * cur.dinv : 0;
      for (int k = 0; k < 6; k++) a[k] = ai[k] - cur.S[k] * w;
      L[ABS_OFF + part] = w;
    }
    cur = next;
  }
  for (int k = 0; k < 6; k++) out[k] = a[k];
}

// Part `part`'s share of the block's acceleration map (acc: L^T, then m): row `part` of L^T from
// the bias map's L (keep; zero for the first block, whose a_{s-1} is the base's), or (part 6) m,
// the sweep out's a_{e-1} (out). Every load before the first store: on a GPU keep is global and
// acc shared, and a store the compiler cannot tell apart from the next load makes each load wait
// for the store before it, which serialises the sweep-out phase.
CFD_HD void cfd_abs_acc_map_part(int s, int part, const double* keep, const double out[6],
                                 double* acc) {
  double row[6];
  CFD_UNROLL for (int k = 0; k < 6; k++)
    row[k] = part == 6 ? out[k] : s == 0 ? 0 : keep[6 * k + part];
  double* to = acc + (part == 6 ? 36 : 6 * part);
  CFD_UNROLL for (int k = 0; k < 6; k++) to[k] = row[k];
}

CFD_HD void cfd_abs_block_bias(const cfd_chain* c, int s, int e, const double* tin, double* links,
                               const double* keep, double* acc) {
  cfd_abs_block_u(s, e, tin, links);
  for (int part = 0; part < 7; part++) {
    double out[6];
    cfd_abs_block_out(c, s, e, part, links, out);
    cfd_abs_acc_map_part(s, part, keep, out, acc);
  }
}

// 4. With the acceleration of link s - 1 (ain; NULL for the first block, whose qdd0 is final),
// the block's qacc: each link on its own (step 3's w_i and qdd0_i).
CFD_HD void cfd_abs_block_qacc(int s, int e, const double* ain, const double* links, double* qacc) {
  for (int i = s; i < e; i++) {
    const double* L = links + CFD_ABS_LINK * (long)i;
    qacc[i] = L[ABS_SB] - (ain ? cfd_dot6(L + ABS_OFF, ain) : 0);
  }
}

#endif  // CHAINFD_ABA_SCAN_H
