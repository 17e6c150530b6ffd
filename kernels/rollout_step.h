// rollout_step.h: one simulation step of one instance, written once for the CPU rollout
// (plugin/rollout.c) and the GPU rollout kernel (cuda/rollout.cu), with MuJoCo's semantics for the
// subset of models a rollout accepts (plugin/rollout.c refuses the rest):
//   passive:   -stiffness (qpos - springref) - damping qvel        (joint, plus actuator damping)
//   actuators: on joints, one control each, force = gain * ctrl + bias with
//              gain = g0 + g1 length + g2 velocity, bias = b0 + b1 length + b2 velocity,
//              length = gear qpos, velocity = gear qvel; ctrl and force clamped to their ranges;
//              joint force gear * force
//   dynamics:  (M + diag) qacc = tau - bias   (the structured ABA of aba_core.h)
//   Euler:     diag = h damping when MuJoCo integrates damping implicitly
//   implicitfast: diag = -h qDeriv = h (damping - gear^2 (g2 ctrl + b2))
//   then qvel += h qacc, qpos += h qvel (hinge and slide joints).
#ifndef CHAINFD_ROLLOUT_STEP_H
#define CHAINFD_ROLLOUT_STEP_H

#include "aba_core.h"

enum { CFD_INT_EULER = 0, CFD_INT_IMPLICITFAST = 1 };

typedef struct cfd_rollout_params {
  int n, nu;            // dofs (= links), controls (= actuators)
  double h;             // timestep
  int integrator;       // CFD_INT_EULER or CFD_INT_IMPLICITFAST
  int implicit_damping; // Euler: damping in the joint-diagonal term (MuJoCo's eulerdamp)
  const double* qpos0;      // n: joint zero (the chain's q = qpos - qpos0)
  const double* stiffness;  // n
  const double* springref;  // n
  const double* damping;    // n: joint damping plus actuator damping * gear^2
  const int* act_dof;       // nu
  const double* gear;       // nu
  const double* gain;       // nu x 3: g0, g1, g2
  const double* bias;       // nu x 3: b0, b1, b2
  const double* ctrlrange;  // nu x 2; lo >= hi: not clamped
  const double* forcerange; // nu x 2; lo >= hi: not clamped
} cfd_rollout_params;

// Per-instance state and scratch, entries `stride` apart (a GPU interleaves its instances): the
// ABA's (lean on the GPU, see aba_core.h), then q, tau, diag, qacc, qpos, qvel (n each).
CFD_HD long cfd_rollout_doubles(int n, int lean) { return (long)(cfd_aba_link_doubles(lean) + 6) * n; }

CFD_HD double* cfd_rollout_qpos(double* work, int n, long stride, int lean) {
  return work + (long)(cfd_aba_link_doubles(lean) + 4) * n * stride;
}
CFD_HD double* cfd_rollout_qvel(double* work, int n, long stride, int lean) {
  return work + (long)(cfd_aba_link_doubles(lean) + 5) * n * stride;
}

// Dof i's chain coordinate q = qpos - qpos0, passive force (into tau) and joint-diagonal term.
CFD_HD void cfd_rollout_passive(const cfd_rollout_params* p, int i, double x, double v, double* q,
                                double* tau, double* diag) {
  int implicit = p->integrator == CFD_INT_IMPLICITFAST || p->implicit_damping;
  *q = x - p->qpos0[i];
  *tau = -p->stiffness[i] * (x - p->springref[i]) - p->damping[i] * v;
  *diag = implicit ? p->h * p->damping[i] : 0;
}

// Actuator a under control u on its dof at position x, velocity v: its joint force added to *tau
// and, implicitfast, its velocity derivative to *diag.
CFD_HD void cfd_rollout_actuator_dof(const cfd_rollout_params* p, int a, double u, double x,
                                     double v, double* tau, double* diag) {
  double g = p->gear[a], h = p->h;
  const double* cr = p->ctrlrange + 2 * a;
  if (cr[0] < cr[1]) u = fmin(fmax(u, cr[0]), cr[1]);
  double len = g * x, vel = g * v;
  const double* G = p->gain + 3 * a;
  const double* Bi = p->bias + 3 * a;
  double force = (G[0] + G[1] * len + G[2] * vel) * u + Bi[0] + Bi[1] * len + Bi[2] * vel;
  const double* fr = p->forcerange + 2 * a;
  int saturated = 0;  // a saturated force does not vary with velocity (MuJoCo's derivative too)
  if (fr[0] < fr[1]) {
    saturated = force <= fr[0] || force >= fr[1];
    force = fmin(fmax(force, fr[0]), fr[1]);
  }
  *tau += g * force;
  if (p->integrator == CFD_INT_IMPLICITFAST && !saturated) *diag -= h * g * g * (G[2] * u + Bi[2]);
}

// The same with qpos, qvel, tau, diag per dof, entries `stride` apart.
CFD_HD void cfd_rollout_actuator(const cfd_rollout_params* p, int a, double u, const double* qpos,
                                 const double* qvel, double* tau, double* diag, long stride) {
  long i = p->act_dof[a] * stride;
  cfd_rollout_actuator_dof(p, a, u, qpos[i], qvel[i], tau + i, diag + i);
}

// One step of the instance whose state and scratch are in work, under controls ctrl (nu).
// Returns 0, or the ABA's status (a singular joint-space system).
CFD_HD int cfd_rollout_step(const cfd_chain* c, const cfd_rollout_params* p, const double* ctrl,
                            double* work, long stride, int lean) {
  int n = p->n;
  double* q = work + (long)cfd_aba_link_doubles(lean) * n * stride;
  double* tau = q + (long)n * stride;
  double* diag = tau + (long)n * stride;
  double* qacc = diag + (long)n * stride;
  double* qpos = qacc + (long)n * stride;
  double* qvel = qpos + (long)n * stride;
  double h = p->h;
  for (int i = 0; i < n; i++)
    cfd_rollout_passive(p, i, qpos[i * stride], qvel[i * stride], q + i * stride, tau + i * stride,
                        diag + i * stride);
  for (int a = 0; a < p->nu; a++) cfd_rollout_actuator(p, a, ctrl[a], qpos, qvel, tau, diag, stride);
  int st = cfd_aba_core_ex(c, q, qvel, tau, diag, qacc, stride, work, stride, lean);
  if (st) return st;
  for (int i = 0; i < n; i++) {  // semi-implicit Euler: velocity first, then position with it
    qvel[i * stride] += h * qacc[i * stride];
    qpos[i * stride] += h * qvel[i * stride];
  }
  return 0;
}

#endif  // CHAINFD_ROLLOUT_STEP_H
