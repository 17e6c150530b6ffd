// constraint.h: MuJoCo's constrained forward dynamics solved by chainfd, M never formed.
//
// MuJoCo's constraint model makes the acceleration the minimiser of a convex cost (its primal
// form, which its Newton solver minimises):
//   c(a) = 1/2 (a - a0)^T M (a - a0) + sum_i s_i(J_i a - aref_i),   a0 = qacc_smooth,
// with s_i by the row's kind (D_i = 1 / R_i, efc_D):
//   equality:                    1/2 D x^2
//   friction loss f (dof, tendon): 1/2 D x^2 for |x| < R f, else f |x| - 1/2 R f^2 (linear)
//   limit, frictionless or pyramidal contact: 1/2 D x^2 for x < 0, else 0
// The minimiser is unique (M positive definite, each s_i convex), so any solver that converges
// finds MuJoCo's answer; this one is Newton's method on c with an exact line search, and the
// Hessian H = M + J_A^T D_A J_A (A: the rows in their quadratic zone) inverted through the
// Woodbury identity with M^-1 from the articulated-body recursion:
//   H^-1 = M^-1 - Y_A (D_A^-1 + J_A Y_A)^-1 Y_A^T,   Y = M^-1 J^T (one O(n) solve per row).
// Since M (a - a0) + J^T s'(x) is the gradient, H^-1 of it needs no product with M:
// M^-1 grad = (a - a0) + Y s'. The line search's curvature d^T M d comes from inverse dynamics
// (O(n)). Per Newton step: O(n k + k^3) for k rows; MuJoCo's dense path is O(n^3) on a chain.
//
// MuJoCo builds the rows (mj_makeConstraint: efc_J, efc_D, efc_aref, efc_frictionloss); chainfd
// solves. Elliptic cones are refused (the cone's zone couples a contact's rows).
#ifndef CHAINFD_CONSTRAINT_H
#define CHAINFD_CONSTRAINT_H

#include <mujoco/mujoco.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cfd_csolver cfd_csolver;

// A constraint solver for m's chain (CPU: the fast path's sweeps for M^-1, inverse dynamics for
// M). NULL with a message naming the element when the chain adapter refuses m.
cfd_csolver* cfd_csolver_create(const mjModel* m, char* err, int err_size);
void cfd_csolver_free(cfd_csolver* cs);

// The options of a solve: stop when the gradient's norm, scaled by 1 / (meaninertia * nv) as
// MuJoCo scales it, is below tol, or after max_iter Newton steps.
typedef struct cfd_csolve_opt {
  double tol;
  int max_iter;
} cfd_csolve_opt;

// The statistics of a solve.
typedef struct cfd_csolve_stats {
  int iterations;   // Newton steps taken
  int active;       // rows in their quadratic zone at the end
  double gradient;  // the last scaled gradient norm
} cfd_csolve_stats;

// qacc (nv) from d's rows (efc_*, as after mj_makeConstraint and mj_fwdVelocity's aref) and the
// unconstrained acceleration qacc_smooth (nv); d's qpos gives the configuration. efc_force
// (nefc, may be NULL) receives the rows' forces, -s_i'(J_i a - aref_i). Returns 0, or nonzero
// with a message (an elliptic cone, a singular system, no convergence within max_iter: then
// qacc holds the last iterate). d is not written.
int cfd_csolver_solve(cfd_csolver* cs, const mjModel* m, const mjData* d, const double* qacc_smooth,
                      const cfd_csolve_opt* opt, double* qacc, double* efc_force,
                      cfd_csolve_stats* stats, char* err, int err_size);

#ifdef __cplusplus
}
#endif

#endif  // CHAINFD_CONSTRAINT_H
