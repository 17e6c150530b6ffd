// aba_core.h: the articulated-body algorithm with structured spatial algebra, one state, written
// once for the CPU fast path (cpu/fast_cpu.c) and the GPU batch kernel (cuda/abia.cu).
//
// Same sweeps as cpu/abia_cpu.c. An inertia is three 3x3 blocks [[A, B], [B^T, C]] and moves to
// the parent frame in closed form, X^T I X with X = Ad_{T^-1}, T = (R, p):
//   A' = R A R^T, B' = R B R^T, C' = R C R^T                  (rotate)
//   [[A' + p^B'^T - B'p^ - p^C'p^,  B' + p^C'], [., C']]       (shift the reference point by p)
// The articulated inertia and bias force are running values (only the parent's is ever needed);
// per link the sweeps keep V_i, U_i, d_i, u_i and (except in lean mode) the pose, c_i and bias.
// Per-link scratch entries are `stride` apart, so a GPU can interleave the instances of a batch
// (entry k of instance b at work[k * stride + b]) and read them coalesced; the CPU uses stride 1.
#ifndef CHAINFD_ABA_CORE_H
#define CHAINFD_ABA_CORE_H

#include "cfd_math.h"
#include "chain.h"

enum { CFD_ABA_LINK_DOUBLES = 38 };

typedef struct {
  double A[9], B[9], C[9];
} cfd_inertia3;

// out = R X R^T (3x3)
CFD_HD void cfd_rotate3(const double R[9], const double X[9], double out[9]) {
  double T[9];
  for (int r = 0; r < 3; r++)
    for (int c = 0; c < 3; c++)
      T[3 * r + c] = X[3 * r] * R[3 * c] + X[3 * r + 1] * R[3 * c + 1] + X[3 * r + 2] * R[3 * c + 2];
  cfd_mat3_mul(R, T, out);
}

// out = R X R^T for symmetric X: only the upper triangle is computed
CFD_HD void cfd_rotate3_sym(const double R[9], const double X[9], double out[9]) {
  double T[9];  // T = X R^T
  for (int r = 0; r < 3; r++)
    for (int c = 0; c < 3; c++)
      T[3 * r + c] = X[3 * r] * R[3 * c] + X[3 * r + 1] * R[3 * c + 1] + X[3 * r + 2] * R[3 * c + 2];
  for (int r = 0; r < 3; r++)
    for (int c = r; c < 3; c++)
      out[3 * r + c] = out[3 * c + r] = R[3 * r] * T[c] + R[3 * r + 1] * T[3 + c] + R[3 * r + 2] * T[6 + c];
}

// out = p^ X (3x3): each column of X crossed with p
CFD_HD void cfd_hat_mul(const double p[3], const double X[9], double out[9]) {
  for (int c = 0; c < 3; c++) {
    double col[3] = {X[c], X[3 + c], X[6 + c]}, t[3];
    cfd_cross(p, col, t);
    out[c] = t[0]; out[3 + c] = t[1]; out[6 + c] = t[2];
  }
}

// parent = J_parent + X^T I X, with I in the child frame and (R, p) the child's pose.
CFD_HD void cfd_inertia3_to_parent(const double R[9], const double p[3], const cfd_inertia3* I,
                                   const double Jp[36], cfd_inertia3* parent) {
  double A[9], B[9], C[9], pC[9], pB[9], pCp[9];
  cfd_rotate3_sym(R, I->A, A);
  cfd_rotate3(R, I->B, B);
  cfd_rotate3_sym(R, I->C, C);
  cfd_hat_mul(p, C, pC);  // p^ C'
  double Bt[9] = {B[0], B[3], B[6], B[1], B[4], B[7], B[2], B[5], B[8]};
  cfd_hat_mul(p, Bt, pB);  // p^ B'^T
  // C' is symmetric, so (p^ C')^T = -C' p^ and p^ (p^ C')^T = -p^ C' p^
  double pCt[9] = {pC[0], pC[3], pC[6], pC[1], pC[4], pC[7], pC[2], pC[5], pC[8]};
  cfd_hat_mul(p, pCt, pCp);
  for (int r = 0; r < 3; r++)
    for (int c = 0; c < 3; c++) {
      int k = 3 * r + c, kt = 3 * c + r;
      // B'p^ = -(p^ B'^T)^T, so -B'p^ = pB^T
      parent->A[k] = Jp[6 * r + c] + A[k] + pB[k] + pB[kt] + pCp[k];
      parent->B[k] = Jp[6 * r + c + 3] + B[k] + pC[k];
      parent->C[k] = Jp[6 * (r + 3) + c + 3] + C[k];
    }
}

