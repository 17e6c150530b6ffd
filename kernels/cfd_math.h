// cfd_math.h: the small Lie-group and linear-algebra kit every algorithm uses, from C and CUDA.
//
// Conventions (docs/DESIGN.md 3):
//   twist  V = [w; v]  (angular first; v is the velocity of the frame origin, in the frame)
//   wrench F = [m; f]  (moment about the frame origin first)
//   T = (R, p) in SE(3), R row-major 3x3;  Ad_T = [[R, 0], [p^ R, R]]
//   ad_V = [[w^, 0], [v^, w^]],  ad*_V = ad_V^T
// Link i's pose in its parent's frame is f_{i-1,i}(q) = M_i exp(S_i q_i). The algorithms move
// twists from parent to child with Ad_{f^-1} and wrenches from child to parent with Ad_{f^-1}^T.
// 6x6 matrices are row-major, mat[6*r + c].
#ifndef CHAINFD_CFD_MATH_H
#define CHAINFD_CFD_MATH_H

#include <math.h>

#ifdef __CUDACC__
#define CFD_HD __host__ __device__ __forceinline__
#define CFD_HD_CALL static __host__ __device__ __noinline__
#define CFD_RESTRICT __restrict__
#else
#define CFD_HD static inline
#define CFD_HD_CALL static
#define CFD_RESTRICT restrict
#endif
// CFD_HD_CALL: a function kept out of line on the GPU, for a rarely taken path whose inlined
// registers would make its callers spill.
// CFD_RESTRICT marks outputs that alias no input: a GPU can then issue all of a function's loads
// at once instead of one memory round trip per load (arrays in L2, written by other SMs).

// ---- 3-vectors and 3x3 ---------------------------------------------------------------------------

CFD_HD void cfd_cross(const double a[3], const double b[3], double out[3]) {
  double x = a[1] * b[2] - a[2] * b[1];
  double y = a[2] * b[0] - a[0] * b[2];
  double z = a[0] * b[1] - a[1] * b[0];
  out[0] = x; out[1] = y; out[2] = z;
}

CFD_HD double cfd_dot3(const double a[3], const double b[3]) {
  return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}

// out = R x
CFD_HD void cfd_rot(const double R[9], const double x[3], double out[3]) {
  double a = R[0] * x[0] + R[1] * x[1] + R[2] * x[2];
  double b = R[3] * x[0] + R[4] * x[1] + R[5] * x[2];
  double c = R[6] * x[0] + R[7] * x[1] + R[8] * x[2];
  out[0] = a; out[1] = b; out[2] = c;
}

// out = R^T x
CFD_HD void cfd_rotT(const double R[9], const double x[3], double out[3]) {
  double a = R[0] * x[0] + R[3] * x[1] + R[6] * x[2];
  double b = R[1] * x[0] + R[4] * x[1] + R[7] * x[2];
  double c = R[2] * x[0] + R[5] * x[1] + R[8] * x[2];
  out[0] = a; out[1] = b; out[2] = c;
}

// out = A B (3x3); out may not alias A or B
CFD_HD void cfd_mat3_mul(const double A[9], const double B[9], double out[9]) {
  for (int r = 0; r < 3; r++)
    for (int c = 0; c < 3; c++)
      out[3 * r + c] = A[3 * r] * B[c] + A[3 * r + 1] * B[3 + c] + A[3 * r + 2] * B[6 + c];
}

// unit quaternion (w, x, y, z) -> rotation matrix
CFD_HD void cfd_quat2mat(const double q[4], double R[9]) {
  double w = q[0], x = q[1], y = q[2], z = q[3];
  R[0] = 1 - 2 * (y * y + z * z); R[1] = 2 * (x * y - w * z);     R[2] = 2 * (x * z + w * y);
  R[3] = 2 * (x * y + w * z);     R[4] = 1 - 2 * (x * x + z * z); R[5] = 2 * (y * z - w * x);
  R[6] = 2 * (x * z - w * y);     R[7] = 2 * (y * z + w * x);     R[8] = 1 - 2 * (x * x + y * y);
}

// ---- SE(3) ---------------------------------------------------------------------------------------

// sin and cos of x together (one range reduction on a GPU)
CFD_HD void cfd_sincos(double x, double* s, double* c) {
#ifdef __CUDA_ARCH__
  sincos(x, s, c);
#else
  *s = sin(x);
  *c = cos(x);
#endif
}

