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

// One instance's scratch (doubles) for n links in p subsystems: the links, the tree's nodes
// (p + ceil(p / 2) + ... < 2p + its levels), a leaf's scratch per subsystem
CFD_HD size_t cfd_dca_doubles(int n, int p) {
  return (size_t)n * CFD_DCA_LINK + (2 * (size_t)p + CFD_DCA_MAX_LEVELS) * CFD_DCA_NODE +
         (size_t)p * CFD_DCA_SCRATCH;
}

// The root's acceleration input: the base's (-g, the world frame) carried into link 0's frame
// (its pose at L0)
CFD_HD void cfd_dca_base_input(const cfd_chain* c, const double* L0, double* A) {
  double base[6] = {0, 0, 0, -c->gravity[0], -c->gravity[1], -c->gravity[2]};
  cfd_twist_to_child(L0 + DCA_R, L0 + DCA_P, base, A);
}

#endif  // CHAINFD_DCA_H
