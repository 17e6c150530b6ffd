// aba_tree.h: the articulated-body algorithm on a kinematic tree with ball and free joints, one
// state, in link frames with the structured algebra of aba_core.h. Host and device (CFD_HD): the
// fast CPU path takes it for trees and balls (cpu/fast_cpu.c), as a GPU kernel can per thread.
//
// The sweeps of cpu/abia_cpu.c with p = parent[i]: a link's articulated inertia and bias gather its
// children's as they are passed in (children have larger indices, so a reverse sweep meets each
// link after all of them), and velocities and accelerations come from the parent's, kept per link.
// A ball's links (joints.h): its second and third links sit at the identity in their parent
// (chain.h), so their transforms are skipped; and where its first two links carry nothing (as the
// adapter builds it) the sweep in eliminates the ball as one 3-dof joint, a 3x3 Cholesky pivot in
// place of three rank-one updates (cfd_aba_tree_ball). Otherwise its three links' pivots d_i
// factor the ball's 3x3 block as LDL^T would.
#ifndef CHAINFD_ABA_TREE_H
#define CHAINFD_ABA_TREE_H

#include "aba_core.h"
#include "joints.h"

// per link: 0-5 V (then the acceleration), 6-11 c, 12-20 R, 21-23 p, 24-50 IA (A, B, C), 51-56 pA,
// 57-62 U, 63 d, 64 u
enum { CFD_ABA_TREE_LINK_DOUBLES = 65 };

#define CFD_TW(i, k) work[((long)(i) * CFD_ABA_TREE_LINK_DOUBLES + (k)) * stride]

// Link i's articulated inertia IA and bias pa into its parent's sums: through i's pose, or as they
// are where i sits at the identity (a ball's later links)
CFD_HD void cfd_aba_tree_to_parent(const cfd_chain* c, int i, const cfd_inertia3* IA,
                                   const double pa[6], double* work, long stride) {
  int par = c->parent[i];
  if (c->kind[i] == CFD_LINK_BALL_NEXT) {
    for (int k = 0; k < 6; k++) CFD_TW(par, 51 + k) += pa[k];
    for (int k = 0; k < 9; k++) {
      CFD_TW(par, 24 + k) += IA->A[k];
      CFD_TW(par, 33 + k) += IA->B[k];
      CFD_TW(par, 42 + k) += IA->C[k];
    }
    return;
  }
  double R[9], p[3], pp[6];
  for (int k = 0; k < 9; k++) R[k] = CFD_TW(i, 12 + k);
  for (int k = 0; k < 3; k++) p[k] = CFD_TW(i, 21 + k);
  cfd_wrench_to_parent(R, p, pa, pp);
  for (int k = 0; k < 6; k++) CFD_TW(par, 51 + k) += pp[k];
  const double zero[36] = {0};
  cfd_inertia3 X;
  cfd_inertia3_to_parent(R, p, IA, zero, &X);
  for (int k = 0; k < 9; k++) {
    CFD_TW(par, 24 + k) += X.A[k];
    CFD_TW(par, 33 + k) += X.B[k];
    CFD_TW(par, 42 + k) += X.C[k];
  }
}