// exp(S q) for a 1-dof screw S = [w; v]: |w| = 1 (revolute, any pitch) or w = 0 (prismatic),
// given s = sin(q) and c = cos(q) (unused for a prismatic screw).
CFD_HD void cfd_screw_exp_sc(const double S[6], double q, double s, double c, double R[9],
                             double p[3]) {
  const double* w = S;
  const double* v = S + 3;
  if (w[0] == 0 && w[1] == 0 && w[2] == 0) {
    R[0] = 1; R[1] = 0; R[2] = 0; R[3] = 0; R[4] = 1; R[5] = 0; R[6] = 0; R[7] = 0; R[8] = 1;
    p[0] = v[0] * q; p[1] = v[1] * q; p[2] = v[2] * q;
    return;
  }
  double k = 1 - c;
  double x = w[0], y = w[1], z = w[2];
  // Rodrigues: R = I + s w^ + (1-c) w^ w^
  R[0] = c + k * x * x;     R[1] = k * x * y - s * z; R[2] = k * x * z + s * y;
  R[3] = k * x * y + s * z; R[4] = c + k * y * y;     R[5] = k * y * z - s * x;
  R[6] = k * x * z - s * y; R[7] = k * y * z + s * x; R[8] = c + k * z * z;
  // p = (I q + (1-c) w^ + (q-s) w^ w^) v
  double wv[3], wwv[3];
  cfd_cross(w, v, wv);
  cfd_cross(w, wv, wwv);
  for (int i = 0; i < 3; i++) p[i] = q * v[i] + k * wv[i] + (q - s) * wwv[i];
}

// exp(S q) as above
CFD_HD void cfd_screw_exp(const double S[6], double q, double R[9], double p[3]) {
  const double* w = S;
  if (w[0] == 0 && w[1] == 0 && w[2] == 0) {
    cfd_screw_exp_sc(S, q, 0, 1, R, p);
    return;
  }
  cfd_screw_exp_sc(S, q, sin(q), cos(q), R, p);
}

// (R, p) = (Ra, pa) (Rb, pb)
CFD_HD void cfd_se3_mul(const double Ra[9], const double pa[3], const double Rb[9],
                        const double pb[3], double R[9], double p[3]) {
  double t[3];
  cfd_rot(Ra, pb, t);
  cfd_mat3_mul(Ra, Rb, R);
  p[0] = pa[0] + t[0]; p[1] = pa[1] + t[1]; p[2] = pa[2] + t[2];
}

// Twist from parent to child frame: out = Ad_{T^-1} V, T = (R, p) the child's pose in the parent.
//   w_c = R^T w,  v_c = R^T (v + w x p)
CFD_HD void cfd_twist_to_child(const double R[9], const double p[3], const double V[6],
                               double out[6]) {
  double t[3];
  cfd_cross(V, p, t);
  t[0] += V[3]; t[1] += V[4]; t[2] += V[5];
  cfd_rotT(R, V, out);
  cfd_rotT(R, t, out + 3);
}

// Wrench from child to parent frame: out = Ad_{T^-1}^T F.
//   f_p = R f,  m_p = R m + p x (R f)
CFD_HD void cfd_wrench_to_parent(const double R[9], const double p[3], const double F[6],
                                 double out[6]) {
  double m[3], f[3], t[3];
  cfd_rot(R, F, m);
  cfd_rot(R, F + 3, f);
  cfd_cross(p, f, t);
  out[0] = m[0] + t[0]; out[1] = m[1] + t[1]; out[2] = m[2] + t[2];
  out[3] = f[0]; out[4] = f[1]; out[5] = f[2];
}

// out = ad_V X:  [w x wx;  w x vx + v x wx]
CFD_HD void cfd_ad(const double V[6], const double X[6], double out[6]) {
  double a[3], b[3], c[3];
  cfd_cross(V, X, a);
  cfd_cross(V, X + 3, b);
  cfd_cross(V + 3, X, c);
  out[0] = a[0]; out[1] = a[1]; out[2] = a[2];
  out[3] = b[0] + c[0]; out[4] = b[1] + c[1]; out[5] = b[2] + c[2];
}

// out = -ad*_V F = [w x m + v x f;  w x f]   (the gyroscopic wrench term of Newton-Euler)
CFD_HD void cfd_neg_adstar(const double V[6], const double F[6], double out[6]) {
  double a[3], b[3], c[3];
  cfd_cross(V, F, a);
  cfd_cross(V + 3, F + 3, b);
  cfd_cross(V, F + 3, c);
  out[0] = a[0] + b[0]; out[1] = a[1] + b[1]; out[2] = a[2] + b[2];
  out[3] = c[0]; out[4] = c[1]; out[5] = c[2];
}

CFD_HD double cfd_dot6(const double a[6], const double b[6]) {
  return a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3] + a[4] * b[4] + a[5] * b[5];
}

