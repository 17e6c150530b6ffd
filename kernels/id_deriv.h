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
// Turning q_j rotates the subtree of j (j and its descendants) about S_j and nothing else:
//   dS_i = ad_{S_j} S_i,   dI_i X = S_j x* (I_i X) - I_i ad_{S_j} X,   dV_i = ad_{S_j} (V_i - V_p)
// (p = j's parent), and qd_j enters the subtree's V as S_j. Carried through the recursions with
// the identities ad_{ad_X Y} = [ad_X, ad_Y] and (ad_X Y) . F = -Y . (X x* F), the subtree's wrench
// and each joint force come out in terms of sums over subtrees (O(n) to form) and six-vectors of
// j (O(1) each):
//   u = ad_{S_j} V_p,   w = ad_{S_j} A_p - ad_u V_p
//   per link i, over its subtree: Ic_i = sum I, h_i = sum I V, B_i = sum (I ad_V - V x* I),
//   P_i = Ic_i S_i,   Q_i = B_i^T S_i + S_i x* h_i
//   i in the subtree of j:       d tau_i / d q_j  = Q_i . u - P_i . w
//                                d tau_i / d qd_j = -Q_i . S_j - 2 P_i . u
//   i an ancestor of j:          d tau_i / d q_j  = S_i . (S_j x* F_j - Ic_j w + B_j u - u x* h_j)
//                                d tau_i / d qd_j = S_i . (-B_j S_j - 2 Ic_j u + S_j x* h_j)
// (F_j: the subtree's wrench.) So each entry is one or two six-vector products: the O(n^2) of
// the two n x n blocks has the constant of a dot product, and the O(n) part one 6x6 product per
// link. (The derivation, step by step: docs/DESIGN.md 4.18. Paper 003's Algorithm 2 propagates
// the same derivatives a column at a time, as a tangent pass per direction did here first;
// the comparison: bench/results/LOG.md.)
#ifndef CHAINFD_ID_DERIV_H
#define CHAINFD_ID_DERIV_H

#include "cfd_math.h"
#include "chain.h"
#include "joints.h"

// Per-link world quantities (cfd_idd_forward): S, I (6x6), V, A, I V, the subtree's wrench F,
// the world pose R, p
enum { CFD_IDD_S = 0, CFD_IDD_I = 6, CFD_IDD_V = 42, CFD_IDD_A = 48, CFD_IDD_IV = 54, CFD_IDD_F = 60,
       CFD_IDD_R = 66, CFD_IDD_P = 75, CFD_IDD_LINK = 78 };

// A link's spatial inertia J (about its origin, in its frame) in the world frame at pose (R, p):
// its mass, centre of mass and rotational inertia about that centre read from J, moved, and put
// back together (cfd_spatial_inertia): the result of cfd_inertia_to_parent at a tenth of its
// multiplications
CFD_HD void cfd_idd_world_inertia(const double J[36], const double R[9], const double p[3],
                                  double out[36]) {
  double m = J[35], c[3] = {0, 0, 0}, Io[9], RI[9], Icw[9], cw[3];
  if (m > 0) c[0] = -J[11] / m, c[1] = J[5] / m, c[2] = -J[4] / m;  // J's m c^ block
  for (int r = 0; r < 3; r++)  // about the centre: Io - m c^ c^T = Io + m c^ c^
    for (int k = 0; k < 3; k++)
      Io[3 * r + k] = J[6 * r + k] + m * ((r == k ? -(c[0] * c[0] + c[1] * c[1] + c[2] * c[2]) : 0) + c[r] * c[k]);
  cfd_mat3_mul(R, Io, RI);
  for (int r = 0; r < 3; r++)  // R Io R^T
    for (int k = 0; k < 3; k++)
      Icw[3 * r + k] = RI[3 * r] * R[3 * k] + RI[3 * r + 1] * R[3 * k + 1] + RI[3 * r + 2] * R[3 * k + 2];
  cfd_rot(R, c, cw);
  cw[0] += p[0]; cw[1] += p[1]; cw[2] += p[2];
  cfd_spatial_inertia(m, cw, Icw, out);
}

