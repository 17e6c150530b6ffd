// mjData -> the chain's state (q, qd) and total joint force tau, as MuJoCo itself sums it.
#include <string.h>

#include "cfd_math.h"
#include "mj_chain.h"

void cfd_xfrc_to_joints(const mjModel* m, const mjData* d, const cfd_chain* c, double* tau,
                        double* work) {
  // Each body's xfrc_applied acts at its centre of mass (xipos). Move it to the point where cdof's
  // linear parts are expressed (its tree's subtree_com) and sum it over subtrees, children first.
  double* acc = work;
  memset(acc, 0, sizeof(double) * 6 * m->nbody);
  for (int b = m->nbody - 1; b > 0; b--) {
    const double* x = d->xfrc_applied + 6 * b;  // [force; torque]
    double* a = acc + 6 * b;                    // [torque about the com point; force]
    if (x[0] || x[1] || x[2] || x[3] || x[4] || x[5]) {
      const double* com = d->subtree_com + 3 * m->body_rootid[b];
      double r[3] = {d->xipos[3 * b] - com[0], d->xipos[3 * b + 1] - com[1],
                     d->xipos[3 * b + 2] - com[2]};
      double t[3];
      cfd_cross(r, x, t);
      for (int k = 0; k < 3; k++) {
        a[k] += x[3 + k] + t[k];
        a[3 + k] += x[k];
      }
    }
    double* ap = acc + 6 * m->body_parentid[b];
    for (int k = 0; k < 6; k++) ap[k] += a[k];
  }
  for (int i = 0; i < c->n; i++) tau[i] += cfd_dot6(d->cdof + 6 * c->dof[i], acc + 6 * c->body[i]);
}

void cfd_state_q_qd(const mjData* d, const cfd_chain* c, double* q, double* qd) {
  cfd_chain_q_from_qpos(c, d->qpos, q);
  for (int i = 0; i < c->n; i++) qd[i] = d->qvel[c->dof[i]];
}

void cfd_state_from_data(const mjModel* m, const mjData* d, const cfd_chain* c, double* q,
                         double* qd, double* tau, double* work) {
  cfd_state_q_qd(d, c, q, qd);
  for (int i = 0; i < c->n; i++) {
    int v = c->dof[i];
    tau[i] = d->qfrc_passive[v] + d->qfrc_actuator[v] + d->qfrc_applied[v];
  }
  int any = 0;  // no early exit: a branch-free loop the compiler vectorises (mostly all zero)
  for (int k = 6; k < 6 * m->nbody; k++) any |= d->xfrc_applied[k] != 0;
  if (any) cfd_xfrc_to_joints(m, d, c, tau, work);
}