// ---- 6x6 dense -----------------------------------------------------------------------------------

// out = A x
CFD_HD void cfd_mat6_vec(const double A[36], const double x[6], double out[6]) {
  for (int r = 0; r < 6; r++) {
    const double* a = A + 6 * r;
    out[r] = a[0] * x[0] + a[1] * x[1] + a[2] * x[2] + a[3] * x[3] + a[4] * x[4] + a[5] * x[5];
  }
}

// out = A^T x
CFD_HD void cfd_mat6T_vec(const double A[36], const double x[6], double out[6]) {
  for (int c = 0; c < 6; c++) {
    double s = 0;
    for (int r = 0; r < 6; r++) s += A[6 * r + c] * x[r];
    out[c] = s;
  }
}

// out = op(A) op(B), op = transpose when the flag is set; out may not alias A or B
CFD_HD void cfd_mat6_mul(const double* CFD_RESTRICT A, int tA, const double* CFD_RESTRICT B, int tB,
                         double* CFD_RESTRICT out) {
  for (int r = 0; r < 6; r++)
    for (int c = 0; c < 6; c++) {
      double s = 0;
      for (int k = 0; k < 6; k++)
        s += (tA ? A[6 * k + r] : A[6 * r + k]) * (tB ? B[6 * c + k] : B[6 * k + c]);
      out[6 * r + c] = s;
    }
}

// The dense Ad_{T^-1} (twists parent -> child) for T = (R, p): [[R^T, 0], [-R^T p^, R^T]].
CFD_HD void cfd_ad_inv_mat(const double R[9], const double p[3], double G[36]) {
  for (int r = 0; r < 3; r++)
    for (int c = 0; c < 3; c++) {
      double rt = R[3 * c + r];  // (R^T)_{rc}
      G[6 * r + c] = rt;
      G[6 * r + c + 3] = 0;
      G[6 * (r + 3) + c + 3] = rt;
      // (-R^T p^)_{rc} = -sum_k R_{kr} (p^)_{kc}
      double s = 0;
      for (int k = 0; k < 3; k++) {
        double phat_kc = (k == 0) ? (c == 1 ? -p[2] : c == 2 ? p[1] : 0)
                       : (k == 1) ? (c == 0 ? p[2] : c == 2 ? -p[0] : 0)
                                  : (c == 0 ? -p[1] : c == 1 ? p[0] : 0);
        s += R[3 * k + r] * phat_kc;
      }
      G[6 * (r + 3) + c] = -s;
    }
}

// Spatial inertia about the frame origin of a body with mass m, centre of mass c and rotational
// inertia Ic about the centre of mass (row-major 3x3), all in that frame:
//   J = [[Ic + m c^ c^T, m c^], [m c^T, m I]]
CFD_HD void cfd_spatial_inertia(double m, const double c[3], const double Ic[9], double J[36]) {
  double ch[9] = {0, -c[2], c[1], c[2], 0, -c[0], -c[1], c[0], 0};
  for (int r = 0; r < 3; r++)
    for (int k = 0; k < 3; k++) {
      double cct = 0;  // (c^ c^T)_{rk} = -(c^ c^)_{rk}
      for (int j = 0; j < 3; j++) cct -= ch[3 * r + j] * ch[3 * j + k];
      J[6 * r + k] = Ic[3 * r + k] + m * cct;
      J[6 * r + k + 3] = m * ch[3 * r + k];
      J[6 * (r + 3) + k] = m * ch[3 * k + r];
      J[6 * (r + 3) + k + 3] = (r == k) ? m : 0;
    }
}

// out = G^T I G for G = Ad_{T^-1}, T = (R, p) the child's pose in its parent: moves a child-frame
// (articulated or composite) inertia into the parent frame.
CFD_HD void cfd_inertia_to_parent(const double R[9], const double p[3], const double I[36],
                                  double out[36]) {
  double G[36], IG[36];
  cfd_ad_inv_mat(R, p, G);
  cfd_mat6_mul(I, 0, G, 0, IG);
  cfd_mat6_mul(G, 1, IG, 0, out);
}

// ---- small symmetric positive definite solves (Cholesky, in place) --------------------------------

// Full unrolling where the size is known after inlining (6x6 blocks): the matrix then lives in
// registers on a GPU instead of local memory.
#ifdef __CUDA_ARCH__
#define CFD_UNROLL _Pragma("unroll")
#else
#define CFD_UNROLL
#endif