// The stages below are written per link (or per entry) with the recursions' dependent sums apart,
// so that the CPU runs each as a loop and a GPU warp spreads the links over its lanes: the per-link
// work in parallel, the sums along the tree (parent[i] < i) per component.

// Link i's pose in its parent's frame (the world's for a root), R then p, into its A and I V slots
// (free until the momenta and accelerations; cfd_idd_compose reads it from there)
CFD_HD void cfd_idd_local_pose(const cfd_chain* c, int i, const double* q, double* w) {
  double* L = w + CFD_IDD_LINK * i;
  cfd_link_pose(c, i, q, 1, L + CFD_IDD_A, L + CFD_IDD_A + 9);
}

// Entry r (0-8: R row-major, 9-11: p) of link i's world pose, from its local pose and its parent's
// world pose (in tree order): R = R_p R_l, p = R_p p_l + p_p
CFD_HD void cfd_idd_compose_entry(const cfd_chain* c, int i, int r, double* w) {
  double* L = w + CFD_IDD_LINK * i;
  const double* loc = L + CFD_IDD_A;
  int par = c->parent[i];
  if (par < 0) {
    L[CFD_IDD_R + r] = loc[r];  // (R and P are adjacent)
    return;
  }
  const double* P = w + CFD_IDD_LINK * par;
  const double *Rp = P + CFD_IDD_R, *pp = P + CFD_IDD_P;
  if (r < 9) {
    int a = r / 3, b = r % 3;
    L[CFD_IDD_R + r] = Rp[3 * a] * loc[b] + Rp[3 * a + 1] * loc[3 + b] + Rp[3 * a + 2] * loc[6 + b];
  } else {
    int a = r - 9;
    L[CFD_IDD_P + a] = Rp[3 * a] * loc[9] + Rp[3 * a + 1] * loc[10] + Rp[3 * a + 2] * loc[11] + pp[a];
  }
}

// Link i's world pose (all twelve entries)
CFD_HD void cfd_idd_compose(const cfd_chain* c, int i, double* w) {
  for (int r = 0; r < 12; r++) cfd_idd_compose_entry(c, i, r, w);
}

// Link i's S = Ad_T s = [R w; p x R w + R v] and world inertia from its world pose, and its own
// velocity term S qd_i into V (the parents' added by cfd_idd_tree_sum)
CFD_HD void cfd_idd_link_world(const cfd_chain* c, int i, const double* qd, double* w) {
  double* L = w + CFD_IDD_LINK * i;
  const double* R = L + CFD_IDD_R;
  const double* p = L + CFD_IDD_P;
  const double* s = c->screw + 6 * i;
  double* S = L + CFD_IDD_S;
  double t[3];
  cfd_rot(R, s, S);
  cfd_rot(R, s + 3, S + 3);
  cfd_cross(p, S, t);
  S[3] += t[0]; S[4] += t[1]; S[5] += t[2];
  cfd_idd_world_inertia(c->inertia + 36 * i, R, p, L + CFD_IDD_I);
  for (int k = 0; k < 6; k++) L[CFD_IDD_V + k] = S[k] * qd[i];
}

// Components [k0, k1) of a per-link six-vector at `off` summed down the tree from the roots:
// x_i += x_parent, a root's += root (NULL: 0). In tree order, so each link adds its parent's
// finished sum. (The CPU takes all six at once, a GPU lane one.)
CFD_HD void cfd_idd_tree_sum(const cfd_chain* c, double* w, int off, int k0, int k1,
                             const double* root) {
  for (int i = 0; i < c->n; i++) {
    int par = c->parent[i];
    double* x = w + CFD_IDD_LINK * i + off;
    if (par >= 0)
      for (int k = k0; k < k1; k++) x[k] += w[CFD_IDD_LINK * par + off + k];
    else if (root)
      for (int k = k0; k < k1; k++) x[k] += root[k];
  }
}

