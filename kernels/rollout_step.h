// rollout_step.h: one simulation step of one instance, written once for the CPU rollout
// (core/rollout.c) and the GPU rollout kernel (cuda/rollout.cu), with MuJoCo's semantics for the
// subset of models a rollout accepts (core/rollout.c refuses the rest):
//   passive:   -stiffness (qpos - springref) - damping qvel        (joint, plus actuator damping;
//              a ball's spring -stiffness log(qpos_spring^-1 quat), as MuJoCo's)
//   actuators: on joints, one control each (clamped to its range; if any is then NaN or past
//              mjMAXVAL, a warning and every control zero, as mj_fwdActuation does),
//              force = gain * ctrl + bias with
//              gain = g0 + g1 length + g2 velocity, bias = b0 + b1 length + b2 velocity,
//              length = gear qpos, velocity = gear qvel; force clamped to its range;
//              joint force gear * force
//   dynamics:  (M + diag) qacc = tau - bias   (the structured ABA of aba_core.h; on a tree or with
//              ball or free joints, aba_tree.h's)
//   Euler:     diag = h damping when MuJoCo integrates damping implicitly
//   implicitfast: diag = -h qDeriv = h (damping - gear^2 (g2 ctrl + b2)), ctrl clamped
//   constraint rows: joint limits and friction loss of hinges and slides, and joint equalities
//              between them, MuJoCo's soft model solved exactly (cfd_rollout_rows_*, below); the
//              integrator's solve then takes the constraint force, as mj_EulerSkip and
//              mj_implicitSkip add it
//   then qvel += h qacc, qpos += h qvel (hinges, slides, a free joint's position; a ball's or free
//   joint's rotation vector r <- log(exp(r) exp(h w)), MuJoCo's step of its quaternion).
// and mj_step's handling of bad states (mj_checkPos, mj_checkVel, mj_checkAcc): a qpos or qvel
// that is NaN or past mjMAXVAL before the step, or such a qacc after the dynamics, is a warning;
// with autoreset the instance is reset as mj_resetData does (qpos0, qvel 0, its controls 0 for
// the rest of the step), the dynamics taken again after a bad qacc; without, the state goes on bad
// (with qacc NaN where the system was singular). A joint-space system with no positive pivot
// counts as a bad qacc (mj_step would factor it anyway; only a bad state or an implicitfast gain
// that outweighs damping makes one).
// The qacc tested is the step's, with the joint-diagonal term (mj_checkAcc's is without it): the
// two verdicts differ for an acceleration near mjMAXVAL, and where that term itself is bad (a bad
// control on a velocity-dependent gain, implicitfast), which is taken as MuJoCo takes it: no
// warning, a NaN step, the reset by mj_checkPos at the next step.
#ifndef CHAINFD_ROLLOUT_STEP_H
#define CHAINFD_ROLLOUT_STEP_H

#include "aba_core.h"
#include "aba_tree.h"

enum { CFD_INT_EULER = 0, CFD_INT_IMPLICITFAST = 1 };

// The sweeps' scratch layout, the `lean` argument below: aba_core.h's full (0) or lean (1), or a
// tree's (CFD_ROLLOUT_TREE: aba_tree.h, for a tree or ball or free joints)
enum { CFD_ROLLOUT_TREE = 2 };
CFD_HD int cfd_rollout_link_doubles(int lean) {
  return lean == CFD_ROLLOUT_TREE ? (int)CFD_ABA_TREE_LINK_DOUBLES : cfd_aba_link_doubles(lean);
}

typedef struct cfd_rollout_params {
  int n, nu;            // dofs (= links), controls (= actuators)
  double h;             // timestep
  int integrator;       // CFD_INT_EULER or CFD_INT_IMPLICITFAST
  int implicit_damping; // Euler: damping in the joint-diagonal term (MuJoCo's eulerdamp)
  int autoreset;        // bad states are reset (MuJoCo's default; mjDSBL_AUTORESET: not)
  const double* qpos0;      // n: joint zero (the chain's q = qpos - qpos0; 0 for a ball's and a
                            // free joint's links)
  const double* reset;      // n: the reset state (mj_resetData's qpos0 in the links' coordinates)
  const double* stiffness;  // n
  const double* springref;  // n
  const double* damping;    // n: joint damping plus actuator damping * gear^2
  const int* act_dof;       // nu
  const double* gear;       // nu
  const double* gain;       // nu x 3: g0, g1, g2
  const double* bias;       // nu x 3: b0, b1, b2
  const double* ctrlrange;  // nu x 2; lo >= hi: not clamped
  const double* forcerange; // nu x 2; lo >= hi: not clamped
  const double* rows;       // n x CFD_RP_COUNT, or NULL: no constraint rows (below)
  int neq;                  // active joint equalities (rows is then not NULL)
  const double* eqs;        // neq x CFD_EP_COUNT (below)
} cfd_rollout_params;

