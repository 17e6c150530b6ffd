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

// per link: pose R (9) p (3), V (6), c (6), U (6), w (6), 1/d, u0
enum { CFD_DCA_LINK = 40, DCA_R = 0, DCA_P = 9, DCA_V = 12, DCA_C = 18, DCA_U = 24, DCA_W = 30,
       DCA_DINV = 36, DCA_U0 = 37 };
// a subsystem's handle equations: P11, P12, P21, P22 (6x6 row-major), b1, b2
enum { CFD_DCA_HANDLE = 156, DCA_P11 = 0, DCA_P12 = 36, DCA_P21 = 72, DCA_P22 = 108, DCA_B1 = 144,
       DCA_B2 = 150 };
// an assembly's interface: x = Xa A_in + Xf f_out + xb, y = Ya A_in + Yf f_out + yb
enum { CFD_DCA_JOIN = 156, DCA_XA = 0, DCA_XF = 36, DCA_YA = 72, DCA_YF = 108, DCA_XB = 144,
       DCA_YB = 150 };
// a leaf's scratch: IA, P, G, H (6x6), pA, g (6)
enum { CFD_DCA_SCRATCH = 4 * 36 + 12 };

// The link's velocity element (aba_scan.h's layout: R, p, then the velocity the link adds)
CFD_HD void cfd_dca_link_fk(const cfd_chain* c, int i, const double* q, const double* qd,
                            double* L, double* fk) {
  cfd_link_pose(c, i, q, 1, L + DCA_R, L + DCA_P);
  for (int k = 0; k < 12; k++) fk[k] = L[k];
  for (int k = 0; k < 6; k++) fk[12 + k] = c->screw[6 * i + k] * qd[i];
}

// Links [a, e): their poses into L (CFD_DCA_LINK each, link a's at L) and their velocity map into
// fk: V_{e-1} = Ad V_{a-1} + w
CFD_HD void cfd_dca_velocity_map(const cfd_chain* c, int a, int e, const double* q,
                                 const double* qd, double* L, double* fk) {
  double t[18], u[18];
  cfd_dca_link_fk(c, a, q, qd, L, fk);
  for (int i = a + 1; i < e; i++) {
    cfd_dca_link_fk(c, i, q, qd, L + CFD_DCA_LINK * (i - a), t);
    cfd_abs_fk_compose(t, fk, u);
    for (int k = 0; k < 18; k++) fk[k] = u[k];
  }
}

// The velocity at the end of a map from the velocity before it
CFD_HD void cfd_dca_velocity_apply(const double* fk, const double* Vin, double* V) {
  cfd_twist_to_child(fk, fk + 9, Vin, V);
  for (int k = 0; k < 6; k++) V[k] += fk[12 + k];
}

// out = Ad_{f^-1} M column by column (M's twists moved from the parent to the child's frame);
// out may alias M
CFD_HD void cfd_dca_twists_to_child(const double* R, const double* p, const double* M, double* out) {
  for (int j = 0; j < 6; j++) {
    double col[6], t[6];
    for (int k = 0; k < 6; k++) col[k] = M[6 * k + j];
    cfd_twist_to_child(R, p, col, t);
    for (int k = 0; k < 6; k++) out[6 * k + j] = t[k];
  }
}

// out = Ad_{f^-1}^T M column by column (wrenches from the child to the parent's frame); may alias
CFD_HD void cfd_dca_wrenches_to_parent(const double* R, const double* p, const double* M,
                                       double* out) {
  for (int j = 0; j < 6; j++) {
    double col[6], t[6];
    for (int k = 0; k < 6; k++) col[k] = M[6 * k + j];
    cfd_wrench_to_parent(R, p, col, t);
    for (int k = 0; k < 6; k++) out[6 * k + j] = t[k];
  }
}

