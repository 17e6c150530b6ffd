// The split ABA of cuda.abia's split call (aba_world_tau.h) on the CPU: the first half's factors,
// as the world warps kernel writes them (cfd_awb_qacc_warps<true>, cuda/aba_world_blocks.cuh),
// then the host's second half. The CPU twin of the split call, so that its second half and the
// factors' definitions are checked without a GPU.
//
// The kernel builds each block's quantities about the block's origin; here they are built about
// the world origin, one link after another as in aba_world.h, and moved to the block's origin
// once: twists [w; v] to [w; v + w x o_b], wrenches [m; f] to [m + f x o_b; f]. The same values up
// to rounding (the world origin costs rounding with the chain's extent: for checking only).
#include <stdlib.h>

#include "aba_world.h"
#include "aba_world_tau.h"
#include "chain.h"

// per link while the factors are built, about the world origin: S, c, rigid bias, world inertia
// (aba_world.h's J10), the link's origin p
enum { SPLIT_S = 0, SPLIT_C = 6, SPLIT_BIAS = 12, SPLIT_J = 18, SPLIT_P = 28, SPLIT_LINK = 31 };

size_t cfd_abia_split_work_size(int n) {
  return (size_t)n * SPLIT_LINK + cfd_awt_doubles(n) + (size_t)n;  // + a qacc's scratch
}

// The link whose origin is block b's: its middle link's (the last link's in a last block shorter
// than that), as the kernel's
static int middle(int n, int b) {
  int i = b * CFD_AWT_BLOCK + 15;
  return i < n ? i : n - 1;
}

static void twist_about(const double o[3], double x[6]) {
  double t[3];
  cfd_cross(x, o, t);
  for (int k = 0; k < 3; k++) x[3 + k] += t[k];
}

static void wrench_about(const double o[3], double x[6]) {
  double t[3];
  cfd_cross(x + 3, o, t);
  for (int k = 0; k < 3; k++) x[k] += t[k];
}

int cfd_abia_split_factors_cpu(const cfd_chain* c, int jf, const double* q, const double* qd,
                               const double* extra_diag, double* f, double* work) {
  int n = c->n, nb = (n + CFD_AWT_BLOCK - 1) / CFD_AWT_BLOCK;
  // out: world poses, screws, velocities, c and the rigid bias forces
  double R[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1}, p[3] = {0, 0, 0}, V[6] = {0, 0, 0, 0, 0, 0};
  for (int i = 0; i < n; i++) {
    double *L = work + (size_t)SPLIT_LINK * i, s, co, Sqd[6];
    cfd_abw_sincos(c, jf, i, q[i], &s, &co);
    cfd_abw_next(c, jf, i, q[i], s, co, R, p);
    cfd_abw_screw(c->screw + 6 * i, jf, R, p, L + SPLIT_S);
    for (int k = 0; k < 6; k++) Sqd[k] = L[SPLIT_S + k] * qd[i], V[k] += Sqd[k];
    cfd_ad(V, Sqd, L + SPLIT_C);
    cfd_abw_rigid(c->inertia + 36 * i, R, p, L + SPLIT_J);
    cfd_abw_bias(L + SPLIT_J, V, L + SPLIT_BIAS);
    for (int k = 0; k < 3; k++) L[SPLIT_P + k] = p[k];
  }
  // in: the articulated inertias; per link the factors, then moved to the block's origin
  cfd_abw_inertia IA = {{0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0}};
  int status = CFD_OK;
  for (int i = n - 1; i >= 0; i--) {
    const double* L = work + (size_t)SPLIT_LINK * i;
    double F[CFD_AWT_LINK_DOUBLES], U[6], Ic[6];
    cfd_abw_add(&IA, L + SPLIT_J);
    cfd_abw_mul(&IA, L + SPLIT_S, U);
    double d = cfd_dot6(L + SPLIT_S, U) + c->armature[i] + (extra_diag ? extra_diag[i] : 0);
    if (!(d > 0)) status = CFD_ERR_SINGULAR, d = 1;  // as the kernel: on with d = 1
    double inv = 1 / d, *w = F + 6;
    for (int k = 0; k < 6; k++) w[k] = U[k] * inv;
    cfd_abw_sub_outer(&IA, w, U);  // IA^a, handed to the parent by addition (one origin for all)
    cfd_abw_mul(&IA, L + SPLIT_C, Ic);
    for (int k = 0; k < 6; k++) {
      F[k] = L[SPLIT_S + k], F[14 + k] = L[SPLIT_C + k];
      F[20 + k] = L[SPLIT_BIAS + k] + Ic[k];
    }
    F[12] = inv;
    F[13] = cfd_dot6(L + SPLIT_S, L + SPLIT_BIAS);
    // to the block's origin
    const double* o = work + (size_t)SPLIT_LINK * middle(n, i / CFD_AWT_BLOCK) + SPLIT_P;
    twist_about(o, F);
    twist_about(o, F + 14);
    wrench_about(o, F + 6);
    wrench_about(o, F + 20);
    for (int k = 0; k < CFD_AWT_LINK_DOUBLES; k++) f[cfd_awt_at(i) + CFD_AWT_BLOCK * k] = F[k];
  }
  for (int b = 0; b + 1 < nb; b++) {  // r_b = o_{b+1} - o_b
    const double *o0 = work + (size_t)SPLIT_LINK * middle(n, b) + SPLIT_P,
                 *o1 = work + (size_t)SPLIT_LINK * middle(n, b + 1) + SPLIT_P;
    for (int k = 0; k < 3; k++) f[cfd_awt_rb(n, b) + k] = o1[k] - o0[k];
  }
  f[cfd_awt_doubles(n) - 1] = status;
  return status;
}

int cfd_fd_abia_split_cpu(const cfd_chain* c, int jf, const double* q, const double* qd,
                          const double* tau, const double* extra_diag, double* qacc, double* work) {
  int n = c->n;
  double* f = work + (size_t)n * SPLIT_LINK;
  int st = cfd_abia_split_factors_cpu(c, jf, q, qd, extra_diag, f, work);
  if (st) return st;
  const double* fs[2] = {f, f};
  const double* ts[2] = {tau, tau};
  double* out[2] = {qacc, f + cfd_awt_doubles(n)};
  cfd_awt_qacc2(n, fs, ts, c->gravity, out);
  return CFD_OK;
}
