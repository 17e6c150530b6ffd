// The fast CPU path: the articulated-body algorithm of aba_core.h, rewritten for one core.
//
// Changes of form, none an approximation:
//  - Joint frames. Once per chain (cfd_fast_prepare) every link's frame moves onto its joint axis
//    with z along it: G_i = (R_G, r) in the link frame, so that S_i = Ad_{G_i} e (e = e_z angular
//    for a hinge, e_z linear for a slide). The chain is then H'_i = G_{i-1}^-1 H_i G_i,
//    J'_i = Ad_{G_i}^T J_i Ad_{G_i}, the same q, and the same qacc. A link's pose is H'_i Rz(q) or
//    H'_i Tz(q), U_i = IA e is a column of IA, and c_i = ad_V(e qd) has four terms. (A screw with
//    pitch has no such frame; the solves then take aba_core.h's sweeps in link frames.)
//  - 4-wide vectors. The articulated inertia [[A, B], [B^T, C]] is kept as the rows of A, B, B^T
//    and C, one vector each (the fourth lane zero). The congruence X^T IA X is taken as
//    X^T (X^T IA)^T (it is symmetric), so that every product is a left one, R M or p^ M: a vector
//    multiply-add by an entry of R or p broadcast from memory (a load; broadcasts from registers
//    would queue on the one shuffle port), with three 3x3 transposes between the two halves and
//    one to get B^T from B (the upper right block of X^T IA is never needed): about 120 vector
//    operations per link (93 of them multiply-adds) where aba_core.h does some 450 scalar ones.
//    Twists and wrenches are vectors too.
//  - Short chains from link to link. The rank-one update Ia = IA - U U^T / d is applied after
//    the congruence, to U' = X^T U, and last, so that the division waits on nothing of the
//    congruence and the congruence on nothing of the division. The accelerations take
//    a_i = (X - e w^T) a_parent + c + e s (w = U'/d, s = (u - U.c)/d, kept by the sweep in): one
//    matrix-vector product per link, qacc_i = s - w.a_parent beside it.
//  - sin and cos of four links at once (sin_cos4), far cheaper per value than libm's.
//  - The prepared chain and the scratch start on a 64-byte boundary in work and keep every vector
//    32-byte aligned: no load or store splits a cache line.
// GNU C vector extensions (GCC, Clang): AVX2 where the build targets it, plain code elsewhere.
#define _GNU_SOURCE  // sincos (libm, for the lanes out of sin_cos4's range)
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "aba_core.h"
#include "aba_tree.h"
#include "cfd_math.h"
#include "chain.h"

// 4 doubles; aligned(8) so that loads from malloc'd memory need no 32-byte alignment
typedef double v4 __attribute__((vector_size(32), aligned(8)));
typedef unsigned long long v4u __attribute__((vector_size(32)));

#ifdef __clang__
#define YZX(a) __builtin_shufflevector((a), (a), 1, 2, 0, 3)
#define ZXY(a) __builtin_shufflevector((a), (a), 2, 0, 1, 3)
#define SHUF2(a, b, i, j, k, l) __builtin_shufflevector((a), (b), i, j, k, l)
#else
#define YZX(a) __builtin_shuffle((a), (v4u){1, 2, 0, 3})
#define ZXY(a) __builtin_shuffle((a), (v4u){2, 0, 1, 3})
#define SHUF2(a, b, i, j, k, l) __builtin_shuffle((a), (b), (v4u){i, j, k, l})
#endif

static inline v4 splat(double x) { return (v4){x, x, x, x}; }
static inline v4 cross4(v4 a, v4 b) { return YZX(a) * ZXY(b) - ZXY(a) * YZX(b); }

// A symmetric 6x6 (articulated or rigid inertia) as rows: A, B, B^T, C (3 vectors each)
typedef struct {
  v4 A[3], B[3], T[3], C[3];
} sym6;