// A dof's constraint-row parameters (cfd_rollout_params.rows), MuJoCo's after getsolparam: its
// limit (a limited hinge or slide: range, margin, solref as K and B, solimp clamped), its friction
// loss (0: none; R and B of its row, constant: the impedance at distance 0), and the rows'
// diagApprox (dof_invweight0)
enum { CFD_RP_LIMITED = 0, CFD_RP_LO, CFD_RP_HI, CFD_RP_MARGIN, CFD_RP_K, CFD_RP_B, CFD_RP_IMP,
       CFD_RP_FL = CFD_RP_IMP + 5, CFD_RP_FR, CFD_RP_FB, CFD_RP_DIAG, CFD_RP_COUNT };

// A joint equality's parameters (cfd_rollout_params.eqs), MuJoCo's mjEQ_JOINT: its dofs (joint1's,
// joint2's or -1 when it has none; as doubles, exact), their qpos0, the polynomial's 5
// coefficients, solref as K and B, solimp clamped, diagApprox (the dofs' invweight0 summed)
enum { CFD_EP_DOF1 = 0, CFD_EP_DOF2, CFD_EP_REF1, CFD_EP_REF2, CFD_EP_POLY, CFD_EP_K = CFD_EP_POLY + 5,
       CFD_EP_B, CFD_EP_IMP, CFD_EP_DIAG = CFD_EP_IMP + 5, CFD_EP_COUNT };

// Joint equalities between two dofs a rollout takes at most (its Woodbury system's size)
enum { CFD_ROLLOUT_EQ_MAX = 8 };

// Per-instance scratch of the rows after the state, doubles per dof: the zones of its three rows
// (friction, lower and upper limit; kept from step to step: the next step's first guess), x, aref
// and D of each (D 0: no row), then a, M (a - a0), the Newton point and its M (a - a0), the
// ABA's force and diagonal. With joint equalities, then n zeros (a velocity for the ABA) and per
// equality CFD_ROLLOUT_EQ_SCALARS (D, aref, J's entry at its second dof) and n more (H0^-1 u).
enum { CFD_ROLLOUT_ROW_DOUBLES = 18, CFD_ROLLOUT_EQ_SCALARS = 3 };

// Per-instance state and scratch, entries `stride` apart (a GPU interleaves its instances): the
// ABA's (lean on the GPU, see aba_core.h; a tree's), then q, tau, diag, qacc, qpos, qvel (n each),
// then, with constraint rows, CFD_ROLLOUT_ROW_DOUBLES per dof (cfd_rollout_rows_doubles).
CFD_HD long cfd_rollout_doubles(int n, int lean) { return (long)(cfd_rollout_link_doubles(lean) + 6) * n; }

CFD_HD long cfd_rollout_rows_doubles(int n, int rows, int neq) {
  return !rows ? 0 : (long)CFD_ROLLOUT_ROW_DOUBLES * n + (neq ? n + (long)neq * (n + CFD_ROLLOUT_EQ_SCALARS) : 0);
}

CFD_HD double* cfd_rollout_qpos(double* work, int n, long stride, int lean) {
  return work + (long)(cfd_rollout_link_doubles(lean) + 4) * n * stride;
}
CFD_HD double* cfd_rollout_qvel(double* work, int n, long stride, int lean) {
  return work + (long)(cfd_rollout_link_doubles(lean) + 5) * n * stride;
}

// Dof i's chain coordinate q = qpos - qpos0, passive force (into tau) and joint-diagonal term.
// screw: a hinge's or slide's linear spring; a ball's links take damping here, their spring as
// one (cfd_rollout_ball_spring).
CFD_HD void cfd_rollout_passive(const cfd_rollout_params* p, int i, int screw, double x, double v,
                                double* q, double* tau, double* diag) {
  int implicit = p->integrator == CFD_INT_IMPLICITFAST || p->implicit_damping;
  *q = x - p->qpos0[i];
  *tau = (screw ? -p->stiffness[i] * (x - p->springref[i]) : 0) - p->damping[i] * v;
  *diag = implicit ? p->h * p->damping[i] : 0;
}

// MuJoCo's test of a state, acceleration or control entry (mju_isBad): NaN, or magnitude past
// mjMAXVAL
#define CFD_MAXVAL 1e10
CFD_HD int cfd_is_bad(double x) { return !(fabs(x) <= CFD_MAXVAL); }

// Actuator a's control u clamped to its range as MuJoCo clamps it (a NaN stays NaN)
CFD_HD double cfd_rollout_clamp(const cfd_rollout_params* p, int a, double u) {
  const double* cr = p->ctrlrange + 2 * a;
  return cr[0] < cr[1] ? (u < cr[0] ? cr[0] : u > cr[1] ? cr[1] : u) : u;
}