// Components [k0, k1) of a per-link field at `off` (stride `stride`) summed up the tree to the
// roots: x_parent += x_i, in reverse order, so each link passes on its finished subtree sum
CFD_HD void cfd_idd_subtree_sum(const cfd_chain* c, double* x, int stride, int off, int k0, int k1) {
  for (int i = c->n - 1; i >= 0; i--) {
    int par = c->parent[i];
    if (par >= 0)
      for (int k = k0; k < k1; k++) x[stride * par + off + k] += x[stride * i + off + k];
  }
}

// Link i's I V (after V's tree sum)
CFD_HD void cfd_idd_link_momentum(int i, double* w) {
  double* L = w + CFD_IDD_LINK * i;
  cfd_mat6_vec(L + CFD_IDD_I, L + CFD_IDD_V, L + CFD_IDD_IV);
}

// Link i's own acceleration term S qdd_i + ad_Vb S qd_i into A (qdd NULL: zero; the parents' are
// added by cfd_idd_tree_sum from the world's [0; -g]). Vb is V_i, except inside a ball, whose
// three dofs all move against the velocity before it (joints.h): V_i less the ball's S qd so far
// (the ball's links' S set).
CFD_HD void cfd_idd_link_acc(const cfd_chain* c, int i, const double* qd, const double* qdd, double* w) {
  double* L = w + CFD_IDD_LINK * i;
  const double* S = L + CFD_IDD_S;
  double c6[6], qdd_i = qdd ? qdd[i] : 0;
  if (c->kind[i] == CFD_LINK_BALL_NEXT) {
    double Vb[6];
    for (int k = 0; k < 6; k++) Vb[k] = L[CFD_IDD_V + k];
    for (int m = i;; m--) {
      for (int k = 0; k < 6; k++) Vb[k] -= w[CFD_IDD_LINK * m + CFD_IDD_S + k] * qd[m];
      if (c->kind[m] == CFD_LINK_BALL) break;
    }
    cfd_ad(Vb, S, c6);
  } else {
    cfd_ad(L + CFD_IDD_V, S, c6);
  }
  for (int k = 0; k < 6; k++) L[CFD_IDD_A + k] = S[k] * qdd_i + c6[k] * qd[i];
}

// Link i's own wrench I A + V x* (I V) into F (after A's tree sum; the subtree's by
// cfd_idd_subtree_sum)
CFD_HD void cfd_idd_link_wrench(int i, double* w) {
  double* L = w + CFD_IDD_LINK * i;
  double IA[6], g[6];
  cfd_mat6_vec(L + CFD_IDD_I, L + CFD_IDD_A, IA);
  cfd_neg_adstar(L + CFD_IDD_V, L + CFD_IDD_IV, g);
  for (int k = 0; k < 6; k++) L[CFD_IDD_F + k] = IA[k] + g[k];
}

// The world's acceleration: [0; -g]
CFD_HD void cfd_idd_a0(const cfd_chain* c, double a0[6]) {
  a0[0] = a0[1] = a0[2] = 0;
  for (int k = 0; k < 3; k++) a0[3 + k] = -c->gravity[k];
}

// The accelerations and wrenches of w (its S, I, V and I V set by cfd_idd_forward) at qdd (NULL:
// zero), and tau (may be NULL)
CFD_HD void cfd_idd_accel(const cfd_chain* c, const double* qd, const double* qdd, double* w,
                          double* tau) {
  int n = c->n;
  double a0[6];
  cfd_idd_a0(c, a0);
  for (int i = 0; i < n; i++) cfd_idd_link_acc(c, i, qd, qdd, w);
  cfd_idd_tree_sum(c, w, CFD_IDD_A, 0, 6, a0);
  for (int i = 0; i < n; i++) cfd_idd_link_wrench(i, w);
  cfd_idd_subtree_sum(c, w, CFD_IDD_LINK, CFD_IDD_F, 0, 6);
  for (int i = 0; tau && i < n; i++)
    tau[i] = cfd_dot6(w + CFD_IDD_LINK * i + CFD_IDD_S, w + CFD_IDD_LINK * i + CFD_IDD_F);
}

