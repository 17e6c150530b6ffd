// id_deriv.h: analytical derivatives of inverse dynamics (recursive Newton-Euler) with respect to
// q and qd, for chains and trees of hinges and slides, in the world frame. Written once for the
// CPU (core/deriv.c) and a GPU twin.
//
// World frame: every twist and wrench is taken at the world origin (twist [w; v], wrench [m; f],
// as cfd_math.h). With T_i link i's world pose, S_i = Ad_{T_i} s_i (s_i its screw in its frame)
// and I_i = Ad_{T_i}^-T J_i Ad_{T_i}^-1 (J_i its spatial inertia), the Newton-Euler recursions are
//   V_i = V_p + S_i qd_i,   A_i = A_p + S_i qdd_i + ad_{V_i} S_i qd_i   (A_world = [0; -g])
//   F_i = I_i A_i + V_i x* (I_i V_i) + sum over children F_k,   tau_i = S_i . F_i
// (x*: cfd_neg_adstar) and the same as the link-frame form of kernels/cpu/id_cpu.c, moved.
//
// Turning q_j by dq rotates the subtree of j (j and its descendants) about S_j, which moves its
// screws and inertias and nothing else:
//   dS_i = ad_{S_j} S_i,   dI_i X = S_j x* (I_i X) - I_i ad_{S_j} X      (i in the subtree)
// and qd_j enters V of the subtree as S_j. Each direction is then one pass of the recursions'
// tangents over the subtree and one backward pass over the tree, O(n) a direction and O(n^2)
// for all of q and qd (paper 003's Algorithm 2 takes the same passes a column at a time).
//   forward:  dV_i = dV_p + dS_i qd_i (+ S_j for qd_j, i in the subtree)
//             dA_i = dA_p + dS_i qdd_i + (ad_{dV_i} S_i + ad_{V_i} dS_i) qd_i (+ ad_{V_j} S_j for qd_j
//                    at i = j)
//             df_i = dI_i A_i + I_i dA_i + dV_i x* (I_i V_i) + V_i x* (dI_i V_i + I_i dV_i)
//   backward: dF_i = df_i + sum over children dF_k,   dtau_i = dS_i . F_i + S_i . dF_i
// Links outside the subtree have df = 0 and dS = 0: only the ancestors' dF collect a share.
#ifndef CHAINFD_ID_DERIV_H
#define CHAINFD_ID_DERIV_H

#include "cfd_math.h"
#include "chain.h"
#include "joints.h"

// Per-link world quantities (cfd_idd_forward): S, I (6x6), V, A, I V, the subtree's wrench F,
// the world pose R, p
enum { CFD_IDD_S = 0, CFD_IDD_I = 6, CFD_IDD_V = 42, CFD_IDD_A = 48, CFD_IDD_IV = 54, CFD_IDD_F = 60,
       CFD_IDD_R = 66, CFD_IDD_P = 75, CFD_IDD_LINK = 78 };
// Per-link tangent scratch of one direction: dS, dV, dA, dF
enum { CFD_IDD_TAN = 24 };