// Factor A = L L^T in the lower triangle of A (n x n, row-major, leading dimension lda).
// Returns 0, or k+1 when the k-th pivot is not positive.
CFD_HD int cfd_chol_factor(double* A, int n, int lda) {
  CFD_UNROLL for (int j = 0; j < n; j++) {
    double d = A[j * lda + j];
    CFD_UNROLL for (int k = 0; k < j; k++) d -= A[j * lda + k] * A[j * lda + k];
    if (!(d > 0)) return j + 1;
    d = sqrt(d);
    A[j * lda + j] = d;
    double inv = 1 / d;
    CFD_UNROLL for (int i = j + 1; i < n; i++) {
      double s = A[i * lda + j];
      CFD_UNROLL for (int k = 0; k < j; k++) s -= A[i * lda + k] * A[j * lda + k];
      A[i * lda + j] = s * inv;
    }
  }
  return 0;
}

// Solve L L^T x = b in place (b has nrhs columns, stored as rows of length ldb: b[r*ldb + col]).
CFD_HD void cfd_chol_solve(const double* L, int n, int lda, double* b, int nrhs, int ldb) {
  CFD_UNROLL for (int col = 0; col < nrhs; col++) {
    CFD_UNROLL for (int i = 0; i < n; i++) {
      double s = b[i * ldb + col];
      CFD_UNROLL for (int k = 0; k < i; k++) s -= L[i * lda + k] * b[k * ldb + col];
      b[i * ldb + col] = s / L[i * lda + i];
    }
    CFD_UNROLL for (int i = n - 1; i >= 0; i--) {
      double s = b[i * ldb + col];
      CFD_UNROLL for (int k = i + 1; k < n; k++) s -= L[k * lda + i] * b[k * ldb + col];
      b[i * ldb + col] = s / L[i * lda + i];
    }
  }
}

// The 6x6 Cholesky of CFA's elimination, which factors a block for every row of every level:
// the diagonal holds 1/L_jj (one reciprocal square root per column) so that the solves multiply
// instead of divide (a double division or square root is a long instruction sequence on a GPU,
// and these are the elimination's critical path). Returns 0, or 1 when a pivot is not positive.
CFD_HD double cfd_rsqrt(double x) {
#ifdef __CUDA_ARCH__
  return rsqrt(x);
#else
  return 1 / sqrt(x);
#endif
}

CFD_HD int cfd_chol6_factor_rdiag(double* A) {
  int bad = 0;  // no early return: straight-line code, so that a GPU thread can interleave two
  CFD_UNROLL for (int j = 0; j < 6; j++) {  // factorisations
    double d = A[7 * j];
    CFD_UNROLL for (int k = 0; k < j; k++) d -= A[6 * j + k] * A[6 * j + k];
    bad |= !(d > 0);
    double inv = cfd_rsqrt(d);
    A[7 * j] = inv;
    CFD_UNROLL for (int i = j + 1; i < 6; i++) {
      double s = A[6 * i + j];
      CFD_UNROLL for (int k = 0; k < j; k++) s -= A[6 * i + k] * A[6 * j + k];
      A[6 * i + j] = s * inv;
    }
  }
  return bad;
}

// Solve L L^T x = b in place for one 6-vector, L from cfd_chol6_factor_rdiag.
CFD_HD void cfd_chol6_solve_rdiag(const double* CFD_RESTRICT L, double* CFD_RESTRICT b) {
  CFD_UNROLL for (int i = 0; i < 6; i++) {
    double s = b[i];
    CFD_UNROLL for (int k = 0; k < i; k++) s -= L[6 * i + k] * b[k];
    b[i] = s * L[7 * i];
  }
  CFD_UNROLL for (int i = 5; i >= 0; i--) {
    double s = b[i];
    CFD_UNROLL for (int k = i + 1; k < 6; k++) s -= L[6 * k + i] * b[k];
    b[i] = s * L[7 * i];
  }
}

// ---- comparing results ---------------------------------------------------------------------------

// The larger of a running worst error and a new one; NaN once either is NaN (an error measure that
// a later finite value could overwrite would pass a NaN result).
CFD_HD double cfd_worst(double worst, double e) {
  return worst != worst || e != e ? NAN : e > worst ? e : worst;
}

// ||a - b||_inf / ||b||_inf (absolute when b is zero); NaN when either holds NaN: the error
// measure of the tests, `chainfd check` and the benchmarks
CFD_HD double cfd_rel_err_inf(const double* a, const double* b, int n) {
  double num = 0, den = 0;
  for (int i = 0; i < n; i++) {
    num = cfd_worst(num, fabs(a[i] - b[i]));
    if (fabs(b[i]) > den) den = fabs(b[i]);
  }
  return den > 0 ? num / den : num;
}

#endif  // CHAINFD_CFD_MATH_H