// World-frame kinematics and inverse dynamics at (q, qd, qdd) into w (n x CFD_IDD_LINK); tau
// (may be NULL) = ID(q, qd, qdd) without armature, as cfd_id_cpu. Hinges and slides only.
CFD_HD void cfd_idd_forward(const cfd_chain* c, const double* q, const double* qd, const double* qdd,
                            double* w, double* tau) {
  int n = c->n;
  for (int i = 0; i < n; i++) {
    cfd_idd_local_pose(c, i, q, w);
    cfd_idd_compose(c, i, w);
  }
  for (int i = 0; i < n; i++) cfd_idd_link_world(c, i, qd, w);
  cfd_idd_tree_sum(c, w, CFD_IDD_V, 0, 6, NULL);
  for (int i = 0; i < n; i++) cfd_idd_link_momentum(i, w);
  cfd_idd_accel(c, qd, qdd, w, tau);
}

// Per-link subtree sums (cfd_idd_composites): Ic (6x6), h, B (6x6), P, Q; the first
// CFD_IDD_PV are summed over the subtree
enum { CFD_IDD_IC = 0, CFD_IDD_H = 36, CFD_IDD_B = 42, CFD_IDD_PV = 78, CFD_IDD_QV = 84,
       CFD_IDD_COMP = 90 };

// Link i's own terms of the sums: I, I V and I ad_V - V x* I
CFD_HD void cfd_idd_comp_link(int i, const double* w, double* cw) {
  const double* L = w + CFD_IDD_LINK * i;
  double* C = cw + CFD_IDD_COMP * i;
  const double *I = L + CFD_IDD_I, *V = L + CFD_IDD_V;
  for (int k = 0; k < 36; k++) C[CFD_IDD_IC + k] = I[k];
  for (int k = 0; k < 6; k++) C[CFD_IDD_H + k] = L[CFD_IDD_IV + k];
  // I ad_V - V x* I = X + X^T with X = I ad_V (V x* = -ad_V^T, I symmetric): X's columns are I
  // times ad_V's, [w x e_k; v x e_k] (k < 3) and [0; w x e_k]
  double X[36];
  const double *w3 = V, *v3 = V + 3;
  for (int k = 0; k < 3; k++) {
    int k1 = (k + 1) % 3, k2 = (k + 2) % 3;  // e_k x: a x e_k = a[k2] e_k1 - a[k1] e_k2
    for (int r = 0; r < 6; r++) {
      const double* Ir = I + 6 * r;
      X[6 * r + k] = Ir[k1] * w3[k2] - Ir[k2] * w3[k1] + Ir[3 + k1] * v3[k2] - Ir[3 + k2] * v3[k1];
      X[6 * r + 3 + k] = Ir[3 + k1] * w3[k2] - Ir[3 + k2] * w3[k1];
    }
  }
  for (int r = 0; r < 6; r++)
    for (int k = 0; k < 6; k++) C[CFD_IDD_B + 6 * r + k] = X[6 * r + k] + X[6 * k + r];
}

// Link i's P = Ic S and Q = B^T S + S x* h (B is symmetric), after the subtree sums
CFD_HD void cfd_idd_comp_pq(int i, const double* w, double* cw) {
  double* C = cw + CFD_IDD_COMP * i;
  const double* S = w + CFD_IDD_LINK * i + CFD_IDD_S;
  double t[6];
  cfd_mat6_vec(C + CFD_IDD_IC, S, C + CFD_IDD_PV);
  cfd_mat6_vec(C + CFD_IDD_B, S, C + CFD_IDD_QV);
  cfd_neg_adstar(S, C + CFD_IDD_H, t);
  for (int k = 0; k < 6; k++) C[CFD_IDD_QV + k] += t[k];
}

// The subtree sums of w (cfd_idd_forward's, at the acceleration the derivatives are taken at)
// into cw (n x CFD_IDD_COMP)
CFD_HD void cfd_idd_composites(const cfd_chain* c, const double* w, double* cw) {
  int n = c->n;
  for (int i = 0; i < n; i++) cfd_idd_comp_link(i, w, cw);
  cfd_idd_subtree_sum(c, cw, CFD_IDD_COMP, 0, 0, CFD_IDD_PV);
  for (int i = 0; i < n; i++) cfd_idd_comp_pq(i, w, cw);
}