// Actuator a under controls ctrl (NULL: zero, as after a reset) on its dof at position x,
// velocity v: its joint force added to *tau and, implicitfast, its velocity derivative to *diag.
// As in MuJoCo the control is clamped to its range; the force takes zero instead when some
// control was bad (bad_ctrl), the derivative does not (MuJoCo zeroes only the force's copy).
CFD_HD void cfd_rollout_actuator_dof(const cfd_rollout_params* p, int a, const double* ctrl,
                                     int bad_ctrl, double x, double v, double* tau, double* diag) {
  double clamped = cfd_rollout_clamp(p, a, ctrl ? ctrl[a] : 0), u = bad_ctrl ? 0 : clamped;
  double g = p->gear[a], h = p->h;
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
  if (p->integrator == CFD_INT_IMPLICITFAST && !saturated)
    *diag -= h * g * g * ((G[2] != 0 ? G[2] * clamped : 0) + Bi[2]);
}

// The same with qpos, qvel, tau, diag per dof, entries `stride` apart.
CFD_HD void cfd_rollout_actuator(const cfd_rollout_params* p, int a, const double* ctrl,
                                 int bad_ctrl, const double* qpos,
                                 const double* qvel, double* tau, double* diag, long stride) {
  long i = p->act_dof[a] * stride;
  cfd_rollout_actuator_dof(p, a, ctrl, bad_ctrl, qpos[i], qvel[i], tau + i, diag + i);
}

// Any bad entry among x[0], x[stride], ... x[(n-1) stride]
CFD_HD int cfd_any_bad(const double* x, int n, long stride) {
  int bad = 0;
  for (int i = 0; i < n; i++) bad |= cfd_is_bad(x[i * stride]);
  return bad;
}

// mj_resetData on the rollout state: qpos0 (in the links' coordinates), qvel 0
CFD_HD void cfd_rollout_reset(const cfd_rollout_params* p, double* qpos, double* qvel, long stride) {
  for (int i = 0; i < p->n; i++) qpos[i * stride] = p->reset[i], qvel[i * stride] = 0;
}

// A ball's rotation vector r (three entries `stride` apart) stepped by h w (w: its angular velocity
// in the body frame): exp(r') = exp(r) exp(h w), as mj_integratePos turns the quaternion
CFD_HD void cfd_rollout_ball_step(double* r, const double* w, double h, long stride) {
  double x[3] = {r[0], r[stride], r[2 * stride]}, y[3] = {h * w[0], h * w[stride], h * w[2 * stride]};
  double a[4], b[4], ab[4];
  cfd_quat_exp(x, a);
  cfd_quat_exp(y, b);
  cfd_quat_mul(a, b, ab);
  cfd_quat_log(ab, x);
  r[0] = x[0]; r[stride] = x[1]; r[2 * stride] = x[2];
}

// The spring of the ball whose first link is i (MuJoCo's mj_springdamper): the torque
// -stiffness log(s^-1 x) on its three dofs, x = exp(r) its orientation, s its spring orientation
// (qpos_spring; springref holds its rotation vector over the three links).
CFD_HD void cfd_rollout_ball_spring(const cfd_rollout_params* p, int i, const double* qpos,
                                    double* tau, long stride) {
  double k = p->stiffness[i];
  if (k == 0) return;
  double r[3] = {qpos[i * stride], qpos[(i + 1) * stride], qpos[(i + 2) * stride]};
  double rs[3] = {-p->springref[i], -p->springref[i + 1], -p->springref[i + 2]};
  double x[4], sinv[4], d[4], dif[3];
  cfd_quat_exp(r, x);
  cfd_quat_exp(rs, sinv);
  cfd_quat_mul(sinv, x, d);
  cfd_quat_log(d, dif);
  for (int j = 0; j < 3; j++) tau[(i + j) * stride] -= k * dif[j];
}

// --- constraint rows: joint limits and friction loss ---------------------------------------------
//
// A dof's rows each have one entry in J: c = +1 (friction loss, lower limit), -1 (upper limit).
// MuJoCo's convex problem (core/constraint.h) with such rows has the Hessian M + Delta, Delta the
// diagonal of D over the rows in their quadratic zone, and on one piece of the cost (the zones
// fixed) its stationary point solves
//   (M + Delta) a = tau - bias + r,   r_i = sum over quadratic rows D c aref
//                                            + sum over linear rows c f (f = +-frictionloss):
// one ABA with Delta as its joint diagonal. So a Newton step costs one ABA, and M (a - a0) =
// r - Delta a holds at its point without M: the exact line search needs no product with M. The
// step starts from the zones the instance's last step ended with, so an active set that holds
// costs one ABA, as a step without rows does (and the integrator's solve one more).

// MuJoCo's impedance at distance pos (getimpedance), solimp clamped as getsolparam clamps it
CFD_HD double cfd_rollout_impedance(const double* imp, double pos, double margin) {
  if (imp[0] == imp[1] || imp[2] <= 1e-15) return 0.5 * (imp[0] + imp[1]);
  double x = fabs((pos - margin) / imp[2]), y;
  if (x >= 1 || x <= 0) return x >= 1 ? imp[1] : imp[0];
  // (power 2, the default, as MuJoCo's quick return: x * x, not pow)
  double pw = imp[4];
  if (pw == 1) y = x;
  else if (x <= imp[3]) y = pw == 2 ? x * x / imp[3] : pow(x, pw) / pow(imp[3], pw - 1);
  else y = 1 - (pw == 2 ? (1 - x) * (1 - x) / (1 - imp[3]) : pow(1 - x, pw) / pow(1 - imp[3], pw - 1));
  return imp[0] + y * (imp[1] - imp[0]);
}

