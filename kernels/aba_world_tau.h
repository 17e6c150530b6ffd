// aba_world_tau.h: the second half of the world-coordinate ABA in blocks of 32 links
// (cuda/aba_world_blocks.cuh) for a split call: the bias forces' and accelerations' sweeps, from
// the articulated inertias.
//
// Only the bias forces' sweep and the accelerations' need tau (through u_i = tau_i - S_i.pA_i).
// So a GPU split call (cfd_gpu_fd_begin) runs the kernel's sweep out (poses, velocities, c_i, the
// rigid bias forces) and the inertias' part of its sweep in (U_i, d_i, IA_i^a c_i: the serial
// rank-one updates, the kernel's cost) while the caller computes the forces (MuJoCo's stages in
// chainfd_step), and brings down per link, about its block's origin o_b as the kernel has them:
// the world screw S_i, w_i = U_i / d_i, 1/d_i, beta_i = S_i.b_i (b_i the link's rigid bias
// force), c_i and h_i = b_i + IA_i^a c_i. What is left is O(n) multiply-adds on 6-vectors, done
// where tau is (cfd_gpu_fd_finish, on the host; host code from here on):
//   in (tip to base):  u_i = tau_i - beta_i - S_i.W,  W += h_i + w_i u_i
//     (W: the bias force handed to the link before, sum_{k>i} b_k + IA_k^a c_k + U_k u_k / d_k)
//   out (base to tip): qa_i = u_i / d_i - w_i.(A + c_i),  A += c_i + S_i qa_i
//     (A: the acceleration of the link before, -gravity at the base)
// the kernel's own recurrences (its right-looking sweep's u and G, then its unit triangular
// solve); W and A cross from one block's origin to the next as the kernel moves what it hands
// over (r_b = o_{b+1} - o_b). CPU twin of the first half: cpu/abia_split_cpu.c.
#ifndef CHAINFD_ABA_WORLD_TAU_H
#define CHAINFD_ABA_WORLD_TAU_H

#include <stddef.h>

#include "cfd_math.h"

#define CFD_AWT_BLOCK 32  // links per block, as the world-blocks kernel has them
enum { CFD_AWT_LINK_DOUBLES = 26 };  // per link: S 6, w 6, 1/d, beta, c 6, h 6

// A state's factors block by block, each block's links side by side: entry k of link i at
// cfd_awt_at(i) + CFD_AWT_BLOCK * k, so that a warp writes each entry of its block's links as one
// contiguous run (the kernel writes them straight into page-locked host memory, where runs
// become few, full transfers). Then r_b for every block but the last, then the state's status
// (a cfd_status, 0 when every pivot was positive).
CFD_HD size_t cfd_awt_at(int i) {
  return (size_t)(i / CFD_AWT_BLOCK) * CFD_AWT_BLOCK * CFD_AWT_LINK_DOUBLES + i % CFD_AWT_BLOCK;
}

CFD_HD size_t cfd_awt_rb(int n, int b) {
  return (size_t)((n + CFD_AWT_BLOCK - 1) / CFD_AWT_BLOCK) * CFD_AWT_BLOCK * CFD_AWT_LINK_DOUBLES +
         3 * (size_t)b;
}

CFD_HD size_t cfd_awt_doubles(int n) { return cfd_awt_rb(n, (n - 1) / CFD_AWT_BLOCK) + 1; }

CFD_HD int cfd_awt_status(int n, const double* f) { return (int)f[cfd_awt_doubles(n) - 1]; }

// A 6-vector dot product of a (entries CFD_AWT_BLOCK apart, as the factors hold them) and b,
// summed as a tree: the sweeps below wait on it once per link.
static inline double cfd_awt_dot6(const double* a, const double b[6]) {
  const int s = CFD_AWT_BLOCK;
  return (a[0] * b[0] + a[s] * b[1]) + (a[2 * s] * b[2] + a[3 * s] * b[3]) +
         (a[4 * s] * b[4] + a[5 * s] * b[5]);
}