// M_ij = S_i . Ic_j S_j for i an ancestor of j or j itself (CRB; without armature)
CFD_HD double cfd_idd_mass_entry(const double* w, const double* cw, int i, int j) {
  return cfd_dot6(w + CFD_IDD_LINK * i + CFD_IDD_S, cw + CFD_IDD_COMP * j + CFD_IDD_PV);
}

// The mass matrix without armature from the composites into M (n x n, row-major, full)
CFD_HD void cfd_idd_mass(const cfd_chain* c, const double* w, const double* cw, double* M) {
  int n = c->n;
  for (int i = 0; i < n * n; i++) M[i] = 0;
  for (int j = 0; j < n; j++)
    for (int i = j; i >= 0; i = c->parent[i]) M[n * i + j] = M[n * j + i] = cfd_idd_mass_entry(w, cw, i, j);
}

// The link whose parent is a dof's "parent" for the derivatives: j itself, or for a ball's dof the
// ball's first link. A ball's tangent dofs (MuJoCo's: the body turned in its own frame) each turn
// the whole body, the ball's three screws with it, about the current axis: the subtree of each is
// the ball's first link's, and the velocity before it is that link's parent's.
CFD_HD int cfd_idd_joint_first(const cfd_chain* c, int j) {
  while (c->kind[j] == CFD_LINK_BALL_NEXT) j--;
  return j;
}

// Column j's six-vectors (CFD_IDD_SEED doubles), scaled: u = ad_{S_j} V_p, w = ad_{S_j} A_p -
// ad_u V_p for the subtree's entries, the subtree wrench's derivatives Gq, Gv for the ancestors',
// and for a ball's dof z = ad_{S_j} (the ball's velocity S qd): d A / d qd_j on the body and
// below is ad_{S_j} V - 2u - z there (the ball's own dofs move against the velocity before it,
// so its other dofs add no ad_{S_j} S qd), z = 0 for hinges and slides
enum { CFD_IDD_SU = 0, CFD_IDD_SW = 6, CFD_IDD_GQ = 12, CFD_IDD_GV = 18, CFD_IDD_SZ = 24,
       CFD_IDD_SEED = 30 };

// Column j's seed, half `part`: 0, u, w and Gq; 1, u, z and Gv (a GPU takes the halves on two lanes)
CFD_HD void cfd_idd_seed_part(const cfd_chain* c, const double* w, const double* cw, int j,
                              double scale, int part, double* sd) {
  const double zero[6] = {0, 0, 0, 0, 0, 0};
  const double* L = w + CFD_IDD_LINK * j;
  const double* C = cw + CFD_IDD_COMP * j;
  const double* Sj = L + CFD_IDD_S;
  int g = c->kind[j] == CFD_LINK_SCREW ? j : cfd_idd_joint_first(c, j), par = c->parent[g];
  const double* Vp = par < 0 ? zero : w + CFD_IDD_LINK * par + CFD_IDD_V;
  double u[6], b[6], G[6], x[6], y[6];
  cfd_ad(Sj, Vp, u);
  if (part == 0) {
    double a0[6], wv[6];
    cfd_idd_a0(c, a0);
    const double* Ap = par < 0 ? a0 : w + CFD_IDD_LINK * par + CFD_IDD_A;
    cfd_ad(Sj, Ap, wv);
    cfd_ad(u, Vp, b);
    for (int k = 0; k < 6; k++) wv[k] -= b[k];
    cfd_neg_adstar(Sj, L + CFD_IDD_F, G);
    cfd_mat6_vec(C + CFD_IDD_IC, wv, x);
    cfd_mat6_vec(C + CFD_IDD_B, u, y);
    cfd_neg_adstar(u, C + CFD_IDD_H, b);
    for (int k = 0; k < 6; k++) {
      sd[CFD_IDD_SU + k] = scale * u[k];
      sd[CFD_IDD_SW + k] = scale * wv[k];
      sd[CFD_IDD_GQ + k] = scale * (G[k] - x[k] + y[k] - b[k]);
    }
  } else {
    double z[6] = {0, 0, 0, 0, 0, 0};
    cfd_mat6_vec(C + CFD_IDD_B, Sj, x);
    if (c->kind[j] != CFD_LINK_SCREW) {  // the ball's velocity: its last link's V less V_p
      double Vb[6];
      int last = g + 2;
      for (int k = 0; k < 6; k++) Vb[k] = w[CFD_IDD_LINK * last + CFD_IDD_V + k] - Vp[k];
      cfd_ad(Sj, Vb, z);
      for (int k = 0; k < 6; k++) b[k] = 2 * u[k] + z[k];
      cfd_mat6_vec(C + CFD_IDD_IC, b, y);
    } else {
      cfd_mat6_vec(C + CFD_IDD_IC, u, y);
      for (int k = 0; k < 6; k++) y[k] *= 2;
    }
    cfd_neg_adstar(Sj, C + CFD_IDD_H, b);
    for (int k = 0; k < 6; k++) {
      sd[CFD_IDD_GV + k] = scale * (-x[k] - y[k] + b[k]);
      sd[CFD_IDD_SZ + k] = scale * z[k];
    }
  }
}