// The prepared chain, per link: H' (rotation row-major, origin), J' as sym6, the joint kind; and
// H' cut up so that the pose at q is a few multiply-adds: R = H' Rz(q) has rows
// cos Hxy_k + sin Hyx_k + Hz_k and columns (cos Hc_0 + sin Hc_1, cos Hc_1 - sin Hc_0, Hc_2)
// (a slide: cos = 1, sin = 0, and the origin moves by q Hc_2)
// 32-byte aligned, as fast_scratch is (model_of).
typedef struct __attribute__((aligned(32))) {
  sym6 Jb;
  v4 Hxy[3], Hyx[3], Hz[3], Hc[3];
  double p[4], R[9];
  int slide;
} fast_link;

// Per link and call, from one sweep to the next: the pose (R by rows and by columns, p), c_i, the
// bias force, and from the sweep in w = U'/d (wt, wb: its halves) and s = (u - U.c)/d. The
// congruence broadcasts R's and p's entries from here.
typedef struct __attribute__((aligned(32))) {
  double R[3][4], Rc[3][4], p[4], cw[4], cv[4], bm[4], bf[4], wt[4], wb[4];
  double s, pad[3];
} fast_scratch;

static inline v4 ld4(const double* x) { return *(const v4*)x; }
static inline void st4(double* x, v4 v) { *(v4*)x = v; }

// work: a flag, then from the first 64-byte boundary after it the prepared chain, per-link
// scratch, the sines and cosines
size_t cfd_fast_work_size(int n) {
  size_t per_link = (sizeof(fast_link) + sizeof(fast_scratch)) / sizeof(double) + 2;
  size_t size = 1 + 7 + (size_t)n * per_link;  // 7: the most that model_of skips
  size_t generic = 1 + (size_t)n * CFD_ABA_TREE_LINK_DOUBLES;  // the fallbacks' (cfd_aba_core,
                                                               // cfd_aba_tree: the larger)
  return size > generic ? size : generic;
}

static void sym6_from(const double J[36], sym6* S) {
  for (int r = 0; r < 3; r++) {
    S->A[r] = (v4){J[6 * r], J[6 * r + 1], J[6 * r + 2], 0};
    S->B[r] = (v4){J[6 * r + 3], J[6 * r + 4], J[6 * r + 5], 0};
    S->T[r] = (v4){J[6 * (r + 3)], J[6 * (r + 3) + 1], J[6 * (r + 3) + 2], 0};
    S->C[r] = (v4){J[6 * (r + 3) + 3], J[6 * (r + 3) + 4], J[6 * (r + 3) + 5], 0};
  }
}

// The link's frame on its joint axis: z = the axis, origin on it (hinge) or at the link origin
// (slide). Returns 0, or 1 for a screw that is neither a pure rotation nor a pure translation.
static int joint_frame(const double S[6], double R[9], double p[3], int* slide) {
  const double *w = S, *v = S + 3;
  double nw = sqrt(cfd_dot3(w, w)), nv = sqrt(cfd_dot3(v, v)), z[3];
  if (nw > 0) {
    if (fabs(nw - 1) > 1e-12 || fabs(cfd_dot3(w, v)) > 1e-12 * (1 + nv)) return 1;  // pitch
    for (int k = 0; k < 3; k++) z[k] = w[k];
    cfd_cross(w, v, p);  // the axis point nearest the origin: v = p x w
    *slide = 0;
  } else {
    if (!(nv > 0)) return 1;
    for (int k = 0; k < 3; k++) z[k] = v[k] / nv, p[k] = 0;
    if (fabs(nv - 1) > 1e-12) return 1;
    *slide = 1;
  }
  // x: the coordinate axis least aligned with z, made orthogonal to it; y = z x x
  int a = fabs(z[0]) < fabs(z[1]) ? (fabs(z[0]) < fabs(z[2]) ? 0 : 2) : (fabs(z[1]) < fabs(z[2]) ? 1 : 2);
  double x[3] = {0, 0, 0}, y[3];
  x[a] = 1;
  double zx = z[a];
  for (int k = 0; k < 3; k++) x[k] -= zx * z[k];
  double nx = sqrt(cfd_dot3(x, x));
  for (int k = 0; k < 3; k++) x[k] /= nx;
  cfd_cross(z, x, y);
  for (int k = 0; k < 3; k++) R[3 * k] = x[k], R[3 * k + 1] = y[k], R[3 * k + 2] = z[k];
  return 0;
}

