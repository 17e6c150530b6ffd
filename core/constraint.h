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
// finds MuJoCo's answer; this one is Newton's method on c with an exact line search (phi' along
// the direction is piecewise linear: its root is found exactly), with the Hessian
// H = M + J_A^T D_A J_A (A: the rows in their quadratic zone). M is never formed: the gradient is
// M (a - a0) - J^T f with M (a - a0) carried along the steps (M times the direction by inverse
// dynamics, O(n)), and H^-1 is applied by the articulated-body recursion.
//
// The Hessian is not inverted by Woodbury alone: most rows touch one moving body or one dof, and
// those go into the articulated-body recursion itself. A contact of body b with the world has the
// row J_i = w_i^T J_b (w_i: the row's wrench in b's frame, J_b: b's body Jacobian), so its term
// D_i J_i^T J_i = J_b^T (D_i w_i w_i^T) J_b has the form of a body inertia: added to b's spatial
// inertia, and a one-dof row's D_i c^2 added to the joint's diagonal, the ABA applies
//   H0^-1,   H0 = M + sum over those rows in their quadratic zone,
// in O(n) whatever their number. The remaining rows (two moving bodies, equalities, tendons over
// several joints) go through the Woodbury identity on H0,
//   H^-1 = H0^-1 - Y_A (R_A + J_A Y_A)^-1 Y_A^T,   Y = H0^-1 J^T (one ABA solve per row),
// O(n k_c + k_c^3) for k_c of them. J a and J^T f of
// the first kind come from one sweep each (body accelerations out, wrenches in), so a Newton step
// costs O(n + k) plus the coupled rows' share; MuJoCo's dense path is O(n^3) on a chain.
// A body row's w is built from the contact's frame and friction as MuJoCo builds the row, then
// checked against MuJoCo's efc_J on a test vector; a row that does not match is solved as a
// coupled one, so the split never changes the answer.
//
// Elliptic cones: a contact's rows share one zone; in the middle (cone) zone their cost is
// MuJoCo's 1/2 Dm (N - mu T)^2 with its dim x dim Hessian, a rank-dim spatial inertia W Hc W^T on
// a body row's body (left out of the Hessian for a coupled contact: a descent direction still),
// and the line search, no longer piecewise linear, a bracketed Newton search on phi'.
//
// MuJoCo builds the rows (mj_makeConstraint: efc_J, efc_D, efc_aref, efc_frictionloss); chainfd
// solves.
#ifndef CHAINFD_CONSTRAINT_H
#define CHAINFD_CONSTRAINT_H

#include <mujoco/mujoco.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cfd_csolver cfd_csolver;

// A constraint solver for m's chain or tree (CPU: aba_tree.h's sweeps for H0^-1, inverse
// dynamics for M). NULL with a message naming the element when the chain adapter refuses m.
cfd_csolver* cfd_csolver_create(const mjModel* m, char* err, int err_size);
void cfd_csolver_free(cfd_csolver* cs);

// The options of a solve: stop when the gradient's norm, scaled by 1 / (meaninertia * nv) as
// MuJoCo scales it, is below tol, or after max_iter Newton steps.
typedef struct cfd_csolve_opt {
  double tol;
  int max_iter;
  const double* warmstart;  // nv, or NULL: a start tried besides qacc_smooth (MuJoCo's
                            // qacc_warmstart), taken where the cost is lower
} cfd_csolve_opt;

// The statistics of a solve.
typedef struct cfd_csolve_stats {
  int iterations;   // Newton steps taken
  int active;       // rows in their quadratic zone at the end
  double gradient;  // the last scaled gradient norm
  double cost;      // the cost c(qacc) at the end
  int rows_body, rows_dof, rows_coupled;  // how the rows were solved (above)
} cfd_csolve_stats;

// Where a solve writes: qacc (nv) always; the others where not NULL. efc_force and efc_state
// (nefc each): the rows' forces -s_i'(J_i a - aref_i) and zones (mjCNSTRSTATE_*); efc_b (nefc):
// J qacc_smooth - aref, as mj_fwdConstraint sets it (to rounding); qfrc_constraint (nv):
// J^T efc_force; trace: one entry per Newton step, up to
// trace_size, as MuJoCo fills mjData.solver (improvement and gradient scaled as MuJoCo scales
// them, lineslope the slope along the direction at its start, neval the line search's pieces).
typedef struct cfd_csolve_out {
  double* qacc;
  double* efc_force;
  int* efc_state;
  double* efc_b;
  double* qfrc_constraint;
  mjSolverStat* trace;
  int trace_size;
} cfd_csolve_out;

// qacc from d's rows (efc_*, as after mj_makeConstraint and mj_fwdVelocity's aref) and the
// unconstrained acceleration qacc_smooth (nv); d's qpos, xpos and xmat give the configuration.
// Returns 0, or nonzero with a message (a singular system, no convergence within max_iter: then
// qacc holds the last iterate). d is not written.
int cfd_csolver_solve(cfd_csolver* cs, const mjModel* m, const mjData* d, const double* qacc_smooth,
                      const cfd_csolve_opt* opt, const cfd_csolve_out* out, cfd_csolve_stats* stats,
                      char* err, int err_size);

#ifdef __cplusplus
}
#endif

#endif  // CHAINFD_CONSTRAINT_H