// I -= U U^T inv (the sweep in's rank-one update, Ia = IA - U U^T / d), on the three blocks
CFD_HD void cfd_inertia3_sub_outer(cfd_inertia3* I, const double U[6], double inv) {
  for (int r = 0; r < 3; r++)
    for (int k = 0; k < 3; k++) {
      I->A[3 * r + k] -= U[r] * U[k] * inv;
      I->B[3 * r + k] -= U[r] * U[3 + k] * inv;
      I->C[3 * r + k] -= U[3 + r] * U[3 + k] * inv;
    }
}

// out = I x for an inertia in three blocks (the sweeps below write it inline, U = IA S)
CFD_HD void cfd_inertia3_vec(const cfd_inertia3* I, const double x[6], double out[6]) {
  double t1[3], t2[3];
  cfd_rot(I->A, x, t1);
  cfd_rot(I->B, x + 3, t2);
  out[0] = t1[0] + t2[0]; out[1] = t1[1] + t2[1]; out[2] = t1[2] + t2[2];
  cfd_rotT(I->B, x, t1);
  cfd_rot(I->C, x + 3, t2);
  out[3] = t1[0] + t2[0]; out[4] = t1[1] + t2[1]; out[5] = t1[2] + t2[2];
}

CFD_HD void cfd_inertia3_from(const double J[36], cfd_inertia3* I) {
  for (int r = 0; r < 3; r++)
    for (int c = 0; c < 3; c++) {
      I->A[3 * r + c] = J[6 * r + c];
      I->B[3 * r + c] = J[6 * r + c + 3];
      I->C[3 * r + c] = J[6 * (r + 3) + c + 3];
    }
}

// The pose of link i in its parent at q_i, and from V_i (and qd_i) its velocity-product
// acceleration c_i = ad_V (S qd) and rigid-body bias force -ad*_V J V.
CFD_HD void cfd_aba_link(const cfd_chain* c, int i, double qi, double qdi, const double* V,
                         double R[9], double p[3], double ci[6], double pb[6]) {
  const double* S = c->screw + 6 * i;
  double Re[9], pe[3], Sqd[6], JV[6];
  cfd_screw_exp(S, qi, Re, pe);
  cfd_se3_mul(c->home_R + 9 * i, c->home_p + 3 * i, Re, pe, R, p);
  if (!V) return;
  for (int k = 0; k < 6; k++) Sqd[k] = S[k] * qdi;
  cfd_ad(V, Sqd, ci);
  cfd_mat6_vec(c->inertia + 36 * i, V, JV);
  cfd_neg_adstar(V, JV, pb);
}

// qacc for one state. q, qd, tau, extra_diag (may be NULL) and qacc are this instance's vectors
// (entry i at [i * vstride]); work holds cfd_aba_link_doubles(lean) * n entries at [k * stride].
// lean = 0 keeps every link's pose, c_i and bias between the sweeps (the CPU: memory is cheap,
// sin/cos is not); lean = 1 keeps only V_i, U_i, d_i, u_i and recomputes the rest (the GPU: a
// thread's scratch is DRAM traffic, arithmetic is nearly free).
enum { CFD_ABA_LINK_DOUBLES_LEAN = 14 };
CFD_HD int cfd_aba_link_doubles(int lean) {
  return lean ? (int)CFD_ABA_LINK_DOUBLES_LEAN : (int)CFD_ABA_LINK_DOUBLES;
}

