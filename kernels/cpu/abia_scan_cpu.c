// ABIA as scans over blocks of links (aba_scan.h): the CPU twin of cuda/abia_scan.cu. The same
// steps in the same order, each scan a Hillis-Steele scan over all blocks (n log n work here, where
// the GPU does each step's blocks at once; the GPU's scans run in two levels, thread block then
// cluster, which groups the same compositions otherwise: the two agree to rounding), so that the
// GPU is checked against it and the scan form against the sequential sweeps.
#include "aba_scan.h"
#include "chain.h"

size_t cfd_abia_scan_work_size(int n) {
  // + the partition: starts (n + 1 ints) and can_end (n bytes)
  return (size_t)n * (CFD_ABS_LINK + CFD_ABS_BLOCK) + (size_t)n + 2;
}

// one Hillis-Steele scan of nb elements of `kind` between buffers buf[0], buf[1], starting in
// buf[cur]; returns the buffer holding the result, or -1 on a zero pivot
static int scan(int kind, int nb, double* buf[2], int cur) {
  int bad = 0;
  for (int k = 1; k < nb; k *= 2, cur ^= 1)
    for (int b = 0; b < nb; b++) bad |= cfd_abs_scan_step(kind, b, nb, k, buf[cur], buf[cur ^ 1]);
  return bad ? -1 : cur;
}

int cfd_fd_abia_scan_cpu(const cfd_chain* c, int links_per_block, const double* q,
                         const double* qd, const double* tau, const double* extra_diag,
                         double* qacc, double* work) {
  int n = c->n;
  double* links = work;
  double* blocks = work + (size_t)n * CFD_ABS_LINK;
  int* starts = (int*)(blocks + (size_t)n * CFD_ABS_BLOCK);
  unsigned char* can_end = (unsigned char*)(starts + n + 1);
  for (int i = 0; i < n; i++) can_end[i] = (unsigned char)cfd_abs_can_end(c, i);
  int nb = cfd_abs_partition(can_end, n, links_per_block, starts);
  double* fk[2] = {blocks, blocks + (size_t)CFD_ABS_FK * nb};
  double* ric[2] = {fk[1] + (size_t)CFD_ABS_FK * nb, fk[1] + (size_t)(CFD_ABS_FK + CFD_ABS_RIC) * nb};
  double* aff[2] = {ric[1] + (size_t)CFD_ABS_RIC * nb, ric[1] + (size_t)(CFD_ABS_RIC + CFD_ABS_AFF) * nb};
  double* keep = aff[1] + (size_t)CFD_ABS_AFF * nb;
  int bad = 0;
  // 1. each block's velocity and inertia maps, then both scans
  for (int b = 0; b < nb; b++)
    bad |= cfd_abs_block_maps(c, starts[b], starts[b + 1], q, qd, extra_diag, links,
                              fk[0] + CFD_ABS_FK * b, ric[0] + CFD_ABS_RIC * b);
  int f = scan(CFD_ABS_SCAN_FK, nb, fk, 0), r = scan(CFD_ABS_SCAN_RIC, nb, ric, 0);
  if (bad || r < 0) return CFD_ERR_SINGULAR;
  // 2. each block's inertias from what it is handed, and its bias map; the bias scan
  for (int b = 0; b < nb; b++)
    bad |= cfd_abs_block_inertias(c, starts[b], starts[b + 1], qd, tau, extra_diag,
                                  b > 0 ? fk[f] + CFD_ABS_FK * (b - 1) + 12 : NULL,
                                  b + 1 < nb ? ric[r] + CFD_ABS_RIC * (b + 1) : NULL, links,
                                  aff[0] + CFD_ABS_AFF * b, keep + 36 * b);
  if (bad) return CFD_ERR_SINGULAR;
  int p = scan(CFD_ABS_SCAN_BIAS, nb, aff, 0);
  // 3. each block's u_i and acceleration map (into the other buffer); the acceleration scan
  for (int b = 0; b < nb; b++)
    cfd_abs_block_bias(c, starts[b], starts[b + 1],
                       b + 1 < nb ? aff[p] + CFD_ABS_AFF * (b + 1) + 36 : NULL, links,
                       keep + 36 * b, aff[p ^ 1] + CFD_ABS_AFF * b);
  int a = scan(CFD_ABS_SCAN_ACC, nb, aff, p ^ 1);
  // 4. each block's accelerations
  for (int b = 0; b < nb; b++)
    cfd_abs_block_qacc(starts[b], starts[b + 1],
                       b > 0 ? aff[a] + CFD_ABS_AFF * (b - 1) + 36 : NULL, links, qacc);
  return CFD_OK;
}
