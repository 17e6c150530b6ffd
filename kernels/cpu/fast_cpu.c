// The fast CPU path: the articulated-body algorithm (same sweeps as abia_cpu.c) with structured
// spatial algebra. An inertia is kept as three 3x3 blocks [[A, B], [B^T, C]] and moved to the
// parent frame in closed form, X^T I X with X = Ad_{T^-1}, T = (R, p):
//   A' = R A R^T, B' = R B R^T, C' = R C R^T           (rotate)
//   [[A' + p^B'^T - B'p^ - p^C'p^,  B' + p^C'], [..., C']]  (shift the reference point by p)
// which costs about a third of the dense 6x6 triple product, and no 6x6 matrix is ever formed.
#include <string.h>

#include "cfd_math.h"
#include "chain.h"

typedef struct {
  double A[9], B[9], C[9];
} inertia3;

enum { LINK_DOUBLES = 9 + 3 + 6 + 6 + 27 + 6 + 6 + 2 };

size_t cfd_fast_work_size(int n) { return (size_t)n * LINK_DOUBLES; }

// out = R X R^T (3x3)
static inline void rotate3(const double R[9], const double X[9], double out[9]) {
  double T[9];
  for (int r = 0; r < 3; r++)
    for (int c = 0; c < 3; c++)
      T[3 * r + c] = X[3 * r] * R[3 * c] + X[3 * r + 1] * R[3 * c + 1] + X[3 * r + 2] * R[3 * c + 2];
  cfd_mat3_mul(R, T, out);
}

// out = p^ X (3x3): each column crossed with p
static inline void hat_mul(const double p[3], const double X[9], double out[9]) {
  for (int c = 0; c < 3; c++) {
    double col[3] = {X[c], X[3 + c], X[6 + c]}, t[3];
    cfd_cross(p, col, t);
    out[c] = t[0]; out[3 + c] = t[1]; out[6 + c] = t[2];
  }
}

// Adds X^T I X (I in the child frame, (R, p) the child's pose) into the parent's inertia.
static inline void add_to_parent(const double R[9], const double p[3], const inertia3* I,
                                 inertia3* parent) {
  double A[9], B[9], C[9], pC[9], pB[9], pCp[9];
  rotate3(R, I->A, A);
  rotate3(R, I->B, B);
  rotate3(R, I->C, C);
  hat_mul(p, C, pC);  // p^ C'
  double Bt[9] = {B[0], B[3], B[6], B[1], B[4], B[7], B[2], B[5], B[8]};
  hat_mul(p, Bt, pB);  // p^ B'^T
  // p^ C' p^ = -(p^ (p^ C')^T)^T... C' symmetric: (p^ C')^T = -C' p^, so p^ C' p^ = -p^ (p^ C')^T
  double pCt[9] = {pC[0], pC[3], pC[6], pC[1], pC[4], pC[7], pC[2], pC[5], pC[8]};
  hat_mul(p, pCt, pCp);
  for (int k = 0; k < 9; k++) {
    int kt = 3 * (k % 3) + k / 3;  // transposed index
    // A' + p^B'^T - B'p^ - p^C'p^, where B'p^ = -(p^ B'^T)^T and p^C'p^ = -pCp
    parent->A[k] += A[k] + pB[k] + pB[kt] + pCp[k];
    parent->B[k] += B[k] + pC[k];
    parent->C[k] += C[k];
  }
}

