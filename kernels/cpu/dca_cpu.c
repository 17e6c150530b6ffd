// DCAe (dca.h): the CPU twin of cuda/dca.cu. The same steps in the same order: the subsystems'
// velocity maps, their composition up the binary assembly tree and the velocities down it, each
// subsystem's handle equations, their assembly up the tree, the boundary conditions down it, and
// each subsystem's accelerations; where the GPU runs a level's subsystems or joins at once, this
// runs them in turn.
#include <string.h>

#include "chain.h"
#include "dca.h"

// per tree node: the velocity map (18), handle equations, the join (internal nodes), and the
// node's inputs: the velocity before it, A_in, f_out
enum { NODE_FK = 0, NODE_H = 18, NODE_J = NODE_H + CFD_DCA_HANDLE, NODE_V = NODE_J + CFD_DCA_JOIN,
       NODE_A = NODE_V + 6, NODE_F = NODE_A + 6, NODE = NODE_F + 6 };

static int subsystems_at_most(int n, int m) { return m < 1 ? n : (n + m - 1) / m; }

size_t cfd_dca_work_size_ex(int n, int links_per_subsystem) {
  size_t p = (size_t)subsystems_at_most(n, links_per_subsystem);
  // links, the tree's nodes (p + ceil(p / 2) + ... < 2p + its levels), a leaf's scratch, the
  // partition (n + 1 ints, n flags)
  return (size_t)n * CFD_DCA_LINK + (2 * p + 34) * NODE + CFD_DCA_SCRATCH + (size_t)n + 2;
}

size_t cfd_dca_work_size(int n) { return cfd_dca_work_size_ex(n, CFD_DCA_LINKS_DEFAULT); }

int cfd_fd_dca_cpu_ex(const cfd_chain* c, int links_per_subsystem, const double* q,
                      const double* qd, const double* tau, const double* extra_diag, double* qacc,
                      double* work) {
  int n = c->n, m = links_per_subsystem < 1 ? 1 : links_per_subsystem;
  double* L = work;
  double* tree = L + (size_t)n * CFD_DCA_LINK;
  int pmax = subsystems_at_most(n, m);
  double* s = tree + (2 * (size_t)pmax + 34) * NODE;
  int* starts = (int*)(s + CFD_DCA_SCRATCH);
  unsigned char* can_end = (unsigned char*)(starts + n + 1);
  for (int i = 0; i < n; i++) can_end[i] = (unsigned char)cfd_abs_can_end(c, i);
  int p = cfd_abs_partition(can_end, n, m, starts);
  // the tree's levels: level 0 the subsystems, level l + 1 joins level l's pairs (an odd last
  // node passes through); first[l] is level l's first node
  int first[34], count[34], top = 0;
  first[0] = 0, count[0] = p;
  while (count[top] > 1) {
    first[top + 1] = first[top] + count[top];
    count[top + 1] = (count[top] + 1) / 2;
    top++;
  }
#define NODE_AT(l, j) (tree + (size_t)(first[l] + (j)) * NODE)
  // 1. velocity maps, up the tree, velocities down it
  for (int k = 0; k < p; k++)
    cfd_dca_velocity_map(c, starts[k], starts[k + 1], q, qd, L + (size_t)CFD_DCA_LINK * starts[k],
                         NODE_AT(0, k) + NODE_FK);
  for (int l = 1; l <= top; l++)
    for (int j = 0; j < count[l]; j++) {
      double *left = NODE_AT(l - 1, 2 * j), *node = NODE_AT(l, j);
      if (2 * j + 1 < count[l - 1])
        cfd_abs_fk_compose(NODE_AT(l - 1, 2 * j + 1) + NODE_FK, left + NODE_FK, node + NODE_FK);
      else
        memcpy(node + NODE_FK, left + NODE_FK, sizeof(double) * 18);
    }
  memset(NODE_AT(top, 0) + NODE_V, 0, sizeof(double) * 6);  // the world at rest
  for (int l = top; l >= 1; l--)
    for (int j = 0; j < count[l]; j++) {
      double *node = NODE_AT(l, j), *left = NODE_AT(l - 1, 2 * j);
      memcpy(left + NODE_V, node + NODE_V, sizeof(double) * 6);
      if (2 * j + 1 < count[l - 1])
        cfd_dca_velocity_apply(left + NODE_FK, node + NODE_V, NODE_AT(l - 1, 2 * j + 1) + NODE_V);
    }
  // 2. each subsystem's handle equations, assembled up the tree
  for (int k = 0; k < p; k++) {
    double* node = NODE_AT(0, k);
    if (cfd_dca_leaf(c, starts[k], starts[k + 1], k == p - 1, qd, tau, extra_diag, node + NODE_V,
                     L + (size_t)CFD_DCA_LINK * starts[k], node + NODE_H, s))
      return CFD_ERR_SINGULAR;
  }
  for (int l = 1; l <= top; l++)
    for (int j = 0; j < count[l]; j++) {
      double *left = NODE_AT(l - 1, 2 * j), *node = NODE_AT(l, j);
      if (2 * j + 1 >= count[l - 1])
        memcpy(node + NODE_H, left + NODE_H, sizeof(double) * CFD_DCA_HANDLE);
      else if (cfd_dca_assemble(left + NODE_H, NODE_AT(l - 1, 2 * j + 1) + NODE_H, node + NODE_J,
                                node + NODE_H))
        return CFD_ERR_SINGULAR;
    }
  // 3. the boundary conditions (the base's acceleration, no force past the free end) down the
  // tree, and each subsystem's accelerations
  cfd_dca_base_input(c, L, NODE_AT(top, 0) + NODE_A);
  memset(NODE_AT(top, 0) + NODE_F, 0, sizeof(double) * 6);
  for (int l = top; l >= 1; l--)
    for (int j = 0; j < count[l]; j++) {
      double *node = NODE_AT(l, j), *left = NODE_AT(l - 1, 2 * j);
      memcpy(left + NODE_A, node + NODE_A, sizeof(double) * 6);
      if (2 * j + 1 < count[l - 1]) {
        double* right = NODE_AT(l - 1, 2 * j + 1);
        cfd_dca_disassemble(node + NODE_J, node + NODE_A, node + NODE_F, right + NODE_A,
                            left + NODE_F);
        memcpy(right + NODE_F, node + NODE_F, sizeof(double) * 6);
      } else {
        memcpy(left + NODE_F, node + NODE_F, sizeof(double) * 6);
      }
    }
  for (int k = 0; k < p; k++) {
    double* node = NODE_AT(0, k);
    cfd_dca_finish(c, starts[k], starts[k + 1], L + (size_t)CFD_DCA_LINK * starts[k], node + NODE_A,
                   node + NODE_F, qacc);
  }
#undef NODE_AT
  return CFD_OK;
}

int cfd_fd_dca_cpu(const cfd_chain* c, const double* q, const double* qd, const double* tau,
                   const double* extra_diag, double* qacc, double* work) {
  return cfd_fd_dca_cpu_ex(c, CFD_DCA_LINKS_DEFAULT, q, qd, tau, extra_diag, qacc, work);
}