// sin and cos of four x at once, to within a few units in the last place for |x| < 2^20 (the
// caller redoes other lanes with libm): x less the nearest multiple k of pi/2, with pi/2 in three
// parts of which the first two have 33 significant bits (their products with k exact), Taylor
// series to r^17 / 17! and r^18 / 18! on |r| <= pi/4 (truncation below 1e-17), then the quadrant
// k mod 4 by bit operations. Far cheaper per value than libm's, whose calls would otherwise be a
// large share of the short per-link sweeps.
static inline void sin_cos4(v4 x, v4* s, v4* c) {
  const v4 shift = splat(6755399441055744.0);  // 1.5 * 2^52: the sum is k in the low bits
  v4 t = x * 0.6366197723675814 + shift;
  v4 k = t - shift;
  v4u quad = (v4u)t;
  v4 r = x - k * 1.5707963267341256;
  r = r - k * 6.077100506303966e-11;
  r = r - k * 2.0222662487959506e-21;
  v4 r2 = r * r;
  v4 ps = splat(1.0 / 355687428096000.0);  // 1/17!
  ps = ps * r2 - 1.0 / 1307674368000.0;
  ps = ps * r2 + 1.0 / 6227020800.0;
  ps = ps * r2 - 1.0 / 39916800.0;
  ps = ps * r2 + 1.0 / 362880.0;
  ps = ps * r2 - 1.0 / 5040.0;
  ps = ps * r2 + 1.0 / 120.0;
  ps = ps * r2 - 1.0 / 6.0;
  v4 sr = (ps * r2) * r + r;
  v4 pc = splat(-1.0 / 6402373705728000.0);  // -1/18!
  pc = pc * r2 + 1.0 / 20922789888000.0;
  pc = pc * r2 - 1.0 / 87178291200.0;
  pc = pc * r2 + 1.0 / 479001600.0;
  pc = pc * r2 - 1.0 / 3628800.0;
  pc = pc * r2 + 1.0 / 40320.0;
  pc = pc * r2 - 1.0 / 720.0;
  pc = pc * r2 + 1.0 / 24.0;
  pc = pc * r2 - 0.5;
  v4 cr = pc * r2 + 1.0;
  // quadrant: odd ones swap sin and cos; sin is negated in 2 and 3, cos in 1 and 2
  v4u odd = -(quad & 1), sflip = (quad & 2) << 62, cflip = ((quad + 1) & 2) << 62;
  v4u sw_s = ((v4u)cr & odd) | ((v4u)sr & ~odd), sw_c = ((v4u)sr & odd) | ((v4u)cr & ~odd);
  *s = (v4)(sw_s ^ sflip);
  *c = (v4)(sw_c ^ cflip);
}

// sin and cos of q[0..n) into sn, cs: whole groups of four straight from q to sn and cs, lanes
// out of sin_cos4's range (rare) and the last partial group through libm and a copy
static void sin_cos_all(const double* q, int n, double* sn, double* cs) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    v4 x = ld4(q + i), vs, vc;
    sin_cos4(x, &vs, &vc);
    st4(sn + i, vs);
    st4(cs + i, vc);
    __typeof__(x < x) in = x * x < splat(1099511627776.0);  // |x| < 2^20 (x^2 a little more)
    if (!(in[0] & in[1] & in[2] & in[3]))
      for (int k = i; k < i + 4; k++)
        if (!(fabs(q[k]) < 1048576.0)) sincos(q[k], sn + k, cs + k);
  }
  if (i < n) {
    double x[4] = {0, 0, 0, 0}, s4[4], c4[4];
    int m = n - i;
    memcpy(x, q + i, sizeof(double) * m);
    v4 vs, vc;
    sin_cos4(ld4(x), &vs, &vc);
    st4(s4, vs);
    st4(c4, vc);
    for (int k = 0; k < m; k++) {
      if (!(fabs(x[k]) < 1048576.0)) sincos(x[k], s4 + k, c4 + k);
      sn[i + k] = s4[k];
      cs[i + k] = c4[k];
    }
  }
}