// The ball of links g .. g+2 eliminated as one 3-dof joint (the frame is shared; links g and g+1
// carry nothing): U = IA S (6x3), D = S^T U + the joint diagonal (3x3), u = tau - S^T pA;
// Ia = IA - U D^-1 U^T, pa = pA + Ia c + U D^-1 u with c the three links' velocity terms summed
// (they add in one frame). D^-1 by its Cholesky factor; 1 when a pivot is not positive. Kept for
// the accelerations: U_k at link g+k's U slots, u_k at its u slot, D^-1 at link g+1's pose slots.
CFD_HD int cfd_aba_tree_ball(const cfd_chain* c, int g, const double* tau, const double* extra_diag,
                             long vstride, double* work, long stride) {
  int last = g + 2;
  cfd_inertia3 IA;
  double pA[6], U[3][6], D[3][3], u[3];
  for (int k = 0; k < 9; k++)
    IA.A[k] = CFD_TW(last, 24 + k), IA.B[k] = CFD_TW(last, 33 + k), IA.C[k] = CFD_TW(last, 42 + k);
  for (int k = 0; k < 6; k++) pA[k] = CFD_TW(last, 51 + k);
  for (int j = 0; j < 3; j++) {
    const double* S = c->screw + 6 * (g + j);
    cfd_inertia3_vec(&IA, S, U[j]);
    u[j] = tau[(g + j) * vstride] - cfd_dot6(S, pA);
  }
  for (int j = 0; j < 3; j++)
    for (int k = j; k < 3; k++) D[j][k] = D[k][j] = cfd_dot6(c->screw + 6 * (g + j), U[k]);
  for (int j = 0; j < 3; j++)
    D[j][j] += c->armature[g + j] + (extra_diag ? extra_diag[(g + j) * vstride] : 0);
  // Cholesky D = L L^T, then Di = D^-1 = L^-T L^-1
  double l00 = D[0][0];
  if (!(l00 > 0)) return 1;
  l00 = sqrt(l00);
  double l10 = D[1][0] / l00, l20 = D[2][0] / l00, l11 = D[1][1] - l10 * l10;
  if (!(l11 > 0)) return 1;
  l11 = sqrt(l11);
  double l21 = (D[2][1] - l20 * l10) / l11, l22 = D[2][2] - l20 * l20 - l21 * l21;
  if (!(l22 > 0)) return 1;
  l22 = sqrt(l22);
  // L^-1 (lower): m00 = 1/l00, m11 = 1/l11, m22 = 1/l22, m10, m20, m21
  double m00 = 1 / l00, m11 = 1 / l11, m22 = 1 / l22;
  double m10 = -l10 * m00 * m11, m21 = -l21 * m11 * m22, m20 = -(l20 * m00 + l21 * m10) * m22;
  double Di[3][3];
  Di[0][0] = m00 * m00 + m10 * m10 + m20 * m20;
  Di[1][1] = m11 * m11 + m21 * m21;
  Di[2][2] = m22 * m22;
  Di[0][1] = Di[1][0] = m10 * m11 + m20 * m21;
  Di[0][2] = Di[2][0] = m20 * m22;
  Di[1][2] = Di[2][1] = m21 * m22;
  // Wk = (U D^-1)_k columns, w = D^-1 u
  double Wc[3][6], w[3];
  for (int j = 0; j < 3; j++) {
    w[j] = Di[j][0] * u[0] + Di[j][1] * u[1] + Di[j][2] * u[2];
    for (int k = 0; k < 6; k++) Wc[j][k] = Di[j][0] * U[0][k] + Di[j][1] * U[1][k] + Di[j][2] * U[2][k];
  }
  for (int j = 0; j < 3; j++) {
    for (int k = 0; k < 6; k++) CFD_TW(g + j, 57 + k) = U[j][k];
    CFD_TW(g + j, 64) = u[j];
  }
  CFD_TW(g + 1, 12) = Di[0][0]; CFD_TW(g + 1, 13) = Di[1][1]; CFD_TW(g + 1, 14) = Di[2][2];
  CFD_TW(g + 1, 15) = Di[0][1]; CFD_TW(g + 1, 16) = Di[0][2]; CFD_TW(g + 1, 17) = Di[1][2];
  if (c->parent[g] < 0) return 0;
  for (int r = 0; r < 3; r++)  // Ia = IA - sum_j Wc_j U_j^T
    for (int k = 0; k < 3; k++) {
      double a = 0, b = 0, cc = 0;
      for (int j = 0; j < 3; j++) {
        a += Wc[j][r] * U[j][k];
        b += Wc[j][r] * U[j][3 + k];
        cc += Wc[j][3 + r] * U[j][3 + k];
      }
      IA.A[3 * r + k] -= a;
      IA.B[3 * r + k] -= b;
      IA.C[3 * r + k] -= cc;
    }
  double ct[6], Iac[6], pa[6];
  for (int k = 0; k < 6; k++) ct[k] = CFD_TW(g, 6 + k) + CFD_TW(g + 1, 6 + k) + CFD_TW(last, 6 + k);
  cfd_inertia3_vec(&IA, ct, Iac);
  for (int k = 0; k < 6; k++) pa[k] = pA[k] + Iac[k] + U[0][k] * w[0] + U[1][k] * w[1] + U[2][k] * w[2];
  cfd_aba_tree_to_parent(c, g, &IA, pa, work, stride);
  return 0;
}