#define CFD_RR(k, i) rs[((long)(k) * n + (i)) * stride]  // row scratch entry k of dof i

// The instance's first step: no zones known
CFD_HD void cfd_rollout_rows_init(const cfd_rollout_params* p, double* work, long stride, int lean) {
  int n = p->n;
  double* rs = work + (long)(cfd_rollout_link_doubles(lean) + 6) * n * stride;
  for (int i = 0; i < n; i++)
    for (int s = 0; s < 3; s++) CFD_RR(s, i) = -1;
  for (int i = 0; i < n && p->neq; i++) CFD_RR(CFD_ROLLOUT_ROW_DOUBLES, i) = 0;  // the zeros
}

// A row's zone at x (MuJoCo's efc_state numbers): friction loss (slot 0) by x against +-R f,
// a limit quadratic where x < 0
CFD_HD int cfd_rollout_row_zone(int slot, double x, double D, double fl) {
  if (slot) return x < 0 ? 1 : 0;
  double Rf = fl / D;
  return x <= -Rf ? 2 : x >= Rf ? 3 : 1;
}

// A row's force in zone z at x
CFD_HD double cfd_rollout_row_force(int z, double x, double D, double fl) {
  return z == 1 ? -D * x : z == 2 ? fl : z == 3 ? -fl : 0;
}

#define CFD_RE(e, k) /* joint equality e's scratch entry k */ \
  rs[((long)(CFD_ROLLOUT_ROW_DOUBLES + 1) * n + (long)(e) * (n + CFD_ROLLOUT_EQ_SCALARS) + (k)) * stride]

// Joint equalities (mjEQ_JOINT) are rows always in the quadratic zone: j a = aref with
// j = e1 + g e2 (g = -p'(q2 - ref2) for the polynomial p; no e2 without a second joint), weight D.
// They join the Gauss term's quadratic: Me = M + sum D j j^T, Me a0' = tau - bias + sum D aref j,
// and the rows above then act on Me as they did on M, the line search's algebra unchanged. One on
// a single dof adds D to Delta. The k others make H = H0 + U U^T (u = sqrt(D) j), solved by
// Woodbury: H^-1 b = y - Z (I + U^T Z)^-1 U^T y, y = H0^-1 b, Z = H0^-1 U; a Newton step then costs
// 1 + k ABAs. (Z's columns by the ABA without gravity at zero velocity: taken as the ABA on b + u
// less y, the difference lost digits to y's size.)

// The rows of the state (qpos, qvel): D and aref of each (MuJoCo's mj_instantiateLimit,
// mj_instantiateEquality, mj_makeImpedance, mj_referenceConstraint for these rows). Returns how
// many there are.
CFD_HD int cfd_rollout_rows_make(const cfd_rollout_params* p, const double* qpos,
                                 const double* qvel, double* rs, long stride) {
  int n = p->n, count = 0;
  for (int i = 0; i < n; i++) {
    const double* P = p->rows + CFD_RP_COUNT * i;
    double x = qpos[i * stride], v = qvel[i * stride];
    CFD_RR(9, i) = CFD_RR(10, i) = CFD_RR(11, i) = 0;
    if (P[CFD_RP_FL] > 0) {  // friction loss: distance 0, K 0
      CFD_RR(9, i) = 1 / P[CFD_RP_FR];
      CFD_RR(6, i) = -P[CFD_RP_FB] * v;
      count++;
    }
    if (!P[CFD_RP_LIMITED]) continue;
    for (int side = 0; side < 2; side++) {  // lower: dist q - lo, J +1; upper: hi - q, J -1
      double dist = side ? P[CFD_RP_HI] - x : x - P[CFD_RP_LO], margin = P[CFD_RP_MARGIN];
      if (!(dist < margin)) continue;
      double imp = cfd_rollout_impedance(P + CFD_RP_IMP, dist, margin);
      double R = (1 - imp) * P[CFD_RP_DIAG] / imp;
      if (!(R > 1e-15)) R = 1e-15;  // (mjMINVAL)
      CFD_RR(10 + side, i) = 1 / R;
      CFD_RR(7 + side, i) = -P[CFD_RP_B] * (side ? -v : v) - P[CFD_RP_K] * imp * (dist - margin);
      count++;
    }
  }
  for (int e = 0; e < p->neq; e++) {
    const double* E = p->eqs + CFD_EP_COUNT * e;
    const double* cf = E + CFD_EP_POLY;
    long i1 = (long)E[CFD_EP_DOF1], i2 = (long)E[CFD_EP_DOF2];
    double pos, vel = qvel[i1 * stride], g = 0;
    if (i2 >= 0) {  // (in mj_instantiateEquality's order of operations)
      double dif = qpos[i2 * stride] - E[CFD_EP_REF2];
      pos = qpos[i1 * stride] - E[CFD_EP_REF1] - cf[0] -
            (cf[1] * dif + cf[2] * dif * dif + cf[3] * dif * dif * dif + cf[4] * dif * dif * dif * dif);
      g = -(cf[1] + 2 * cf[2] * dif + 3 * cf[3] * dif * dif + 4 * cf[4] * dif * dif * dif);
      vel += g * qvel[i2 * stride];
    } else {
      pos = qpos[i1 * stride] - E[CFD_EP_REF1] - cf[0];
    }
    double imp = cfd_rollout_impedance(E + CFD_EP_IMP, pos, 0);
    double R = (1 - imp) * E[CFD_EP_DIAG] / imp;
    if (!(R > 1e-15)) R = 1e-15;
    CFD_RE(e, 0) = 1 / R;
    CFD_RE(e, 1) = -E[CFD_EP_B] * vel - E[CFD_EP_K] * imp * pos;
    CFD_RE(e, 2) = g;
    count++;
  }
  return count;
}