static fast_link* model_of(double* work) {  // work: 8-byte aligned at least
  return (fast_link*)(((uintptr_t)(work + 1) + 63) & ~(uintptr_t)63);
}

// Link i in joint frames: H' = G_{i-1}^-1 H_i G_i (into HR, Hp) and J' = Ad_G^T J_i Ad_G (into J,
// exactly symmetric, as the sweeps assume). Gi_R, Gi_p hold G_{i-1}^-1 (the identity for the
// first link) and are replaced by G_i^-1 for the next. Returns 1 for a screw with pitch.
static int joint_frame_link(const cfd_chain* c, int i, double Gi_R[9], double Gi_p[3],
                            double HR[9], double Hp[3], double J[36], int* slide) {
  double GR[9], Gpos[3];
  if (joint_frame(c->screw + 6 * i, GR, Gpos, slide)) return 1;
  double HG_R[9], HG_p[3];
  cfd_se3_mul(c->home_R + 9 * i, c->home_p + 3 * i, GR, Gpos, HG_R, HG_p);
  cfd_se3_mul(Gi_R, Gi_p, HG_R, HG_p, HR, Hp);
  // G_i^-1, then J moved into the frame of which the link frame is the child at G^-1
  for (int r = 0; r < 3; r++)
    for (int k = 0; k < 3; k++) Gi_R[3 * r + k] = GR[3 * k + r];
  cfd_rot(Gi_R, Gpos, Gi_p);
  for (int k = 0; k < 3; k++) Gi_p[k] = -Gi_p[k];
  cfd_inertia_to_parent(Gi_R, Gi_p, c->inertia + 36 * i, J);
  for (int r = 0; r < 6; r++)
    for (int k = 0; k < r; k++) J[6 * r + k] = J[6 * k + r];
  return 0;
}