// The accelerations of a ball eliminated as one joint (cfd_aba_tree_ball), from its parent's ap:
// a' = X ap + c, qdd = D^-1 (u - U^T a'), a = a' + S qdd, kept at each of its links
CFD_HD void cfd_aba_tree_ball_acc(const cfd_chain* c, int g, const double ap[6], double* qacc,
                                  long vstride, double* work, long stride) {
  double R[9], p[3], a[6], r[3], Di[3][3], qdd[3];
  for (int k = 0; k < 9; k++) R[k] = CFD_TW(g, 12 + k);
  for (int k = 0; k < 3; k++) p[k] = CFD_TW(g, 21 + k);
  cfd_twist_to_child(R, p, ap, a);
  for (int k = 0; k < 6; k++) a[k] += CFD_TW(g, 6 + k) + CFD_TW(g + 1, 6 + k) + CFD_TW(g + 2, 6 + k);
  for (int j = 0; j < 3; j++) {
    double Ua = 0;
    for (int k = 0; k < 6; k++) Ua += CFD_TW(g + j, 57 + k) * a[k];
    r[j] = CFD_TW(g + j, 64) - Ua;
  }
  Di[0][0] = CFD_TW(g + 1, 12); Di[1][1] = CFD_TW(g + 1, 13); Di[2][2] = CFD_TW(g + 1, 14);
  Di[0][1] = Di[1][0] = CFD_TW(g + 1, 15);
  Di[0][2] = Di[2][0] = CFD_TW(g + 1, 16);
  Di[1][2] = Di[2][1] = CFD_TW(g + 1, 17);
  for (int j = 0; j < 3; j++) {
    qdd[j] = Di[j][0] * r[0] + Di[j][1] * r[1] + Di[j][2] * r[2];
    qacc[(g + j) * vstride] = qdd[j];
  }
  for (int j = 0; j < 3; j++)
    for (int k = 0; k < 6; k++) a[k] += c->screw[6 * (g + j) + k] * qdd[j];
  for (int j = 0; j < 3; j++)
    for (int k = 0; k < 6; k++) CFD_TW(g + j, k) = a[k];
}