// Dof i's limit and friction rows in the zones held: their Delta (*dl) and force r (*r) as above
CFD_HD void cfd_rollout_rows_dof(const cfd_rollout_params* p, const double* rs, long stride, int i,
                                 double* r, double* dl) {
  int n = p->n;
  double fl = p->rows[CFD_RP_COUNT * i + CFD_RP_FL];
  *r = *dl = 0;
  for (int s = 0; s < 3; s++) {
    double D = CFD_RR(9 + s, i), cs = s == 2 ? -1 : 1;
    if (D == 0) continue;
    int z = (int)CFD_RR(s, i);
    if (z == 1) *dl += D, *r += D * cs * CFD_RR(6 + s, i);
    else if (z >= 2) *r += cs * cfd_rollout_row_force(z, 0, D, fl);
  }
}

// (M + diag) a = tau - bias by the instance's ABA, vectors `stride` apart
CFD_HD int cfd_rollout_aba(const cfd_chain* c, const double* q, const double* qvel,
                           const double* tau, const double* diag, double* a, double* work,
                           long stride, int lean) {
  return lean == CFD_ROLLOUT_TREE
             ? cfd_aba_tree(c, q, qvel, tau, diag, a, stride, work, stride)
             : cfd_aba_core_ex(c, q, qvel, tau, diag, a, stride, work, stride, lean);
}

// Dof i's entry of the equality u (scale s, J's second entry g at i2): s j_i
CFD_HD double cfd_rollout_eq_u(long i, long i1, long i2, double s, double g) {
  return (i == i1 ? s : 0) + (i == i2 ? s * g : 0);
}

// The Woodbury correction of y (entry 14, H0 y = b, H0's diagonal in entry 17) for the
// equalities between two dofs: H^-1 b into entry 14 (see above). Returns the ABAs' status. (Out of
// line on the GPU: inlined, it raised the rows kernels' spills by about 1.7x.)
CFD_HD_CALL int cfd_rollout_rows_woodbury(const cfd_chain* c, const cfd_rollout_params* p,
                                     const double* q, const double* qvel, double* work, double* rs,
                                     long stride, int lean) {
  int n = p->n, k = 0, idx[CFD_ROLLOUT_EQ_MAX];
  long i1[CFD_ROLLOUT_EQ_MAX], i2[CFD_ROLLOUT_EQ_MAX];
  double s[CFD_ROLLOUT_EQ_MAX], g[CFD_ROLLOUT_EQ_MAX];
  for (int e = 0; e < p->neq && k < CFD_ROLLOUT_EQ_MAX; e++) {
    const double* E = p->eqs + CFD_EP_COUNT * e;
    if (E[CFD_EP_DOF2] < 0) continue;
    idx[k] = e, i1[k] = (long)E[CFD_EP_DOF1], i2[k] = (long)E[CFD_EP_DOF2];
    s[k] = sqrt(CFD_RE(e, 0)), g[k] = CFD_RE(e, 2);
    k++;
  }
  cfd_chain c0 = *c;  // Z's columns: (M + diag)^-1 u, no gravity, zero velocity
  c0.gravity[0] = c0.gravity[1] = c0.gravity[2] = 0;
  for (int a = 0; a < k; a++) {
    double* z = &CFD_RE(idx[a], 3);  // (u, then Z's column in its place)
    for (int i = 0; i < n; i++) z[i * stride] = cfd_rollout_eq_u(i, i1[a], i2[a], s[a], g[a]);
    int st = cfd_rollout_aba(&c0, q, &CFD_RR(CFD_ROLLOUT_ROW_DOUBLES, 0), z, &CFD_RR(17, 0), z,
                             work, stride, lean);
    if (st) return st;
  }
  // S = I + U^T Z (symmetric positive definite) and U^T y; S c = U^T y by elimination
  double S[CFD_ROLLOUT_EQ_MAX * CFD_ROLLOUT_EQ_MAX], v[CFD_ROLLOUT_EQ_MAX];
  for (int a = 0; a < k; a++) {
    v[a] = s[a] * (CFD_RR(14, i1[a]) + g[a] * CFD_RR(14, i2[a]));
    for (int b = 0; b < k; b++)
      S[a * k + b] = (a == b) + s[a] * (CFD_RE(idx[b], 3 + i1[a]) + g[a] * CFD_RE(idx[b], 3 + i2[a]));
  }
  for (int a = 0; a < k; a++)
    for (int b = a + 1; b < k; b++) {
      double l = S[b * k + a] / S[a * k + a];
      for (int j = a; j < k; j++) S[b * k + j] -= l * S[a * k + j];
      v[b] -= l * v[a];
    }
  for (int a = k - 1; a >= 0; a--) {
    for (int j = a + 1; j < k; j++) v[a] -= S[a * k + j] * v[j];
    v[a] /= S[a * k + a];
  }
  for (int a = 0; a < k; a++)
    for (int i = 0; i < n; i++) CFD_RR(14, i) -= v[a] * CFD_RE(idx[a], 3 + i);
  return 0;
}