int cfd_fd_fast_cpu(const cfd_chain* c, const double* q, const double* qd, const double* tau,
                    const double* extra_diag, double* qacc, double* work) {
  int n = c->n;
  double* R = work;
  double* p = R + 9 * n;
  double* V = p + 3 * n;
  double* cv = V + 6 * n;
  inertia3* IA = (inertia3*)(cv + 6 * n);
  double* pA = (double*)(IA + n);
  double* U = pA + 6 * n;
  double* d = U + 6 * n;
  double* u = d + n;

  // out: poses, velocities, velocity-product accelerations, rigid-body inertias and bias forces
  double Vprev[6] = {0};
  for (int i = 0; i < n; i++) {
    const double* S = c->screw + 6 * i;
    const double* J = c->inertia + 36 * i;
    double Re[9], pe[3];
    cfd_screw_exp(S, q[i], Re, pe);
    cfd_se3_mul(c->home_R + 9 * i, c->home_p + 3 * i, Re, pe, R + 9 * i, p + 3 * i);
    double* Vi = V + 6 * i;
    cfd_twist_to_child(R + 9 * i, p + 3 * i, Vprev, Vi);
    double Sqd[6];
    for (int k = 0; k < 6; k++) {
      Sqd[k] = S[k] * qd[i];
      Vi[k] += Sqd[k];
    }
    cfd_ad(Vi, Sqd, cv + 6 * i);
    for (int r = 0; r < 3; r++)
      for (int k = 0; k < 3; k++) {
        IA[i].A[3 * r + k] = J[6 * r + k];
        IA[i].B[3 * r + k] = J[6 * r + k + 3];
        IA[i].C[3 * r + k] = J[6 * (r + 3) + k + 3];
      }
    double JV[6];
    cfd_mat6_vec(J, Vi, JV);
    cfd_neg_adstar(Vi, JV, pA + 6 * i);
    memcpy(Vprev, Vi, sizeof(Vprev));
  }

  // in: articulated inertias and bias forces
  for (int i = n - 1; i >= 0; i--) {
    const double* S = c->screw + 6 * i;
    inertia3* I = IA + i;
    double* Ui = U + 6 * i;
    double t1[3], t2[3];
    cfd_rot(I->A, S, t1);
    cfd_rot(I->B, S + 3, t2);
    Ui[0] = t1[0] + t2[0]; Ui[1] = t1[1] + t2[1]; Ui[2] = t1[2] + t2[2];
    cfd_rotT(I->B, S, t1);
    cfd_rot(I->C, S + 3, t2);
    Ui[3] = t1[0] + t2[0]; Ui[4] = t1[1] + t2[1]; Ui[5] = t1[2] + t2[2];
    double di = cfd_dot6(S, Ui) + c->armature[i] + (extra_diag ? extra_diag[i] : 0);
    if (!(di > 0)) return CFD_ERR_SINGULAR;
    d[i] = di;
    u[i] = tau[i] - cfd_dot6(S, pA + 6 * i);
    if (i == 0) break;
    double inv = 1 / di;
    for (int r = 0; r < 3; r++)
      for (int k = 0; k < 3; k++) {
        I->A[3 * r + k] -= Ui[r] * Ui[k] * inv;
        I->B[3 * r + k] -= Ui[r] * Ui[3 + k] * inv;
        I->C[3 * r + k] -= Ui[3 + r] * Ui[3 + k] * inv;
      }
    const double* ci = cv + 6 * i;
    double pa[6], a1[3], a2[3], b1[3], b2[3];
    cfd_rot(I->A, ci, a1);
    cfd_rot(I->B, ci + 3, a2);
    cfd_rotT(I->B, ci, b1);
    cfd_rot(I->C, ci + 3, b2);
    double su = u[i] * inv;
    for (int k = 0; k < 3; k++) {
      pa[k] = pA[6 * i + k] + a1[k] + a2[k] + Ui[k] * su;
      pa[3 + k] = pA[6 * i + 3 + k] + b1[k] + b2[k] + Ui[3 + k] * su;
    }
    double pp[6];
    cfd_wrench_to_parent(R + 9 * i, p + 3 * i, pa, pp);
    for (int k = 0; k < 6; k++) pA[6 * (i - 1) + k] += pp[k];
    add_to_parent(R + 9 * i, p + 3 * i, I, IA + i - 1);
  }

  // out: accelerations
  double a[6] = {0, 0, 0, -c->gravity[0], -c->gravity[1], -c->gravity[2]};
  for (int i = 0; i < n; i++) {
    const double* S = c->screw + 6 * i;
    double ai[6];
    cfd_twist_to_child(R + 9 * i, p + 3 * i, a, ai);
    for (int k = 0; k < 6; k++) ai[k] += cv[6 * i + k];
    double qa = (u[i] - cfd_dot6(U + 6 * i, ai)) / d[i];
    qacc[i] = qa;
    for (int k = 0; k < 6; k++) a[k] = ai[k] + S[k] * qa;
  }
  return CFD_OK;
}