// Subsystem [a, e) with the velocity before it Vin (V_{a-1}): its links' velocities, velocity
// terms, U, 1/d, u0 and w into L (poses already there, from cfd_dca_velocity_map; link e's pose at
// L + CFD_DCA_LINK * (e - a) unless last), and its handle equations into h. `last`: no link
// follows (f_out = 0; P21, P22, b2 zero). s: CFD_DCA_SCRATCH doubles. Returns 0, or
// CFD_ERR_SINGULAR when a pivot d_i is not positive.
CFD_HD int cfd_dca_leaf(const cfd_chain* c, int a, int e, int last, const double* qd,
                        const double* tau, const double* extra_diag, const double* Vin, double* L,
                        double* h, double* s) {
  double *IA = s, *P = s + 36, *G = s + 72, *H = s + 108, *pA = s + 144, *g = s + 150;
  // velocities and velocity terms
  for (int i = a; i < e; i++) {
    double* Li = L + CFD_DCA_LINK * (i - a);
    const double* Vp = i == a ? Vin : Li - CFD_DCA_LINK + DCA_V;
    cfd_twist_to_child(Li + DCA_R, Li + DCA_P, Vp, Li + DCA_V);
    for (int k = 0; k < 6; k++) Li[DCA_V + k] += c->screw[6 * i + k] * qd[i];
    cfd_link_c_local(c, i, Li + DCA_V, qd, Li + DCA_C);
  }
  // inward: articulated inertia IA, bias pA and P = d pA / d f_out, each handed to the parent
  for (int i = e - 1; i >= a; i--) {
    double* Li = L + CFD_DCA_LINK * (i - a);
    const double* J = c->inertia + 36 * i;
    const double* S = c->screw + 6 * i;
    double JV[6], b[6];
    cfd_mat6_vec(J, Li + DCA_V, JV);
    cfd_neg_adstar(Li + DCA_V, JV, b);
    if (i == e - 1) {
      for (int k = 0; k < 36; k++) IA[k] = J[k];
      for (int k = 0; k < 6; k++) pA[k] = b[k];
      if (last) {
        for (int k = 0; k < 36; k++) P[k] = 0;
      } else {  // X_e^T: the force on link e, moved into link e-1's frame
        const double* Le = Li + CFD_DCA_LINK;
        for (int k = 0; k < 36; k++) P[k] = k % 7 == 0;
        cfd_dca_wrenches_to_parent(Le + DCA_R, Le + DCA_P, P, P);
      }
    } else {  // IA, pA, P of link i + 1 are its Ia, pa, Pa: into this frame
      const double* Ln = Li + CFD_DCA_LINK;
      double Ip[36], pp[6];
      cfd_inertia_to_parent(Ln + DCA_R, Ln + DCA_P, IA, Ip);
      cfd_wrench_to_parent(Ln + DCA_R, Ln + DCA_P, pA, pp);
      for (int k = 0; k < 36; k++) IA[k] = J[k] + Ip[k];
      for (int k = 0; k < 6; k++) pA[k] = b[k] + pp[k];
      cfd_dca_wrenches_to_parent(Ln + DCA_R, Ln + DCA_P, P, P);
    }
    double *U = Li + DCA_U, *w = Li + DCA_W;
    cfd_mat6_vec(IA, S, U);
    double d = cfd_dot6(S, U) + c->armature[i] + (extra_diag ? extra_diag[i] : 0);
    if (!(d > 0)) return CFD_ERR_SINGULAR;
    double dinv = 1 / d, u0 = tau[i] - cfd_dot6(S, pA);
    Li[DCA_DINV] = dinv, Li[DCA_U0] = u0;
    cfd_mat6T_vec(P, S, w);
    // Ia = IA - U U^T / d, pa = pA + Ia c + U u0 / d, Pa = P - U w^T / d
    for (int r = 0; r < 6; r++)
      for (int k = 0; k < 6; k++) {
        IA[6 * r + k] -= U[r] * U[k] * dinv;
        P[6 * r + k] -= U[r] * w[k] * dinv;
      }
    double Iac[6];
    cfd_mat6_vec(IA, Li + DCA_C, Iac);
    for (int k = 0; k < 6; k++) pA[k] += Iac[k] + U[k] * u0 * dinv;
  }
  for (int k = 0; k < 36; k++) h[DCA_P11 + k] = IA[k], h[DCA_P12 + k] = P[k];
  for (int k = 0; k < 6; k++) h[DCA_B1 + k] = pA[k];
  // outward, symbolic in (A_in, f_out): a_i = G A_in + H f_out + g
  for (int k = 0; k < 36; k++) G[k] = k % 7 == 0, H[k] = 0;
  for (int k = 0; k < 6; k++) g[k] = L[DCA_C + k];
  for (int i = a; i < e; i++) {
    const double* Li = L + CFD_DCA_LINK * (i - a);
    const double *S = c->screw + 6 * i, *U = Li + DCA_U, *w = Li + DCA_W;
    double dinv = Li[DCA_DINV], rG[6], rH[6];
    cfd_mat6T_vec(G, U, rG);
    cfd_mat6T_vec(H, U, rH);
    double rg = Li[DCA_U0] - cfd_dot6(U, g);
    for (int r = 0; r < 6; r++) {
      for (int k = 0; k < 6; k++) {
        G[6 * r + k] -= S[r] * rG[k] * dinv;
        H[6 * r + k] -= S[r] * (w[k] + rH[k]) * dinv;
      }
      g[r] += S[r] * rg * dinv;
    }
    if (i + 1 < e || !last) {  // into link i + 1's frame (the next subsystem's first, at e)
      const double* Ln = Li + CFD_DCA_LINK;
      double t[6];
      cfd_dca_twists_to_child(Ln + DCA_R, Ln + DCA_P, G, G);
      cfd_dca_twists_to_child(Ln + DCA_R, Ln + DCA_P, H, H);
      cfd_twist_to_child(Ln + DCA_R, Ln + DCA_P, g, t);
      for (int k = 0; k < 6; k++) g[k] = t[k] + (i + 1 < e ? Ln[DCA_C + k] : 0);
    }
  }
  for (int k = 0; k < 36; k++) h[DCA_P21 + k] = last ? 0 : G[k], h[DCA_P22 + k] = last ? 0 : H[k];
  for (int k = 0; k < 6; k++) h[DCA_B2 + k] = last ? 0 : g[k];
  return 0;
}