// World-frame kinematics and inverse dynamics at (q, qd, qdd) into w (n x CFD_IDD_LINK); tau
// (may be NULL) = ID(q, qd, qdd) without armature, as cfd_id_cpu. Hinges and slides only.
CFD_HD void cfd_idd_forward(const cfd_chain* c, const double* q, const double* qd, const double* qdd,
                            double* w, double* tau) {
  int n = c->n;
  for (int i = 0; i < n; i++) {
    double* L = w + CFD_IDD_LINK * i;
    int par = c->parent[i];
    double Rl[9], pl[3];
    cfd_link_pose(c, i, q, 1, Rl, pl);
    if (par < 0) {
      for (int k = 0; k < 9; k++) L[CFD_IDD_R + k] = Rl[k];
      for (int k = 0; k < 3; k++) L[CFD_IDD_P + k] = pl[k];
    } else {
      const double* P = w + CFD_IDD_LINK * par;
      cfd_se3_mul(P + CFD_IDD_R, P + CFD_IDD_P, Rl, pl, L + CFD_IDD_R, L + CFD_IDD_P);
    }
    const double* R = L + CFD_IDD_R;
    const double* p = L + CFD_IDD_P;
    const double* s = c->screw + 6 * i;
    double* S = L + CFD_IDD_S;  // Ad_T s = [R w; p x R w + R v]
    double t[3];
    cfd_rot(R, s, S);
    cfd_rot(R, s + 3, S + 3);
    cfd_cross(p, S, t);
    S[3] += t[0]; S[4] += t[1]; S[5] += t[2];
    cfd_inertia_to_parent(R, p, c->inertia + 36 * i, L + CFD_IDD_I);
    const double* Vp = par < 0 ? NULL : w + CFD_IDD_LINK * par + CFD_IDD_V;
    const double* Ap = par < 0 ? NULL : w + CFD_IDD_LINK * par + CFD_IDD_A;
    double a0[6] = {0, 0, 0, -c->gravity[0], -c->gravity[1], -c->gravity[2]}, c6[6];
    double qdd_i = qdd ? qdd[i] : 0;
    for (int k = 0; k < 6; k++) L[CFD_IDD_V + k] = (Vp ? Vp[k] : 0) + S[k] * qd[i];
    cfd_ad(L + CFD_IDD_V, S, c6);
    for (int k = 0; k < 6; k++)
      L[CFD_IDD_A + k] = (Ap ? Ap[k] : a0[k]) + S[k] * qdd_i + c6[k] * qd[i];
    double IA[6], g[6];
    cfd_mat6_vec(L + CFD_IDD_I, L + CFD_IDD_V, L + CFD_IDD_IV);
    cfd_mat6_vec(L + CFD_IDD_I, L + CFD_IDD_A, IA);
    cfd_neg_adstar(L + CFD_IDD_V, L + CFD_IDD_IV, g);
    for (int k = 0; k < 6; k++) L[CFD_IDD_F + k] = IA[k] + g[k];
  }
  for (int i = n - 1; i >= 0; i--) {
    double* L = w + CFD_IDD_LINK * i;
    if (tau) tau[i] = cfd_dot6(L + CFD_IDD_S, L + CFD_IDD_F);
    int par = c->parent[i];
    if (par >= 0)
      for (int k = 0; k < 6; k++) w[CFD_IDD_LINK * par + CFD_IDD_F + k] += L[CFD_IDD_F + k];
  }
}

// The mass matrix without armature by composite rigid bodies from w (cfd_idd_forward's), into M
// (n x n, row-major, full); Ic: n x 36 scratch
CFD_HD void cfd_idd_mass(const cfd_chain* c, const double* w, double* Ic, double* M) {
  int n = c->n;
  for (int i = 0; i < n * 36; i++) Ic[i] = w[CFD_IDD_LINK * (i / 36) + CFD_IDD_I + i % 36];
  for (int i = n - 1; i >= 0; i--) {
    int par = c->parent[i];
    if (par >= 0)
      for (int k = 0; k < 36; k++) Ic[36 * par + k] += Ic[36 * i + k];
  }
  for (int i = 0; i < n * n; i++) M[i] = 0;
  for (int j = 0; j < n; j++) {
    double Fj[6];
    cfd_mat6_vec(Ic + 36 * j, w + CFD_IDD_LINK * j + CFD_IDD_S, Fj);
    for (int i = j; i >= 0; i = c->parent[i]) {
      double mij = cfd_dot6(w + CFD_IDD_LINK * i + CFD_IDD_S, Fj);
      M[n * i + j] = M[n * j + i] = mij;
    }
  }
}