// The host's sweeps for two states at once (f[s], tau[s]): each state's sweeps are chains of
// dependent multiply-adds, so two states go link by link together, their chains interleaved: the
// second fills the first's latency and costs little more than one alone. One state: pass it
// twice, the second's results to scratch.
//
// in, block b's share (blocks from the last to 0, W zero before the last): u / d of each of its
// links into su[s] (n each), W handed on. The GPU's split call runs each block's share as soon as
// the kernel has flagged the block's factors as there, while the kernel turns the blocks below.
static inline void cfd_awt_in_block(int n, int b, const double* const f[2],
                                    const double* const tau[2], double W[2][6],
                                    double* const su[2]) {
  const int s32 = CFD_AWT_BLOCK, last = (n - 1) / CFD_AWT_BLOCK;  // s32: entry to entry
  // (The GPU's factors reach this core's caches from the bus, a large share of the sweep's cost;
  // software prefetch, a block ahead or all at first, does not hide it.)
  for (int s = 0; s < 2 && b < last; s++) {  // W about o_{b+1} to about o_b: [m + r x f; f]
    double t[3];
    cfd_cross(f[s] + cfd_awt_rb(n, b), W[s] + 3, t);
    for (int k = 0; k < 3; k++) W[s][k] += t[k];
  }
  int end = b == last ? n : (b + 1) * CFD_AWT_BLOCK;
  for (int i = end - 1; i >= b * CFD_AWT_BLOCK; i--)
    for (int s = 0; s < 2; s++) {
      const double* L = f[s] + cfd_awt_at(i);
      double u = tau[s][i] - L[13 * s32] - cfd_awt_dot6(L, W[s]);
      for (int k = 0; k < 6; k++) W[s][k] += L[(20 + k) * s32] + L[(6 + k) * s32] * u;
      su[s][i] = u * L[12 * s32];
    }
}

// out, after every block's in: qacc (n each) from su (which qacc may alias) and gravity
static inline void cfd_awt_out(int n, const double* const f[2], const double gravity[3],
                               const double* const su[2], double* const qacc[2]) {
  const int s32 = CFD_AWT_BLOCK, last = (n - 1) / CFD_AWT_BLOCK;
  double A[2][6];
  for (int s = 0; s < 2; s++)
    for (int k = 0; k < 3; k++) A[s][k] = 0, A[s][3 + k] = -gravity[k];
  for (int b = 0; b <= last; b++) {
    int end = b == last ? n : (b + 1) * CFD_AWT_BLOCK;
    for (int i = b * CFD_AWT_BLOCK; i < end; i++)
      for (int s = 0; s < 2; s++) {
        const double* L = f[s] + cfd_awt_at(i);
        for (int k = 0; k < 6; k++) A[s][k] += L[(14 + k) * s32];
        double qa = su[s][i] - cfd_awt_dot6(L + 6 * s32, A[s]);
        for (int k = 0; k < 6; k++) A[s][k] += L[k * s32] * qa;
        qacc[s][i] = qa;
      }
    for (int s = 0; s < 2 && b < last; s++) {  // A about o_b to about o_{b+1}: [w; v + w x r]
      double t[3];
      cfd_cross(A[s], f[s] + cfd_awt_rb(n, b), t);
      for (int k = 0; k < 3; k++) A[s][3 + k] += t[k];
    }
  }
}

// Both sweeps: qacc (n each) of two states from their factors, tau and gravity. qacc may not
// alias tau.
static inline void cfd_awt_qacc2(int n, const double* const f[2], const double* const tau[2],
                                 const double gravity[3], double* const qacc[2]) {
  double W[2][6] = {{0}};
  for (int b = (n - 1) / CFD_AWT_BLOCK; b >= 0; b--) cfd_awt_in_block(n, b, f, tau, W, qacc);
  cfd_awt_out(n, f, gravity, (const double* const*)qacc, qacc);
}

#endif  // CHAINFD_ABA_WORLD_TAU_H