// The Newton point of the zones held in entries 0-2: (M + Delta + the equalities) aN = tau - bias
// + r + the equalities' D aref j into entry 14, and Me (aN - a0') = r - Delta aN into entry 15.
// Returns the ABA's status.
CFD_HD int cfd_rollout_rows_newton(const cfd_chain* c, const cfd_rollout_params* p,
                                   const double* q, const double* qvel, const double* tau,
                                   double* work, double* rs, long stride, int lean) {
  int n = p->n, coupled = 0;
  for (int i = 0; i < n; i++) {
    double r, dl;
    cfd_rollout_rows_dof(p, rs, stride, i, &r, &dl);
    CFD_RR(16, i) = tau[i * stride] + r;
    CFD_RR(17, i) = dl;
    CFD_RR(15, i) = r;
  }
  for (int e = 0; e < p->neq; e++) {
    const double* E = p->eqs + CFD_EP_COUNT * e;
    long i1 = (long)E[CFD_EP_DOF1], i2 = (long)E[CFD_EP_DOF2];
    double D = CFD_RE(e, 0), f = D * CFD_RE(e, 1);
    CFD_RR(16, i1) += f;
    if (i2 < 0) CFD_RR(17, i1) += D;
    else CFD_RR(16, i2) += CFD_RE(e, 2) * f, coupled = 1;
  }
  int st = cfd_rollout_aba(c, q, qvel, &CFD_RR(16, 0), &CFD_RR(17, 0), &CFD_RR(14, 0), work, stride,
                           lean);
  if (!st && coupled) st = cfd_rollout_rows_woodbury(c, p, q, qvel, work, rs, stride, lean);
  for (int i = 0; i < n; i++) {
    double r, dl;
    cfd_rollout_rows_dof(p, rs, stride, i, &r, &dl);
    CFD_RR(15, i) -= dl * CFD_RR(14, i);
  }
  return st;
}

// phi'(alpha) = dMe + alpha dMd - sum over rows of Jd f(x + alpha Jd), Jd = c d_i (d in entry 14),
// each row in the zone it has at alpha; *H the slope there
CFD_HD double cfd_rollout_rows_slope(const cfd_rollout_params* p, const double* rs, long stride,
                                     double dMe, double dMd, double alpha, double* H) {
  int n = p->n;
  double G = dMe + alpha * dMd, h = dMd;
  for (int i = 0; i < n; i++)
    for (int s = 0; s < 3; s++) {
      double D = CFD_RR(9 + s, i), Jd = (s == 2 ? -1 : 1) * CFD_RR(14, i);
      if (D == 0 || Jd == 0) continue;
      double fl = p->rows[CFD_RP_COUNT * i + CFD_RP_FL], x = CFD_RR(3 + s, i) + alpha * Jd;
      int z = cfd_rollout_row_zone(s, x, D, fl);
      G -= Jd * cfd_rollout_row_force(z, x, D, fl);
      if (z == 1) h += D * Jd * Jd;
    }
  *H = h;
  return G;
}

// The exact minimiser along d from the rows' x: phi' is continuous, nondecreasing and piecewise
// linear; from each piece's start, the next breakpoint by a scan (a rollout's rows are few), then
// the root of the piece's line if it lies on the piece
CFD_HD double cfd_rollout_rows_line(const cfd_rollout_params* p, const double* rs, long stride,
                                    double dMe, double dMd) {
  int n = p->n;
  double lo = 0;
  for (int guard = 0; guard < 6 * n + 2; guard++) {
    double next = INFINITY;
    for (int i = 0; i < n; i++)
      for (int s = 0; s < 3; s++) {
        double D = CFD_RR(9 + s, i), Jd = (s == 2 ? -1 : 1) * CFD_RR(14, i);
        if (D == 0 || Jd == 0) continue;
        double x = CFD_RR(3 + s, i), fl = p->rows[CFD_RP_COUNT * i + CFD_RP_FL];
        double b0 = s ? -x / Jd : (-fl / D - x) / Jd, b1 = s ? -1 : (fl / D - x) / Jd;
        if (b0 > lo && b0 < next) next = b0;
        if (b1 > lo && b1 < next) next = b1;
      }
    double mid = next < INFINITY ? 0.5 * (lo + next) : lo + 1, H;
    double G = cfd_rollout_rows_slope(p, rs, stride, dMe, dMd, mid, &H);
    double root = mid - G / H;  // (H >= dMd > 0)
    if (root <= next) return root > lo ? root : lo;
    lo = next;
  }
  return lo;
}

