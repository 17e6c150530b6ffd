// aba_tree.h: the articulated-body algorithm on a kinematic tree with ball and free joints, one
// state, in link frames with the structured algebra of aba_core.h. Host and device (CFD_HD): the
// fast CPU path takes it for trees and balls (cpu/fast_cpu.c), as a GPU kernel can per thread.
//
// The sweeps of cpu/abia_cpu.c with p = parent[i]: a link's articulated inertia and bias gather its
// children's as they are passed in (children have larger indices, so a reverse sweep meets each
// link after all of them), and velocities and accelerations come from the parent's, kept per link.
// A ball's links (joints.h) need nothing else: its three dofs are three links whose pivots d_i
// factor the 3x3 block of the ball exactly as LDL^T would. Its second and third links sit at the
// identity in their parent (chain.h), so their transforms are skipped: their twists, inertias
// and wrenches pass to the parent unchanged.
#ifndef CHAINFD_ABA_TREE_H
#define CHAINFD_ABA_TREE_H

#include "aba_core.h"
#include "joints.h"

// per link: 0-5 V (then the acceleration), 6-11 c, 12-20 R, 21-23 p, 24-50 IA (A, B, C), 51-56 pA,
// 57-62 U, 63 d, 64 u
enum { CFD_ABA_TREE_LINK_DOUBLES = 65 };

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

  // in: U, d, u per link; Ia and pa go into the parent's sums
  for (int i = n - 1; i >= 0; i--) {
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
    double inv = 1 / d, ci[6], Iac[6], pa[6], pp[6], R[9], p[3];
    for (int r = 0; r < 3; r++)
      for (int k = 0; k < 3; k++) {
        IA.A[3 * r + k] -= U[r] * U[k] * inv;
        IA.B[3 * r + k] -= U[r] * U[3 + k] * inv;
        IA.C[3 * r + k] -= U[3 + r] * U[3 + k] * inv;
      }
    for (int k = 0; k < 6; k++) ci[k] = W(i, 6 + k);
    cfd_inertia3_vec(&IA, ci, Iac);
    for (int k = 0; k < 6; k++) pa[k] = pA[k] + Iac[k] + U[k] * u * inv;
    if (c->kind[i] == CFD_LINK_BALL_NEXT) {  // the identity: no transform
      for (int k = 0; k < 6; k++) W(par, 51 + k) += pa[k];
      for (int k = 0; k < 9; k++) {
        W(par, 24 + k) += IA.A[k];
        W(par, 33 + k) += IA.B[k];
        W(par, 42 + k) += IA.C[k];
      }
      continue;
    }
    for (int k = 0; k < 9; k++) R[k] = W(i, 12 + k);
    for (int k = 0; k < 3; k++) p[k] = W(i, 21 + k);
    cfd_wrench_to_parent(R, p, pa, pp);
    for (int k = 0; k < 6; k++) W(par, 51 + k) += pp[k];
    const double zero[36] = {0};
    cfd_inertia3 X;
    cfd_inertia3_to_parent(R, p, &IA, zero, &X);
    for (int k = 0; k < 9; k++) {
      W(par, 24 + k) += X.A[k];
      W(par, 33 + k) += X.B[k];
      W(par, 42 + k) += X.C[k];
    }
  }

  // out: accelerations, each from its parent's (kept where V was)
  for (int i = 0; i < n; i++) {
    const double* S = c->screw + 6 * i;
    int par = c->parent[i];
    double ap[6] = {0, 0, 0, -c->gravity[0], -c->gravity[1], -c->gravity[2]}, a[6], R[9], p[3];
    if (par >= 0)
      for (int k = 0; k < 6; k++) ap[k] = W(par, k);
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

#endif  // CHAINFD_ABA_TREE_H