// A X = B in place for B of m columns (row-major, leading dimension ld): Gaussian elimination
// with partial pivoting on A (6x6, overwritten). Returns 0, or 1 when A is singular.
CFD_HD int cfd_dca_solve6(double* A, double* B, int m, int ld) {
  for (int j = 0; j < 6; j++) {
    int piv = j;
    for (int r = j + 1; r < 6; r++)
      if (fabs(A[6 * r + j]) > fabs(A[6 * piv + j])) piv = r;
    if (!(fabs(A[6 * piv + j]) > 0)) return 1;
    if (piv != j) {
      for (int k = 0; k < 6; k++) {
        double t = A[6 * j + k];
        A[6 * j + k] = A[6 * piv + k], A[6 * piv + k] = t;
      }
      for (int k = 0; k < m; k++) {
        double t = B[ld * j + k];
        B[ld * j + k] = B[ld * piv + k], B[ld * piv + k] = t;
      }
    }
    double inv = 1 / A[7 * j];
    for (int r = j + 1; r < 6; r++) {
      double f = A[6 * r + j] * inv;
      for (int k = j + 1; k < 6; k++) A[6 * r + k] -= f * A[6 * j + k];
      for (int k = 0; k < m; k++) B[ld * r + k] -= f * B[ld * j + k];
    }
  }
  for (int j = 5; j >= 0; j--) {
    double inv = 1 / A[7 * j];
    for (int k = 0; k < m; k++) {
      double v = B[ld * j + k];
      for (int r = j + 1; r < 6; r++) v -= A[6 * j + r] * B[ld * r + k];
      B[ld * j + k] = v * inv;
    }
  }
  return 0;
}

// out = A B + C (6x6; C may be NULL; out may not alias A or B)
CFD_HD void cfd_dca_mul_add(const double* CFD_RESTRICT A, const double* CFD_RESTRICT B,
                            const double* C, double* CFD_RESTRICT out) {
  cfd_mat6_mul(A, 0, B, 0, out);
  if (C)
    for (int k = 0; k < 36; k++) out[k] += C[k];
}