int cfd_chain_in_joint_frames(const cfd_chain* c, cfd_chain* out) {
  int n = c->n;
  if (cfd_chain_alloc(out, n)) return CFD_ERR_ALLOC;
  double* Ginv = malloc(sizeof(double) * 12 * (n > 0 ? n : 1));  // each link's G^-1: R 9, p 3
  if (!Ginv) {
    cfd_chain_free(out);
    return CFD_ERR_ALLOC;
  }
  static const double I3[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  for (int i = 0; i < n; i++) {
    int par = c->parent[i];
    double Gi_R[9], Gi_p[3];  // the parent's G^-1 (the identity for a root), then this link's
    memcpy(Gi_R, par >= 0 ? Ginv + 12 * par : I3, sizeof Gi_R);
    for (int k = 0; k < 3; k++) Gi_p[k] = par >= 0 ? Ginv[12 * par + 9 + k] : 0;
    int slide = 0;
    if (c->kind[i] == CFD_LINK_SCREW) {
      if (joint_frame_link(c, i, Gi_R, Gi_p, out->home_R + 9 * i, out->home_p + 3 * i,
                           out->inertia + 36 * i, &slide)) {
        free(Ginv);
        cfd_chain_free(out);
        return 1;
      }
      for (int k = 0; k < 6; k++) out->screw[6 * i + k] = k == (slide ? 5 : 2);
    } else {  // a ball's links keep their frames (G = I): H' = G_parent^-1 H
      cfd_se3_mul(Gi_R, Gi_p, c->home_R + 9 * i, c->home_p + 3 * i, out->home_R + 9 * i,
                  out->home_p + 3 * i);
      memcpy(out->inertia + 36 * i, c->inertia + 36 * i, 36 * sizeof(double));
      memcpy(out->screw + 6 * i, c->screw + 6 * i, 6 * sizeof(double));
      memcpy(Gi_R, I3, sizeof Gi_R);
      Gi_p[0] = Gi_p[1] = Gi_p[2] = 0;
    }
    memcpy(Ginv + 12 * i, Gi_R, sizeof Gi_R);
    memcpy(Ginv + 12 * i + 9, Gi_p, sizeof Gi_p);
    out->armature[i] = c->armature[i];
    out->parent[i] = c->parent[i];
    out->kind[i] = c->kind[i];
    if (c->body) out->body[i] = c->body[i];
    if (c->jnt) out->jnt[i] = c->jnt[i];
    if (c->dof) out->dof[i] = c->dof[i];
    if (c->qpos) out->qpos[i] = c->qpos[i];
    if (c->qpos0) out->qpos0[i] = c->qpos0[i];
  }
  free(Ginv);
  for (int k = 0; k < 3; k++) out->gravity[k] = c->gravity[k];
  return 0;
}

int cfd_fast_prepare(const cfd_chain* c, double* work) {
  int n = c->n;
  if (!cfd_chain_is_serial(c)) {  // a tree, or ball joints: aba_tree.h's sweeps
    work[0] = 2;
    return 1;
  }
  fast_link* L = model_of(work);
  double Gi_R[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1}, Gi_p[3] = {0, 0, 0};
  for (int i = 0; i < n; i++) {
    double J[36];
    if (joint_frame_link(c, i, Gi_R, Gi_p, L[i].R, L[i].p, J, &L[i].slide)) {
      work[0] = 0;
      return 1;
    }
    sym6_from(J, &L[i].Jb);
    const double* H = L[i].R;
    L[i].p[3] = 0;
    for (int k = 0; k < 3; k++) {
      L[i].Hxy[k] = (v4){H[3 * k], H[3 * k + 1], 0, 0};
      L[i].Hyx[k] = (v4){H[3 * k + 1], -H[3 * k], 0, 0};
      L[i].Hz[k] = (v4){0, 0, H[3 * k + 2], 0};
      L[i].Hc[k] = (v4){H[k], H[3 + k], H[6 + k], 0};
    }
  }
  work[0] = 1;
  return 0;
}

// out = sum_k x[k] M[k] (the rows of a 3x3 times a row vector's entries)
static inline v4 comb3(v4 x, const v4 M[3]) { return x[0] * M[0] + x[1] * M[1] + x[2] * M[2]; }

// The same address, unknown to the compiler: its loads are not merged with earlier ones from it, so
// that an entry used by many products is broadcast from memory at each use (a load, no shuffle)
// rather than held in a register, of which the congruence has too few.
static inline const double* fresh(const double* x) {
  __asm__ volatile("" : "+r"(x));  // volatile: two of them are never merged
  return x;
}

// out (+)= R M for M given by rows, R by rows of 4 in memory: row r is sum_k R[r][k] M[k]
static inline void rot_left(const double* R, const v4 M[3], v4 out[3]) {
  R = fresh(R);
  for (int r = 0; r < 3; r++) out[r] = R[4 * r] * M[0] + R[4 * r + 1] * M[1] + R[4 * r + 2] * M[2];
}
static inline void rot_left_add(const double* R, const v4 M[3], v4 out[3]) {
  R = fresh(R);
  for (int r = 0; r < 3; r++)
    out[r] = out[r] + R[4 * r] * M[0] + R[4 * r + 1] * M[1] + R[4 * r + 2] * M[2];
}

// out += p^ M for M given by rows: row 0 += p1 M2 - p2 M1, row 1 += p2 M0 - p0 M2,
// row 2 += p0 M1 - p1 M0
static inline void add_hat(const double* p, const v4 M[3], v4 out[3]) {
  p = fresh(p);
  out[0] = out[0] + p[1] * M[2] - p[2] * M[1];
  out[1] = out[1] + p[2] * M[0] - p[0] * M[2];
  out[2] = out[2] + p[0] * M[1] - p[1] * M[0];
}

// the transpose of a 3x3 given by rows (fourth lanes zero): 7 shuffles, 4 of them within lanes
static inline void transpose3(v4 M[3]) {
  const v4 z = {0, 0, 0, 0};
  v4 t0 = SHUF2(M[0], M[1], 0, 4, 2, 6);  // a00 a10 a02 a12
  v4 t1 = SHUF2(M[0], M[1], 1, 5, 3, 7);  // a01 a11 0 0
  v4 s0 = SHUF2(M[2], z, 0, 4, 2, 6);     // a20 0 a22 0
  v4 s1 = SHUF2(M[2], z, 1, 5, 3, 7);     // a21 0 0 0
  v4 c2 = SHUF2(t0, M[2], 2, 3, 6, 7);
  M[0] = SHUF2(t0, s0, 0, 1, 4, 5);
  M[1] = SHUF2(t1, s1, 0, 1, 4, 5);
  M[2] = c2;
}

int cfd_fd_fast_prepared(const cfd_chain* c, const double* q, const double* qd, const double* tau,
                         const double* extra_diag, double* qacc, double* work) {
  int n = c->n;
  if (work[0] == 2) return cfd_aba_tree(c, q, qd, tau, extra_diag, qacc, 1, work + 1, 1);
  if (work[0] != 1)  // a screw with pitch (not from MuJoCo): the same sweeps in link frames
    return cfd_aba_core(c, q, qd, tau, extra_diag, qacc, 1, work + 1, 1);
  const fast_link* L = model_of(work);
  fast_scratch* W = (fast_scratch*)(L + n);

  // out: poses, velocities, c_i, bias forces (the sines first: independent, so they overlap)
  double* sines = (double*)(W + n);
  double* cosines = sines + n;
  sin_cos_all(q, n, sines, cosines);
  const v4 ez = {0, 0, 1, 0};
  v4 w = {0, 0, 0, 0}, v = {0, 0, 0, 0};  // the link's twist, angular and linear
  for (int i = 0; i < n; i++) {
    const fast_link* l = &L[i];
    fast_scratch* s = &W[i];
    double sn = l->slide ? 0 : sines[i], co = l->slide ? 1 : cosines[i];
    v4 R[3], p = ld4(l->p) + (l->slide ? q[i] : 0) * l->Hc[2];
    for (int k = 0; k < 3; k++) st4(s->R[k], R[k] = co * l->Hxy[k] + sn * l->Hyx[k] + l->Hz[k]);
    st4(s->Rc[0], co * l->Hc[0] + sn * l->Hc[1]);
    st4(s->Rc[1], co * l->Hc[1] - sn * l->Hc[0]);
    st4(s->Rc[2], l->Hc[2]);
    st4(s->p, p);
    // V = Ad_{T^-1} V_parent + e qd:  w = R^T w,  v = R^T (v + w x p)
    v4 t = v + cross4(w, p);
    w = comb3(w, R);
    v = comb3(t, R);
    double x = qd[i];
    v4 wz = cross4(w, ez), vz;  // w x e_z (before e qd: e_z x e_z = 0)
    if (l->slide) {
      v += x * ez;
      st4(s->cw, (v4){0, 0, 0, 0});
      st4(s->cv, x * wz);
    } else {
      vz = cross4(v, ez);
      w += x * ez;
      st4(s->cw, x * wz);
      st4(s->cv, x * vz);
    }
    // bias force -ad*_V J V = [w x Lm + v x Lf; w x Lf], J V = [A w + B v; B^T w + C v]
    const sym6* J = &l->Jb;
    v4 Lm = comb3(w, J->A) + comb3(v, J->T), Lf = comb3(w, J->B) + comb3(v, J->C);
    st4(s->bm, cross4(w, Lm) + cross4(v, Lf));
    st4(s->bf, cross4(w, Lf));
  }

  // in: articulated inertia IA and bias (m, f), running from the tip
  sym6 I = L[n - 1].Jb;
  v4 m = {0, 0, 0, 0}, f = {0, 0, 0, 0};
  for (int i = n - 1; i >= 0; i--) {
    fast_scratch* w = &W[i];
    v4 bm = ld4(w->bm), bf = ld4(w->bf);
    v4 Ut, Ub;
    double d, u;
    if (L[i].slide) {  // U = IA e_5: column 5 = [B^T row 2; C row 2]
      Ut = I.T[2], Ub = I.C[2];
      d = Ub[2];
      u = (tau[i] - bf[2]) - f[2];
    } else {           // U = IA e_2: column 2 = [A row 2; B row 2]
      Ut = I.A[2], Ub = I.B[2];
      d = Ut[2];
      u = (tau[i] - bm[2]) - m[2];
    }
    d += c->armature[i] + (extra_diag ? extra_diag[i] : 0);
    if (!(d > 0)) return CFD_ERR_SINGULAR;
    double inv = 1 / d;
    // Ia = IA - U U^T / d and pa = pA + Ia c + U u / d, taken to the parent as
    //   X^T Ia X = X^T IA X - U' U'^T / d,   X^T pa = X^T (pA + IA c) + U' (u - U.c) / d
    // with U' = X^T U: the congruence need not wait for d and its division. c_i has two terms
    // in each half; wrenches go up as f_p = R f, m_p = R m + p x f_p. U' / d and (u - U.c) / d
    // are kept for the accelerations.
    v4 Rc[3] = {ld4(w->Rc[0]), ld4(w->Rc[1]), ld4(w->Rc[2])}, p = ld4(w->p);
    const double *cw = w->cw, *cv = w->cv;
    double Uc = Ut[0] * cw[0] + Ut[1] * cw[1] + Ub[0] * cv[0] + Ub[1] * cv[1];
    v4 Uf = comb3(Ub, Rc), Um = comb3(Ut, Rc) + cross4(p, Uf);
    st4(w->wt, Um * inv);
    st4(w->wb, Uf * inv);
    w->s = (u - Uc) * inv;
    if (i == 0) break;
    v4 su = splat(w->s);
    // the sums that do not wait for m and f first: a shorter chain from link to link
    m += bm + ((cw[0] * I.A[0] + cw[1] * I.A[1]) + (cv[0] * I.T[0] + cv[1] * I.T[1]));
    f += bf + ((cw[0] * I.B[0] + cw[1] * I.B[1]) + (cv[0] * I.C[0] + cv[1] * I.C[1]));
    f = comb3(f, Rc);
    m = (comb3(m, Rc) + cross4(p, f)) + Um * su;
    f += Uf * su;
    // X^T IA X with X^T = [[R, p^ R], [0, R]]: L = X^T IA = [[R A + p^ R T, R B + p^ R C],
    // [R T, R C]], then X^T IA X = X^T L^T (symmetric): C' = R (R C)^T, B' = R (R T)^T + p^ C',
    // T' = B'^T (so L's upper right block is not needed), A' = R (R A + p^ R T)^T + p^ T'. Only
    // products by R's and p's entries (from memory) and 3x3 transposes.
    const double* R = w->R[0];
    const double* pp = w->p;
    v4 La[3], Lb[3], Ld[3], B0[3], C0[3], T0[3];
    rot_left(R, I.T, Lb);  // R T
    rot_left(R, I.C, Ld);  // R C
    rot_left(R, I.A, La);  // R A + p^ R T
    add_hat(pp, Lb, La);
    transpose3(Lb);
    transpose3(Ld);
    transpose3(La);
    rot_left(R, Ld, C0);  // C'
    rot_left(R, Lb, B0);  // B'
    add_hat(pp, C0, B0);
    for (int r = 0; r < 3; r++) T0[r] = B0[r];
    transpose3(T0);       // T'
    const sym6* J = &L[i - 1].Jb;
    for (int r = 0; r < 3; r++) I.A[r] = J->A[r];
    rot_left_add(R, La, I.A);  // J_A + A'
    add_hat(pp, T0, I.A);
    // U' U'^T / d last: the division is then off the sweep's critical path
    const double *st = fresh(w->wt), *sb = fresh(w->wb);
    for (int r = 0; r < 3; r++) {
      I.A[r] -= st[r] * Um;
      I.B[r] = (B0[r] + J->B[r]) - st[r] * Uf;
      I.T[r] = (T0[r] + J->T[r]) - sb[r] * Um;
      I.C[r] = (C0[r] + J->C[r]) - sb[r] * Uf;
    }
  }

  // out: accelerations. a_i = X a_parent + c + e qa with qa = s - w.a_parent (w = U'/d, s =
  // (u - U.c)/d from the sweep in), so a_i = (X - e w^T) a_parent + c + e s: one matrix-vector
  // product by broadcasts of a_parent's entries, qa off the chain from link to link.
  v4 aw = {0, 0, 0, 0}, av = {-c->gravity[0], -c->gravity[1], -c->gravity[2], 0};
  for (int i = 0; i < n; i++) {
    const fast_scratch* x = &W[i];
    const double* pp = x->p;
    v4 R[3] = {ld4(x->R[0]), ld4(x->R[1]), ld4(x->R[2])};
    v4 Q[3] = {{0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}};
    add_hat(pp, R, Q);  // p^ R: v_i = R^T v + R^T (w x p) = R^T v + (p^ R)^T w
    v4 Et[3], Eb[3];    // e_z w_k: the columns of e w^T
    const v4u lane2 = {0, 0, ~0ull, 0};
    for (int k = 0; k < 3; k++) {
      Et[k] = (v4)((v4u)splat(x->wt[k]) & lane2);
      Eb[k] = (v4)((v4u)splat(x->wb[k]) & lane2);
    }
    double s = x->s;
    v4 ct = ld4(x->cw), cb = ld4(x->cv), Aw[3], Av[3], Lw[3], Lv[3];
    // the columns of X - e w^T by a_parent's entries: Aw, Av into a_i's angular half (by w's and
    // v's entries), Lw, Lv into its linear half
    if (L[i].slide) {
      cb += s * ez;
      for (int k = 0; k < 3; k++)
        Aw[k] = R[k], Av[k] = (v4){0, 0, 0, 0}, Lw[k] = Q[k] - Et[k], Lv[k] = R[k] - Eb[k];
    } else {
      ct += s * ez;
      for (int k = 0; k < 3; k++) Aw[k] = R[k] - Et[k], Av[k] = -Eb[k], Lw[k] = Q[k], Lv[k] = R[k];
    }
    v4 a0 = splat(aw[0]), a1 = splat(aw[1]), a2 = splat(aw[2]);
    v4 b0 = splat(av[0]), b1 = splat(av[1]), b2 = splat(av[2]);
    v4 dot = a0 * splat(x->wt[0]) + a1 * splat(x->wt[1]) + a2 * splat(x->wt[2]) +
             (b0 * splat(x->wb[0]) + b1 * splat(x->wb[1]) + b2 * splat(x->wb[2]));
    qacc[i] = s - dot[0];
    aw = (ct + a0 * Aw[0] + a1 * Aw[1] + a2 * Aw[2]) + (b0 * Av[0] + b1 * Av[1] + b2 * Av[2]);
    av = (cb + b0 * Lv[0] + b1 * Lv[1] + b2 * Lv[2]) + (a0 * Lw[0] + a1 * Lw[1] + a2 * Lw[2]);
  }
  return CFD_OK;
}

int cfd_fd_fast_cpu(const cfd_chain* c, const double* q, const double* qd, const double* tau,
                    const double* extra_diag, double* qacc, double* work) {
  cfd_fast_prepare(c, work);
  return cfd_fd_fast_prepared(c, q, qd, tau, extra_diag, qacc, work);
}