// d tau / d q_j (vel 0) or d tau / d qd_j (vel 1) at the point of w, into dtau (n); t: n x
// CFD_IDD_TAN scratch, sub: n ints (the subtree of j)
CFD_HD void cfd_idd_direction(const cfd_chain* c, const double* qd, const double* qdd,
                              const double* w, int j, int vel, double* t, int* sub,
                              double* dtau) {
  int n = c->n;
  const double* Sj = w + CFD_IDD_LINK * j + CFD_IDD_S;
  for (int i = 0; i < n; i++) {
    sub[i] = i == j || (i > j && c->parent[i] >= 0 && sub[c->parent[i]]);
    double* T = t + CFD_IDD_TAN * i;
    for (int k = 0; k < CFD_IDD_TAN; k++) T[k] = 0;
  }
  for (int i = j; i < n; i++) {
    if (!sub[i]) continue;
    const double* L = w + CFD_IDD_LINK * i;
    double* T = t + CFD_IDD_TAN * i;
    double *dS = T, *dV = T + 6, *dA = T + 12, *df = T + 18;
    int par = c->parent[i];
    const double* dVp = i != j ? t + CFD_IDD_TAN * par + 6 : NULL;  // (j's parent: no tangent)
    const double* dAp = i != j ? t + CFD_IDD_TAN * par + 12 : NULL;
    const double *S = L + CFD_IDD_S, *I = L + CFD_IDD_I, *V = L + CFD_IDD_V, *A = L + CFD_IDD_A;
    double x[6], y[6], u[6], z[6];
    if (!vel && i != j) cfd_ad(Sj, S, dS);
    for (int k = 0; k < 6; k++) dV[k] = (dVp ? dVp[k] : 0) + (vel ? (i == j ? S[k] : 0) : dS[k] * qd[i]);
    // dA = dA_p + dS qdd + (ad_dV S + ad_V dS) qd (+ ad_V S at i = j for qd_j)
    cfd_ad(dV, S, x);
    cfd_ad(V, dS, y);
    for (int k = 0; k < 6; k++) dA[k] = (dAp ? dAp[k] : 0) + dS[k] * qdd[i] + (x[k] + y[k]) * qd[i];
    if (vel && i == j) {
      cfd_ad(V, S, x);
      for (int k = 0; k < 6; k++) dA[k] += x[k];
    }
    // df = I (dA - ad_Sj A) + Sj x* (I A) + dV x* (I V) + V x* (I (dV - ad_Sj V) + Sj x* (I V)),
    // the ad_Sj and Sj x* terms only for q_j (dI)
    for (int k = 0; k < 6; k++) x[k] = dA[k], y[k] = dV[k];
    if (!vel) {
      cfd_ad(Sj, A, u);
      cfd_ad(Sj, V, z);
      for (int k = 0; k < 6; k++) x[k] -= u[k], y[k] -= z[k];
    }
    cfd_mat6_vec(I, x, df);
    cfd_mat6_vec(I, y, u);  // I (dV - ad_Sj V)
    if (!vel) {
      double IA[6];
      cfd_mat6_vec(I, A, IA);
      cfd_neg_adstar(Sj, IA, x);
      cfd_neg_adstar(Sj, L + CFD_IDD_IV, z);
      for (int k = 0; k < 6; k++) df[k] += x[k], u[k] += z[k];
    }
    cfd_neg_adstar(dV, L + CFD_IDD_IV, x);
    cfd_neg_adstar(V, u, z);
    for (int k = 0; k < 6; k++) df[k] += x[k] + z[k];
  }
  for (int i = n - 1; i >= 0; i--) {  // dF (in df's place) and dtau
    double* T = t + CFD_IDD_TAN * i;
    const double* L = w + CFD_IDD_LINK * i;
    dtau[i] = cfd_dot6(L + CFD_IDD_S, T + 18) + (sub[i] ? cfd_dot6(T, L + CFD_IDD_F) : 0);
    int par = c->parent[i];
    if (par >= 0)
      for (int k = 0; k < 6; k++) t[CFD_IDD_TAN * par + 18 + k] += T[18 + k];
  }
}

#endif  // CHAINFD_ID_DERIV_H