// qacc for one state: vectors at [i * vstride], scratch entry k of link i at work[(i * 65 + k) *
// stride] (cfd_aba_core_ex's layout). CFD_OK or CFD_ERR_SINGULAR.
CFD_HD int cfd_aba_tree(const cfd_chain* c, const double* q, const double* qd, const double* tau,
                        const double* extra_diag, double* qacc, long vstride, double* work,
                        long stride) {
  int n = c->n;
  const int per = CFD_ABA_TREE_LINK_DOUBLES;
#define W(i, k) work[((long)(i) * per + (k)) * stride]

  // out: poses, velocities, c_i; IA_i = J_i and pA_i = the rigid-body bias to start the sums
  for (int i = 0; i < n; i++) {
    const double* S = c->screw + 6 * i;
    int par = c->parent[i], g = cfd_ball_first(c, i);
    double R[9], p[3], Vp[6] = {0, 0, 0, 0, 0, 0}, V[6], Vg[6], ci[6], JV[6], pb[6];
    int same = c->kind[i] == CFD_LINK_BALL_NEXT;  // the identity in its parent
    cfd_link_pose(c, i, q, vstride, R, p);
    if (par >= 0)
      for (int k = 0; k < 6; k++) Vp[k] = W(par, k);
    if (same)
      for (int k = 0; k < 6; k++) V[k] = Vp[k];
    else
      cfd_twist_to_child(R, p, Vp, V);
    double qdi = qd[i * vstride];
    for (int k = 0; k < 6; k++) V[k] += S[k] * qdi;
    for (int k = 0; k < 6; k++) Vg[k] = g == i ? V[k] : W(g, k);
    cfd_link_c(c, i, V, qdi, Vg, qd[g * vstride], ci);
    const double* J = c->inertia + 36 * i;
    // the rigid-body bias -ad*_V J V, J = [[Io, mc^], [mc^T, m]]: J V = [Io w + mc x v; m v +
    // w x mc] (a massless link, as a ball's first two: none)
    double m = J[21];
    if (m != 0 || J[0] != 0 || J[7] != 0 || J[14] != 0) {
      double mc[3] = {J[16], J[5], J[9]}, t[3];
      JV[0] = J[0] * V[0] + J[1] * V[1] + J[2] * V[2];
      JV[1] = J[6] * V[0] + J[7] * V[1] + J[8] * V[2];
      JV[2] = J[12] * V[0] + J[13] * V[1] + J[14] * V[2];
      cfd_cross(mc, V + 3, t);
      JV[0] += t[0]; JV[1] += t[1]; JV[2] += t[2];
      cfd_cross(V, mc, t);
      JV[3] = m * V[3] + t[0]; JV[4] = m * V[4] + t[1]; JV[5] = m * V[5] + t[2];
      cfd_neg_adstar(V, JV, pb);
    } else {
      for (int k = 0; k < 6; k++) pb[k] = 0;
    }
    for (int k = 0; k < 6; k++) W(i, k) = V[k], W(i, 6 + k) = ci[k], W(i, 51 + k) = pb[k];
    if (!same) {  // (a BALL_NEXT link's pose is never read)
      for (int k = 0; k < 9; k++) W(i, 12 + k) = R[k];
      for (int k = 0; k < 3; k++) W(i, 21 + k) = p[k];
    }
    for (int r = 0; r < 3; r++)
      for (int k = 0; k < 3; k++) {
        W(i, 24 + 3 * r + k) = J[6 * r + k];
        W(i, 33 + 3 * r + k) = J[6 * r + k + 3];
        W(i, 42 + 3 * r + k) = J[6 * (r + 3) + k + 3];
      }
  }

  // in: U, d, u per link; Ia and pa go into the parent's sums. A ball whose first two links carry
  // nothing (no inertia, no children: as the adapter builds it) is eliminated as one 3-dof joint
  // at its last link (cfd_aba_tree_ball): one 3x3 pivot for three rank-one updates.
  for (int i = n - 1; i >= 0; i--) {
    if (c->kind[i] == CFD_LINK_BALL_NEXT && (i + 1 == n || c->kind[i + 1] != CFD_LINK_BALL_NEXT)) {
      int g = i - 2, empty = g >= 0 && c->kind[g] == CFD_LINK_BALL;
      for (int k = 24; k < 57 && empty; k++) empty = W(g, k) == 0 && W(g + 1, k) == 0;
      W(i, 12) = empty;  // (a BALL_NEXT link's pose slots are free: the accelerations' flag)
      if (empty) {
        if (cfd_aba_tree_ball(c, g, tau, extra_diag, vstride, work, stride)) return CFD_ERR_SINGULAR;
        i = g;
        continue;
      }
    }
    const double* S = c->screw + 6 * i;
    cfd_inertia3 IA;
    double pA[6], U[6];
    for (int k = 0; k < 9; k++) IA.A[k] = W(i, 24 + k), IA.B[k] = W(i, 33 + k), IA.C[k] = W(i, 42 + k);
    for (int k = 0; k < 6; k++) pA[k] = W(i, 51 + k);
    cfd_inertia3_vec(&IA, S, U);
    double d = cfd_dot6(S, U) + c->armature[i] + (extra_diag ? extra_diag[i * vstride] : 0);
    if (!(d > 0)) return CFD_ERR_SINGULAR;
    double u = tau[i * vstride] - cfd_dot6(S, pA);
    for (int k = 0; k < 6; k++) W(i, 57 + k) = U[k];
    W(i, 63) = d;
    W(i, 64) = u;
    int par = c->parent[i];
    if (par < 0) continue;
    double inv = 1 / d, ci[6], Iac[6], pa[6];
    cfd_inertia3_sub_outer(&IA, U, inv);
    for (int k = 0; k < 6; k++) ci[k] = W(i, 6 + k);
    cfd_inertia3_vec(&IA, ci, Iac);
    for (int k = 0; k < 6; k++) pa[k] = pA[k] + Iac[k] + U[k] * u * inv;
    cfd_aba_tree_to_parent(c, i, &IA, pa, work, stride);
  }

  // out: accelerations, each from its parent's (kept where V was)
  for (int i = 0; i < n; i++) {
    const double* S = c->screw + 6 * i;
    int par = c->parent[i];
    double ap[6] = {0, 0, 0, -c->gravity[0], -c->gravity[1], -c->gravity[2]}, a[6], R[9], p[3];
    if (par >= 0)
      for (int k = 0; k < 6; k++) ap[k] = W(par, k);
    if (c->kind[i] == CFD_LINK_BALL && i + 2 < n && W(i + 2, 12) == 1) {  // a ball as one joint
      cfd_aba_tree_ball_acc(c, i, ap, qacc, vstride, work, stride);
      i += 2;
      continue;
    }
    if (c->kind[i] == CFD_LINK_BALL_NEXT) {
      for (int k = 0; k < 6; k++) a[k] = ap[k];
    } else {
      for (int k = 0; k < 9; k++) R[k] = W(i, 12 + k);
      for (int k = 0; k < 3; k++) p[k] = W(i, 21 + k);
      cfd_twist_to_child(R, p, ap, a);
    }
    double Ua = 0;
    for (int k = 0; k < 6; k++) a[k] += W(i, 6 + k), Ua += W(i, 57 + k) * a[k];
    double qa = (W(i, 64) - Ua) / W(i, 63);
    qacc[i * vstride] = qa;
    for (int k = 0; k < 6; k++) W(i, k) = a[k] + S[k] * qa;
  }
#undef W
  return CFD_OK;
}

#undef CFD_TW

#endif  // CHAINFD_ABA_TREE_H