// Subsystems l (the parent side) and r joined: the interface's equations into j and the
// assembled subsystem's handle equations into h (may not alias l or r). Returns 0, or 1 when
// 1 - P22^l P11^r is singular (it is not for physical inertias: its eigenvalues are >= 1).
CFD_HD int cfd_dca_assemble(const double* CFD_RESTRICT l, const double* CFD_RESTRICT r,
                            double* CFD_RESTRICT j, double* CFD_RESTRICT h) {
  double W[36], R[6 * 13], t[36];
  cfd_mat6_mul(l + DCA_P22, 0, r + DCA_P11, 0, W);
  for (int k = 0; k < 36; k++) W[k] = (k % 7 == 0) - W[k];
  cfd_mat6_mul(l + DCA_P22, 0, r + DCA_P12, 0, t);
  double v[6];
  cfd_mat6_vec(l + DCA_P22, r + DCA_B1, v);
  for (int row = 0; row < 6; row++) {  // [P21^l | P22^l P12^r | P22^l b1^r + b2^l]
    for (int k = 0; k < 6; k++) R[13 * row + k] = l[DCA_P21 + 6 * row + k];
    for (int k = 0; k < 6; k++) R[13 * row + 6 + k] = t[6 * row + k];
    R[13 * row + 12] = v[row] + l[DCA_B2 + row];
  }
  if (cfd_dca_solve6(W, R, 13, 13)) return 1;
  for (int row = 0; row < 6; row++) {
    for (int k = 0; k < 6; k++) j[DCA_XA + 6 * row + k] = R[13 * row + k];
    for (int k = 0; k < 6; k++) j[DCA_XF + 6 * row + k] = R[13 * row + 6 + k];
    j[DCA_XB + row] = R[13 * row + 12];
  }
  cfd_dca_mul_add(r + DCA_P11, j + DCA_XA, NULL, j + DCA_YA);
  cfd_dca_mul_add(r + DCA_P11, j + DCA_XF, r + DCA_P12, j + DCA_YF);
  cfd_mat6_vec(r + DCA_P11, j + DCA_XB, v);
  for (int k = 0; k < 6; k++) j[DCA_YB + k] = v[k] + r[DCA_B1 + k];
  cfd_dca_mul_add(l + DCA_P12, j + DCA_YA, l + DCA_P11, h + DCA_P11);
  cfd_dca_mul_add(l + DCA_P12, j + DCA_YF, NULL, h + DCA_P12);
  cfd_dca_mul_add(r + DCA_P21, j + DCA_XA, NULL, h + DCA_P21);
  cfd_dca_mul_add(r + DCA_P21, j + DCA_XF, r + DCA_P22, h + DCA_P22);
  cfd_mat6_vec(l + DCA_P12, j + DCA_YB, v);
  for (int k = 0; k < 6; k++) h[DCA_B1 + k] = l[DCA_B1 + k] + v[k];
  cfd_mat6_vec(r + DCA_P21, j + DCA_XB, v);
  for (int k = 0; k < 6; k++) h[DCA_B2 + k] = r[DCA_B2 + k] + v[k];
  return 0;
}

// The interface of a join from the assembled subsystem's inputs: x (the right part's A_in) and
// y (the left part's f_out)
CFD_HD void cfd_dca_disassemble(const double* j, const double* A, const double* f, double* x,
                                double* y) {
  double t[6], u[6];
  cfd_mat6_vec(j + DCA_XA, A, t);
  cfd_mat6_vec(j + DCA_XF, f, u);
  for (int k = 0; k < 6; k++) x[k] = t[k] + u[k] + j[DCA_XB + k];
  cfd_mat6_vec(j + DCA_YA, A, t);
  cfd_mat6_vec(j + DCA_YF, f, u);
  for (int k = 0; k < 6; k++) y[k] = t[k] + u[k] + j[DCA_YB + k];
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

// The root's acceleration input: the base's (-g, the world frame) carried into link 0's frame
// (its pose at L0)
CFD_HD void cfd_dca_base_input(const cfd_chain* c, const double* L0, double* A) {
  double base[6] = {0, 0, 0, -c->gravity[0], -c->gravity[1], -c->gravity[2]};
  cfd_twist_to_child(L0 + DCA_R, L0 + DCA_P, base, A);
}

#endif  // CHAINFD_DCA_H
