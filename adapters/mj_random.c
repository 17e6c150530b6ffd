#include <math.h>

#include "mj_random.h"

void cfd_random_state(const mjModel* m, mjData* d, cfd_rng* r, int what) {
  const double pi = 3.14159265358979323846;
  if (what & CFD_RANDOM_QPOS)
    for (int j = 0; j < m->njnt; j++) {
      int a = m->jnt_qposadr[j];
      if (m->jnt_type[j] == mjJNT_HINGE) d->qpos[a] = m->qpos0[a] + cfd_rng_uniform(r, -pi, pi);
      else if (m->jnt_type[j] == mjJNT_SLIDE) d->qpos[a] = m->qpos0[a] + cfd_rng_uniform(r, -0.5, 0.5);
      else {  // ball or free: a rotation drawn uniformly (a normalised 4-d Gaussian), a position near qpos0
        int free = m->jnt_type[j] == mjJNT_FREE;
        for (int k = 0; free && k < 3; k++, a++) d->qpos[a] = m->qpos0[a] + cfd_rng_uniform(r, -0.5, 0.5);
        double x[4], norm = 0;
        for (int k = 0; k < 4; k++) {
          double u1 = cfd_rng_uniform(r, 1e-12, 1), u2 = cfd_rng_uniform(r, 0, 2 * pi);
          x[k] = sqrt(-2 * log(u1)) * cos(u2);
          norm += x[k] * x[k];
        }
        norm = sqrt(norm);
        for (int k = 0; k < 4; k++) d->qpos[a + k] = x[k] / norm;
      }
    }
  if (what & CFD_RANDOM_QVEL)
    for (int i = 0; i < m->nv; i++) d->qvel[i] = cfd_rng_uniform(r, -2, 2);
  if (what & CFD_RANDOM_CTRL) {
    for (int i = 0; i < m->nu; i++) {
      const double* range = m->actuator_ctrlrange + 2 * i;
      int limited = m->actuator_ctrllimited[i] && range[0] < range[1];
      d->ctrl[i] = limited ? cfd_rng_uniform(r, range[0], range[1]) : cfd_rng_uniform(r, -1, 1);
    }
    for (int i = 0; i < m->na; i++) d->act[i] = cfd_rng_uniform(r, 0, 1);
  }
  if (what & CFD_RANDOM_QFRC)
    for (int i = 0; i < m->nv; i++) d->qfrc_applied[i] = cfd_rng_uniform(r, -1, 1);
  if (what & CFD_RANDOM_XFRC)
    for (int k = 6; k < 6 * m->nbody; k++) d->xfrc_applied[k] = cfd_rng_uniform(r, -1, 1);
}
