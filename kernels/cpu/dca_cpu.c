// DCAe (dca.h): the CPU twin of cuda/dca.cu. The same steps in the same order: the subsystems'
// velocity maps, their composition up the binary assembly tree and the velocities down it, each
// subsystem's handle equations, their assembly up the tree, the boundary conditions down it, and
// each subsystem's accelerations; where the GPU runs a level's subsystems or joins at once, this
// runs them in turn.
#include <string.h>

#include "chain.h"
#include "dca.h"

static int subsystems_at_most(int n, int m) { return m < 1 ? n : (n + m - 1) / m; }

size_t cfd_dca_work_size_ex(int n, int links_per_subsystem) {
  // + the partition (n + 1 ints, n flags)
  return cfd_dca_doubles(n, subsystems_at_most(n, links_per_subsystem)) + (size_t)n + 2;
}

size_t cfd_dca_work_size(int n) { return cfd_dca_work_size_ex(n, CFD_DCA_LINKS_DEFAULT); }

int cfd_fd_dca_cpu_ex(const cfd_chain* c, int links_per_subsystem, const double* q,
                      const double* qd, const double* tau, const double* extra_diag, double* qacc,
                      double* work) {
  int n = c->n, m = links_per_subsystem < 1 ? 1 : links_per_subsystem;
  double* L = work;
  double* tree = L + (size_t)n * CFD_DCA_LINK;
  int pmax = subsystems_at_most(n, m);
  double* s = work + cfd_dca_doubles(n, pmax) - (size_t)pmax * CFD_DCA_SCRATCH;  // (one leaf's)
  int* starts = (int*)(work + cfd_dca_doubles(n, pmax));
  unsigned char* can_end = (unsigned char*)(starts + n + 1);
  for (int i = 0; i < n; i++) can_end[i] = (unsigned char)cfd_abs_can_end(c, i);
  int p = cfd_abs_partition(can_end, n, m, starts);
  int first[CFD_DCA_MAX_LEVELS], count[CFD_DCA_MAX_LEVELS], top = cfd_dca_levels(p, first, count);
#define NODE_AT(l, j) (tree + (size_t)(first[l] + (j)) * CFD_DCA_NODE)
  // 1. velocity maps, up the tree, velocities down it
  for (int k = 0; k < p; k++)
    cfd_dca_velocity_map(c, starts[k], starts[k + 1], q, qd, L + (size_t)CFD_DCA_LINK * starts[k],
                         NODE_AT(0, k) + DCA_NODE_FK);
  for (int l = 1; l <= top; l++)
    for (int j = 0; j < count[l]; j++) {
      double *left = NODE_AT(l - 1, 2 * j), *node = NODE_AT(l, j);
      if (2 * j + 1 < count[l - 1])
        cfd_abs_fk_compose(NODE_AT(l - 1, 2 * j + 1) + DCA_NODE_FK, left + DCA_NODE_FK, node + DCA_NODE_FK);
      else
        memcpy(node + DCA_NODE_FK, left + DCA_NODE_FK, sizeof(double) * 18);
    }
  memset(NODE_AT(top, 0) + DCA_NODE_V, 0, sizeof(double) * 6);  // the world at rest
  for (int l = top; l >= 1; l--)
    for (int j = 0; j < count[l]; j++) {
      double *node = NODE_AT(l, j), *left = NODE_AT(l - 1, 2 * j);
      memcpy(left + DCA_NODE_V, node + DCA_NODE_V, sizeof(double) * 6);
      if (2 * j + 1 < count[l - 1])
        cfd_dca_velocity_apply(left + DCA_NODE_FK, node + DCA_NODE_V, NODE_AT(l - 1, 2 * j + 1) + DCA_NODE_V);
    }
  // 2. each subsystem's handle equations, assembled up the tree
  for (int k = 0; k < p; k++) {
    double* node = NODE_AT(0, k);
    if (cfd_dca_leaf(c, starts[k], starts[k + 1], k == p - 1, qd, tau, extra_diag, node + DCA_NODE_V,
                     L + (size_t)CFD_DCA_LINK * starts[k], node + DCA_NODE_H, s))
      return CFD_ERR_SINGULAR;
  }
  for (int l = 1; l <= top; l++)
    for (int j = 0; j < count[l]; j++) {
      double *left = NODE_AT(l - 1, 2 * j), *node = NODE_AT(l, j);
      if (2 * j + 1 >= count[l - 1])
        memcpy(node + DCA_NODE_H, left + DCA_NODE_H, sizeof(double) * CFD_DCA_HANDLE);
      else if (cfd_dca_assemble(left + DCA_NODE_H, NODE_AT(l - 1, 2 * j + 1) + DCA_NODE_H, node + DCA_NODE_J,
                                node + DCA_NODE_H, node + DCA_NODE_S))
        return CFD_ERR_SINGULAR;
    }
  // 3. the boundary conditions (the base's acceleration, no force past the free end) down the
  // tree, and each subsystem's accelerations
  cfd_dca_base_input(c, L, NODE_AT(top, 0) + DCA_NODE_A);
  memset(NODE_AT(top, 0) + DCA_NODE_F, 0, sizeof(double) * 6);
  for (int l = top; l >= 1; l--)
    for (int j = 0; j < count[l]; j++) {
      double *node = NODE_AT(l, j), *left = NODE_AT(l - 1, 2 * j);
      if (2 * j + 1 < count[l - 1]) {
        double* right = NODE_AT(l - 1, 2 * j + 1);
        cfd_dca_disassemble(node + DCA_NODE_J, node + DCA_NODE_A, node + DCA_NODE_F, left + DCA_NODE_A,
                            left + DCA_NODE_F, right + DCA_NODE_A, right + DCA_NODE_F, 0, 1);
      } else {
        memcpy(left + DCA_NODE_A, node + DCA_NODE_A, sizeof(double) * 6);
        memcpy(left + DCA_NODE_F, node + DCA_NODE_F, sizeof(double) * 6);
      }
    }
  for (int k = 0; k < p; k++) {
    double* node = NODE_AT(0, k);
    cfd_dca_finish(c, starts[k], starts[k + 1], L + (size_t)CFD_DCA_LINK * starts[k], node + DCA_NODE_A,
                   node + DCA_NODE_F, qacc);
  }
#undef NODE_AT
  return CFD_OK;
}

int cfd_fd_dca_cpu(const cfd_chain* c, const double* q, const double* qd, const double* tau,
                   const double* extra_diag, double* qacc, double* work) {
  return cfd_fd_dca_cpu_ex(c, CFD_DCA_LINKS_DEFAULT, q, qd, tau, extra_diag, qacc, work);
}
