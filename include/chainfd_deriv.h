// chainfd_deriv.h: analytical derivatives of MuJoCo's forward dynamics and of its step.
//
//   chainfd_deriv* dv;
//   chainfd_deriv_create(m, CHAINFD_CPU, &dv, err, sizeof err);             // or a CUDA device
//   chainfd_deriv_qacc(dv, m, d, qacc, DqDq, DqDv, DqDu, err, sizeof err);      // d qacc / d(q, qvel, ctrl)
//   chainfd_transition_derivatives(dv, m, d, A, B, err, sizeof err);           // as mjd_transitionFD
//   chainfd_deriv_batch(dv, B, x, u, DqDq, DqDv, DqDu, CHAINFD_DEVICE, err, sizeof err);
//   chainfd_deriv_free(dv);
//
// Exact derivatives (no differencing step) from the derivatives of inverse dynamics and M^-1:
//   M(q) qacc = tau(q, qvel, ctrl) - bias(q, qvel)
//   d qacc / dx = M^-1 (d tau / dx - d ID(q, qvel, qacc) / dx)
// with ID's q and qvel derivatives by one tangent pass each over the tree (docs/DESIGN.md 4.18).
// tau holds what MuJoCo's forward dynamics holds for the models taken: joint springs and damping,
// and joint actuators with fixed or affine gain and bias, their controls clamped to the control
// range (no derivative through a clamped control or a saturated force). The models taken are those
// chainfd rollouts take (chainfd_rollout.h), of hinges and slides, without friction loss or
// equalities (rows active in every state); the rest are refused at create, naming the element. A
// state where a joint limit is active is an error naming the joint (the constrained step's
// derivatives are not done yet).
//
// Layouts (row-major): DqDq and DqDv nv x nv, DqDu nv x nu, [i][j] = d qacc_i / d x_j; A (2nv x
// 2nv) and B (2nv x nu) are mjd_transitionFD's (x = (qpos tangent, qvel), na = 0), so code written
// for it can switch. Any output may be NULL. mjData is read, never written.
#ifndef CHAINFD_DERIV_H
#define CHAINFD_DERIV_H

#include <mujoco/mujoco.h>

#include "chainfd.h"
#include "chainfd_rollout.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct chainfd_deriv chainfd_deriv;

// device: where chainfd_deriv_batch runs, CHAINFD_CPU or a CUDA device index (the one-state calls
// run on the CPU either way). 0, or 1 with a message naming what is refused.
CHAINFD_API int chainfd_deriv_create(const mjModel* m, int device, chainfd_deriv** out, char* err,
                                     int err_size);
CHAINFD_API void chainfd_deriv_free(chainfd_deriv* dv);

// At d's qpos, qvel and ctrl: qacc (nv) and its derivatives. 0, or 1 with a message (a non-finite
// state or control, a model other than the one created for, a singular mass matrix).
CHAINFD_API int chainfd_deriv_qacc(chainfd_deriv* dv, const mjModel* m, const mjData* d,
                                   double* qacc, double* DqDq, double* DqDv, double* DqDu,
                                   char* err, int err_size);

// The Jacobians of one mj_step (Euler, implicitfast or RK4, as m->opt.integrator; RK4's four
// stages chained, which mjd_transitionFD does not take) at d's state and controls: x' = A x + B u
// to first order.
CHAINFD_API int chainfd_transition_derivatives(chainfd_deriv* dv, const mjModel* m, const mjData* d,
                                               double* A, double* B, char* err, int err_size);

// B states at once: x [B][2 nv] in chainfd_rollout.h's state layout (MuJoCo's qpos and qvel for
// hinges and slides), u [B][nu] (NULL: zero controls); DqDq and DqDv [B][nv][nv], DqDu [B][nv][nu]
// (any NULL), all in `where` memory (the device's: the context's device). A thread per instance on
// a GPU (up to 16 dofs and 16 controls), or a loop on the CPU. 0, or 1 with a message naming the
// first instance that failed (an active joint limit, a singular system).
CHAINFD_API int chainfd_deriv_batch(chainfd_deriv* dv, int B, const double* x, const double* u,
                                    double* DqDq, double* DqDv, double* DqDu, chainfd_memory where,
                                    char* err, int err_size);

#ifdef __cplusplus
}
#endif

#endif  // CHAINFD_DERIV_H