CFD_HD int cfd_aba_core_ex(const cfd_chain* c, const double* q, const double* qd, const double* tau,
                           const double* extra_diag, double* qacc, long vstride, double* work,
                           long stride, int lean) {
  int n = c->n, per = cfd_aba_link_doubles(lean);
#define W(i, k) work[((long)(i) * per + (k)) * stride]
  // slots per link: 0-5 V, 6-11 U, 12 d, 13 u; and when not lean: 14-22 R, 23-25 p, 26-31 c,
  // 32-37 rigid-body bias (CFD_ABA_LINK_DOUBLES = 38)

  // out: velocities (and, not lean, poses, c_i and bias forces)
  double V[6] = {0, 0, 0, 0, 0, 0};
  for (int i = 0; i < n; i++) {
    const double* S = c->screw + 6 * i;
    double R[9], p[3], Vc[6], ci[6], pb[6];
    cfd_aba_link(c, i, q[i * vstride], 0, NULL, R, p, NULL, NULL);
    cfd_twist_to_child(R, p, V, Vc);
    double qdi = qd[i * vstride];
    for (int k = 0; k < 6; k++) V[k] = Vc[k] + S[k] * qdi;
    for (int k = 0; k < 6; k++) W(i, k) = V[k];
    if (!lean) {
      double Sqd[6], JV[6];
      for (int k = 0; k < 6; k++) Sqd[k] = S[k] * qdi;
      cfd_ad(V, Sqd, ci);
      cfd_mat6_vec(c->inertia + 36 * i, V, JV);
      cfd_neg_adstar(V, JV, pb);
      for (int k = 0; k < 9; k++) W(i, 14 + k) = R[k];
      for (int k = 0; k < 3; k++) W(i, 23 + k) = p[k];
      for (int k = 0; k < 6; k++) W(i, 26 + k) = ci[k], W(i, 32 + k) = pb[k];
    }
  }

  // in: articulated inertia IA and bias pA, running from the tip
  cfd_inertia3 IA;
  double pA[6] = {0, 0, 0, 0, 0, 0}, R[9], p[3], ci[6];
  cfd_inertia3_from(c->inertia + 36 * (n - 1), &IA);
  for (int i = n - 1; i >= 0; i--) {
    // this link's pose and c_i; its bias force joins what the child passed down in pA
    double Vi[6], pb[6];
    for (int k = 0; k < 6; k++) Vi[k] = W(i, k);
    if (lean) {
      cfd_aba_link(c, i, q[i * vstride], qd[i * vstride], Vi, R, p, ci, pb);
    } else {
      for (int k = 0; k < 9; k++) R[k] = W(i, 14 + k);
      for (int k = 0; k < 3; k++) p[k] = W(i, 23 + k);
      for (int k = 0; k < 6; k++) ci[k] = W(i, 26 + k), pb[k] = W(i, 32 + k);
    }
    for (int k = 0; k < 6; k++) pA[k] += pb[k];
    const double* S = c->screw + 6 * i;
    double U[6], t1[3], t2[3];
    cfd_rot(IA.A, S, t1);
    cfd_rot(IA.B, S + 3, t2);
    U[0] = t1[0] + t2[0]; U[1] = t1[1] + t2[1]; U[2] = t1[2] + t2[2];
    cfd_rotT(IA.B, S, t1);
    cfd_rot(IA.C, S + 3, t2);
    U[3] = t1[0] + t2[0]; U[4] = t1[1] + t2[1]; U[5] = t1[2] + t2[2];
    double d = cfd_dot6(S, U) + c->armature[i] + (extra_diag ? extra_diag[i * vstride] : 0);
    if (!(d > 0)) return CFD_ERR_SINGULAR;
    double u = tau[i * vstride] - cfd_dot6(S, pA);
    for (int k = 0; k < 6; k++) W(i, 6 + k) = U[k];
    W(i, 12) = d;
    W(i, 13) = u;
    if (i == 0) break;
    // Ia = IA - U U^T / d,  pa = pA + Ia c + U u / d, then both to the parent
    double inv = 1 / d;
    cfd_inertia3_sub_outer(&IA, U, inv);
    double pa[6], a1[3], a2[3], b1[3], b2[3];
    cfd_rot(IA.A, ci, a1);
    cfd_rot(IA.B, ci + 3, a2);
    cfd_rotT(IA.B, ci, b1);
    cfd_rot(IA.C, ci + 3, b2);
    double su = u * inv;
    for (int k = 0; k < 3; k++) {
      pa[k] = pA[k] + a1[k] + a2[k] + U[k] * su;
      pa[3 + k] = pA[3 + k] + b1[k] + b2[k] + U[3 + k] * su;
    }
    cfd_wrench_to_parent(R, p, pa, pA);  // the parent's bias is added at the top of its turn
    cfd_inertia3 parent;
    cfd_inertia3_to_parent(R, p, &IA, c->inertia + 36 * (i - 1), &parent);
    IA = parent;
  }

  // out: accelerations
  double a[6] = {0, 0, 0, -c->gravity[0], -c->gravity[1], -c->gravity[2]};
  for (int i = 0; i < n; i++) {
    const double* S = c->screw + 6 * i;
    double ai[6], U[6], pb[6];
    if (lean) {
      double Vi[6];
      for (int k = 0; k < 6; k++) Vi[k] = W(i, k);
      cfd_aba_link(c, i, q[i * vstride], qd[i * vstride], Vi, R, p, ci, pb);
    } else {
      for (int k = 0; k < 9; k++) R[k] = W(i, 14 + k);
      for (int k = 0; k < 3; k++) p[k] = W(i, 23 + k);
      for (int k = 0; k < 6; k++) ci[k] = W(i, 26 + k);
    }
    for (int k = 0; k < 6; k++) U[k] = W(i, 6 + k);
    cfd_twist_to_child(R, p, a, ai);
    for (int k = 0; k < 6; k++) ai[k] += ci[k];
    double qa = (W(i, 13) - cfd_dot6(U, ai)) / W(i, 12);
    qacc[i * vstride] = qa;
    for (int k = 0; k < 6; k++) a[k] = ai[k] + S[k] * qa;
  }
#undef W
  return CFD_OK;
}

CFD_HD int cfd_aba_core(const cfd_chain* c, const double* q, const double* qd, const double* tau,
                        const double* extra_diag, double* qacc, long vstride, double* work,
                        long stride) {
  return cfd_aba_core_ex(c, q, qd, tau, extra_diag, qacc, vstride, work, stride, 0);
}

#endif  // CHAINFD_ABA_CORE_H