// MuJoCo's constrained acceleration of the instance (its rows made by cfd_rollout_rows_make) into
// entry 12, its constraint force J^T f into qfrc: Newton's method as above, from the zones of the
// last step (at most 100 steps; then the last point, as MuJoCo takes its last iterate). Returns
// the ABA's status. (The GPU's kernels for models without rows are compiled with rows NULL, so
// that this code is left out of them: inlined, it raised their spills about 2.7x.)
CFD_HD int cfd_rollout_rows_solve(const cfd_chain* c, const cfd_rollout_params* p, const double* q,
                                  const double* qvel, const double* tau, double* qfrc,
                                  double* work, double* rs, long stride, int lean) {
  int n = p->n;
  for (int i = 0; i < n; i++)  // unknown zones: limits free, friction quadratic
    for (int s = 0; s < 3; s++)
      if (CFD_RR(s, i) < 0) CFD_RR(s, i) = s ? 0 : 1;
  int st = cfd_rollout_rows_newton(c, p, q, qvel, tau, work, rs, stride, lean);
  for (int i = 0; i < n && !st; i++) CFD_RR(12, i) = CFD_RR(14, i), CFD_RR(13, i) = CFD_RR(15, i);
  for (int it = 0; it < 100 && !st; it++) {
    // the zones at a: the same as those its last Newton point was found with, the minimiser
    // (constraint.h: a step that keeps every zone stays on one quadratic piece)
    int same = 1;
    for (int i = 0; i < n; i++)
      for (int s = 0; s < 3; s++) {
        double D = CFD_RR(9 + s, i);
        if (D == 0) continue;
        double x = (s == 2 ? -1 : 1) * CFD_RR(12, i) - CFD_RR(6 + s, i);
        int z = cfd_rollout_row_zone(s, x, D, p->rows[CFD_RP_COUNT * i + CFD_RP_FL]);
        CFD_RR(3 + s, i) = x;
        same &= z == (int)CFD_RR(s, i);
        CFD_RR(s, i) = z;
      }
    if (same) break;
    if ((st = cfd_rollout_rows_newton(c, p, q, qvel, tau, work, rs, stride, lean))) break;
    double dMe = 0, dMd = 0;
    for (int i = 0; i < n; i++) {  // d = aN - a (into aN's place)
      double d = CFD_RR(14, i) - CFD_RR(12, i);
      dMe += d * CFD_RR(13, i);
      dMd += d * (CFD_RR(15, i) - CFD_RR(13, i));
      CFD_RR(14, i) = d;
    }
    if (!(dMd > 0)) break;  // no direction left: at the minimum
    double alpha = cfd_rollout_rows_line(p, rs, stride, dMe, dMd);
    for (int i = 0; i < n; i++) {
      CFD_RR(12, i) += alpha * CFD_RR(14, i);
      CFD_RR(13, i) += alpha * (CFD_RR(15, i) - CFD_RR(13, i));
    }
  }
  for (int i = 0; i < n; i++) {  // J^T f at the end, in the zones at the final point (kept for
    double f = 0, fl = p->rows[CFD_RP_COUNT * i + CFD_RP_FL];  // the next step's first guess)
    for (int s = 0; s < 3; s++) {
      double D = CFD_RR(9 + s, i), cs = s == 2 ? -1 : 1;
      if (D == 0) continue;
      double x = cs * CFD_RR(12, i) - CFD_RR(6 + s, i);
      int z = cfd_rollout_row_zone(s, x, D, fl);
      CFD_RR(s, i) = z;
      f += cs * cfd_rollout_row_force(z, x, D, fl);
    }
    qfrc[i * stride] = f;
  }
  for (int e = 0; e < p->neq; e++) {  // the equalities' j f, f = -D (j a - aref)
    const double* E = p->eqs + CFD_EP_COUNT * e;
    long i1 = (long)E[CFD_EP_DOF1], i2 = (long)E[CFD_EP_DOF2];
    double g = CFD_RE(e, 2), ja = CFD_RR(12, i1) + (i2 >= 0 ? g * CFD_RR(12, i2) : 0);
    double f = -CFD_RE(e, 0) * (ja - CFD_RE(e, 1));
    qfrc[i1 * stride] += f;
    if (i2 >= 0) qfrc[i2 * stride] += g * f;
  }
  return st;
}

