// The fast CPU path: the structured articulated-body algorithm of aba_core.h (shared with the GPU
// batch kernel), on one state with contiguous scratch.
#include "aba_core.h"
#include "chain.h"

size_t cfd_fast_work_size(int n) { return (size_t)n * CFD_ABA_LINK_DOUBLES; }

int cfd_fd_fast_cpu(const cfd_chain* c, const double* q, const double* qd, const double* tau,
                    const double* extra_diag, double* qacc, double* work) {
  return cfd_aba_core(c, q, qd, tau, extra_diag, qacc, 1, work, 1);
}