CFD_HD void cfd_idd_seed(const cfd_chain* c, const double* w, const double* cw, int j, double scale,
                         double* sd) {
  cfd_idd_seed_part(c, w, cw, j, scale, 0, sd);
  cfd_idd_seed_part(c, w, cw, j, scale, 1, sd);
}

// Entry (i, j) of scale d tau / d q (*dq) and d tau / d qd (*dv) from column j's seed sd: i in
// j's subtree (`in_subtree`; for a ball's dof the ball's first link's, cfd_idd_joint_first) or an
// ancestor of it
CFD_HD void cfd_idd_entry(const double* w, const double* cw, const double* sd, double scale, int i,
                          int j, int in_subtree, double* dq, double* dv) {
  if (in_subtree) {
    const double* Ci = cw + CFD_IDD_COMP * i;
    *dq = cfd_dot6(Ci + CFD_IDD_QV, sd + CFD_IDD_SU) - cfd_dot6(Ci + CFD_IDD_PV, sd + CFD_IDD_SW);
    *dv = -scale * cfd_dot6(Ci + CFD_IDD_QV, w + CFD_IDD_LINK * j + CFD_IDD_S) -
          2 * cfd_dot6(Ci + CFD_IDD_PV, sd + CFD_IDD_SU) - cfd_dot6(Ci + CFD_IDD_PV, sd + CFD_IDD_SZ);
  } else {
    const double* Si = w + CFD_IDD_LINK * i + CFD_IDD_S;
    *dq = cfd_dot6(Si, sd + CFD_IDD_GQ);
    *dv = cfd_dot6(Si, sd + CFD_IDD_GV);
  }
}

// scale times d tau / d q into Dq and d tau / d qd into Dv (n x n, row-major, leading dimension
// ld; either may be NULL; [i][j] = d tau_i / d x_j) at the point of w and cw, the entries of
// neither a descendant nor an ancestor of j left as they are (zero them first); sub: n ints of
// scratch
CFD_HD void cfd_idd_jacobians(const cfd_chain* c, const double* w, const double* cw, double scale,
                              double* Dq, double* Dv, long ld, int* sub) {
  int n = c->n;
  for (int j = 0; j < n; j++) {
    double sd[CFD_IDD_SEED], eq, ev;
    int g = cfd_idd_joint_first(c, j);
    cfd_idd_seed(c, w, cw, j, scale, sd);
    for (int i = g; i < n; i++) {
      sub[i] = i == g || (c->parent[i] >= g && sub[c->parent[i]]);
      if (!sub[i]) continue;
      cfd_idd_entry(w, cw, sd, scale, i, j, 1, &eq, &ev);
      if (Dq) Dq[ld * i + j] = eq;
      if (Dv) Dv[ld * i + j] = ev;
    }
    for (int i = c->parent[g]; i >= 0; i = c->parent[i]) {
      cfd_idd_entry(w, cw, sd, scale, i, j, 0, &eq, &ev);
      if (Dq) Dq[ld * i + j] = eq;
      if (Dv) Dv[ld * i + j] = ev;
    }
  }
}

#endif  // CHAINFD_ID_DERIV_H