// Passive and actuator forces and the forward dynamics into qacc, controls ctrl (NULL: all zero,
// as after a reset; a bad one: a warning, all zero). Returns the ABA's status.
CFD_HD int cfd_rollout_forward(const cfd_chain* c, const cfd_rollout_params* p, const double* ctrl,
                               double* work, long stride, int lean, int* warnings) {
  int n = p->n;
  double* q = work + (long)cfd_rollout_link_doubles(lean) * n * stride;
  double* tau = q + (long)n * stride;
  double* diag = tau + (long)n * stride;
  double* qacc = diag + (long)n * stride;
  double* qpos = qacc + (long)n * stride;
  double* qvel = qpos + (long)n * stride;
  for (int i = 0; i < n; i++)
    cfd_rollout_passive(p, i, c->kind[i] == CFD_LINK_SCREW, qpos[i * stride], qvel[i * stride],
                        q + i * stride, tau + i * stride, diag + i * stride);
  for (int i = 0; i < n; i++)
    if (c->kind[i] == CFD_LINK_BALL) cfd_rollout_ball_spring(p, i, qpos, tau, stride);
  int bad_ctrl = 0;
  for (int a = 0; ctrl && a < p->nu; a++) bad_ctrl |= cfd_is_bad(cfd_rollout_clamp(p, a, ctrl[a]));
  *warnings += bad_ctrl;
  for (int a = 0; a < p->nu; a++)
    cfd_rollout_actuator(p, a, ctrl, bad_ctrl, qpos, qvel, tau, diag, stride);
  double* rs = qvel + (long)n * stride;  // the rows' scratch
  if (p->rows && cfd_rollout_rows_make(p, qpos, qvel, rs, stride)) {
    // the constrained acceleration (no integrator diagonal), then the integrator's solve with the
    // constraint force added (tau holds it from here), as mj_EulerSkip adds qfrc_constraint
    int st = cfd_rollout_rows_solve(c, p, q, qvel, tau, qacc, work, rs, stride, lean);
    if (st) return st;
    int any = 0;
    for (int i = 0; i < n; i++) tau[i * stride] += qacc[i * stride], any |= diag[i * stride] != 0;
    if (!any) {
      for (int i = 0; i < n; i++) qacc[i * stride] = CFD_RR(12, i);
      return 0;
    }
  }
  if (lean == CFD_ROLLOUT_TREE) return cfd_aba_tree(c, q, qvel, tau, diag, qacc, stride, work, stride);
  return cfd_aba_core_ex(c, q, qvel, tau, diag, qacc, stride, work, stride, lean);
}

// One step of the instance whose state and scratch are in work, under controls ctrl (nu), with
// mj_step's bad-state handling; *warnings counts its warnings. Returns 0, or the ABA's status when
// even the reset state has a singular joint-space system.
CFD_HD int cfd_rollout_step(const cfd_chain* c, const cfd_rollout_params* p, const double* ctrl,
                            double* work, long stride, int lean, int* warnings) {
  int n = p->n;
  double* diag = work + (long)(cfd_rollout_link_doubles(lean) + 2) * n * stride;
  double* qacc = diag + (long)n * stride;
  double* qpos = qacc + (long)n * stride;
  double* qvel = qpos + (long)n * stride;
  double h = p->h;
  for (int k = 0; k < 2; k++)  // mj_checkPos, mj_checkVel
    if (cfd_any_bad(k ? qvel : qpos, n, stride)) {
      ++*warnings;
      if (p->autoreset) cfd_rollout_reset(p, qpos, qvel, stride), ctrl = NULL;
    }
  int st = cfd_rollout_forward(c, p, ctrl, work, stride, lean, warnings);
  if (cfd_any_bad(diag, n, stride)) {
    // a bad control's velocity derivative (implicitfast): mj_checkAcc tests the acceleration
    // without it and passes; the implicit solve then gives NaN, and mj_checkPos acts next step
    for (int i = 0; i < n; i++) qacc[i * stride] = NAN;
  } else if (st || cfd_any_bad(qacc, n, stride)) {  // mj_checkAcc
    ++*warnings;
    if (p->autoreset) {
      cfd_rollout_reset(p, qpos, qvel, stride);
      if ((st = cfd_rollout_forward(c, p, NULL, work, stride, lean, warnings))) return st;
    } else if (st) {  // no acceleration to go on with
      for (int i = 0; i < n; i++) qacc[i * stride] = NAN;
    }
  }
  for (int i = 0; i < n; i++) qvel[i * stride] += h * qacc[i * stride];
  for (int i = 0; i < n; i++) {  // semi-implicit Euler: the position with the new velocity
    int kind = c->kind[i];
    if (kind == CFD_LINK_SCREW) qpos[i * stride] += h * qvel[i * stride];
    else if (kind == CFD_LINK_BALL) cfd_rollout_ball_step(qpos + i * stride, qvel + i * stride, h, stride);
  }
  return 0;
}

#undef CFD_RR
#undef CFD_RE

#endif  // CHAINFD_ROLLOUT_STEP_H
