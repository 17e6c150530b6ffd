// chainfd_forward / chainfd_step for one mjData: MuJoCo's stage functions, chainfd's qacc, and
// MuJoCo's integrators reproduced with public API calls.
//
// mj_step is checkPos, checkVel, mj_forward, checkAcc, then one integrator. mj_forward is the
// position stage (kinematics, mass matrix, collision, constraints, transmission), sensors, the
// velocity stage (passive forces, bias), actuation, qacc = M^-1 qfrc_smooth and the constraint
// solver. Here every stage is MuJoCo's own function except the mass matrix and its factorisation
// (not needed: chainfd computes qacc from the chain) and the constraint solver: MuJoCo builds the
// rows, chainfd's solver (core/constraint.h) finds qacc, efc_force, efc_state and
// qfrc_constraint = J^T efc_force. The integrators need M only through solves with
// M + diag(D), which chainfd does directly through its joint-diagonal term, with the constraint
// force added to the smooth force as MuJoCo adds it:
//   Euler:         D = h * dB/dv  for joint damping B (with actuator damping and polynomial terms)
//   implicitfast:  D = -h * diag(qDeriv), qDeriv = d(qfrc_passive + qfrc_actuator)/d(qvel), which
//                  must be diagonal: joint damping and joint-transmission actuators only
//   RK4:           no diagonal term; four chainfd evaluations.
// The state update (activations, qvel, qpos, time, plugin states, warmstart) is MuJoCo's mj_advance
// written out; the features it has that are not written out here (history buffers, sleep, plastic
// springs, DC-motor and PID activation states, wrapped setpoints) make the model MuJoCo's.
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auto.h"
#include "backend.h"
#include "chainfd.h"
#include "constraint.h"
#include "gpu.h"
#include "config.h"
#include "mj_chain.h"
#include "step_internal.h"

#define MSG_SIZE 640

// --- the thread's last error ----------------------------------------------------------------------

static _Thread_local char last_error[MSG_SIZE];

const char* chainfd_last_error(void) { return last_error; }

int chainfd_gpu_count(void) { return cfd_gpu_device_count(); }

void cfd_set_last_error(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
}

// --- the stepper ------------------------------------------------------------------------------------

enum {  // kinds of fallback, each said once per stepper
  SAID_MODEL = 1,
  SAID_CONSTRAINT = 2,
  SAID_SOLVER = 4,
  SAID_RK4_STAGE = 8,
};

struct chainfd_stepper {
  char label[96];             // "chainfd instance 'fd'", for messages
  cfd_resolved_config cfg;
  mjtSize nq, nv, na, nu, nbody, njnt, ntendon;  // sizes of the model it was made for
  int nstate;                 // mj_stateSize(mjSTATE_INTEGRATION) of that model

  // the model the chain and the verdicts below were made from: another mjModel, another
  // signature or a parameter edited in place (the arrays of model_arrays, kept byte for byte)
  // rebuilds them at the next call
  const mjModel* model_seen;
  uint64_t signature_seen;
  unsigned char* params_seen;
  size_t params_bytes;
  cfd_model_array arrays_seen[CFD_CHAIN_MODEL_ARRAYS + 2];  // where model_seen keeps them
  int narrays_seen;

  cfd_solver* solver;         // NULL when the chain adapter or the back end refuses the model
  cfd_csolver* csolver;       // the constraint solver, made at the first state with rows
  char csolver_refusal[MSG_SIZE - 128];  // why it could not be made
  int constrained;            // the last evaluation solved constraint rows: tau_con holds
                              // tau + qfrc_constraint, what the integrators' solves take
  double* tau_con;            // nv
  double* qacc_con;           // nv: the solver's qacc, copied into d->qacc once accepted
  int use_mujoco;             // backend=auto took MuJoCo's own dynamics (a short chain): each
                              // step is mj_step's, each forward mj_forward's
  cfd_gpu_tuning gpu_tuning;  // its GPU context's (cfd_stepper_set_gpu_tuning; zero: the rules)
  char model_refusal[MSG_SIZE];
  char solver_failure[MSG_SIZE];   // why the back end failed in the last evaluation
  char constraint_refusal_msg[MSG_SIZE];  // why the last evaluation's rows went to MuJoCo

  mjOption opt_seen;          // the options the verdicts below were made for
  int opt_valid;
  char forward_refusal[MSG_SIZE];  // "" when chainfd can compute this model with these options
  char step_refusal[MSG_SIZE];     // "" when chainfd can step it
  int needs_mass_matrix;      // kinetic energy is wanted: MuJoCo computes it from M

  // the last evaluation: chain state in dof order (valid until the next gather)
  const double *q, *qd, *tau;

  double* qacc_eval;          // nv: the back end's qacc, copied into d->qacc once accepted
  double* qacc_used;          // nv: the acceleration the integrator applies
  int have_used;              // evaluate_ex computed qacc_used (GPU: with qacc, in one batch)
  double* diag;               // nv: joint-diagonal term of the integrator
  double* rk;                 // RK4: X[4] (nq+nv+na), F[4] (nv+na), dX (2nv+na)
  // fallback=error: the step's starting state and warnings, put back when the step is refused
  // after mj_checkPos / mj_checkVel / mj_checkAcc may have reset a bad state
  double* saved;              // mjSTATE_INTEGRATION
  mjWarningStat saved_warning[mjNWARNING];
  int saved_valid;
  // d->timer as the call found it: a call handed to MuJoCo (or refused) puts it back first, so
  // that MuJoCo's own step counts what mj_step would (nothing counted twice, nothing a bad-state
  // reset cleared lost)
  mjTimerStat saved_timer[mjNTIMER];
  int timer_valid;
  mjTimerStat stage_timer[mjNTIMER];  // d->timer before an RK4 stage's evaluation
  int skip_control;           // the evaluation after MuJoCo's own bad-qacc forward: mjcb_control ran

  long long steps_chainfd, steps_mujoco, refusals;
  unsigned said;
  char last_fallback[MSG_SIZE];
  const char* last_said;      // the reason last copied into last_fallback, while it stays put
};

static int enabled(const mjModel* m, int flag) { return (m->opt.enableflags & flag) != 0; }
static int disabled(const mjModel* m, int flag) { return (m->opt.disableflags & flag) != 0; }


// An actuator switched off through its group (m->opt.disableactuator), as MuJoCo decides it.
static int actuator_group_disabled(const mjModel* m, int i) {
  int group = m->actuator_group[i];
  return group >= 0 && group <= 30 && (m->opt.disableactuator & (1 << group));
}


// Features of the model (whatever the options) that chainfd_step does not reproduce.
static int model_feature_refusal(const mjModel* m, char* why, int size) {
  char nm[128];
  if (m->nhistory > 0)
    return cfd_refuse(why, size, "the model has actuator or sensor history buffers (delay, nsample), "
                             "which chainfd_step does not advance");
  // plastic state of joints and tendons; a flex's is the flex's refusal (cfd_chain_from_model)
  for (int j = 0; j < m->njnt; j++)
    if (m->jnt_plasticadr[j] >= 0)
      return cfd_refuse(why, size, "joint %s has a plastic spring (springyield), whose state "
                               "chainfd_step does not advance",
                    cfd_mj_name(m, mjOBJ_JOINT, j, nm, sizeof nm));
  for (int t = 0; t < m->ntendon; t++)
    if (m->tendon_plasticadr[t] >= 0)
      return cfd_refuse(why, size, "tendon %s has a plastic spring (springyield), whose state "
                               "chainfd_step does not advance",
                    cfd_mj_name(m, mjOBJ_TENDON, t, nm, sizeof nm));
  for (int i = 0; i < m->nu; i++) {
    int dyn = m->actuator_dyntype[i];
    if (dyn == mjDYN_DCMOTOR || dyn == mjDYN_PID)
      return cfd_refuse(why, size, "actuator %s has %s activation dynamics, whose states chainfd_step "
                               "does not integrate", cfd_mj_name(m, mjOBJ_ACTUATOR, i, nm, sizeof nm),
                    dyn == mjDYN_DCMOTOR ? "DC-motor" : "PID");
    // MuJoCo wraps the setpoints of these into one period when it integrates them
    if (m->actuator_gaintype[i] == mjGAIN_SO3 || m->actuator_trntype[i] == mjTRN_SO3 ||
        m->actuator_gaintype[i] == mjGAIN_PID ||
        (m->actuator_trntype[i] == mjTRN_SITE && m->actuator_trnid[2 * i + 1] >= 0))
      return cfd_refuse(why, size, "actuator %s may wrap its rotational setpoint, which chainfd_step "
                               "does not reproduce", cfd_mj_name(m, mjOBJ_ACTUATOR, i, nm, sizeof nm));
  }
  return 0;
}

// Options that chainfd_forward does not reproduce; "" when it can compute.
static void forward_option_refusal(const mjModel* m, char* why, int size) {
  why[0] = 0;
  if (enabled(m, mjENBL_SLEEP))
    snprintf(why, size, "sleep is enabled (mjENBL_SLEEP): island sleeping is MuJoCo's");
}

// Options (and option-dependent features) chainfd_step does not reproduce; "" when it can step.
static void step_option_refusal(const mjModel* m, char* why, int size) {
  char nm[128];
  forward_option_refusal(m, why, size);
  if (why[0]) return;
  if (enabled(m, mjENBL_FWDINV)) {
    snprintf(why, size, "fwdinv is enabled: comparing with inverse dynamics needs MuJoCo's pipeline");
    return;
  }
  int integrator = m->opt.integrator;
  if (integrator == mjINT_IMPLICIT) {
    snprintf(why, size, "integrator implicit needs the full velocity derivative, Coriolis terms "
                        "included, which is not diagonal (use implicitfast, Euler or RK4)");
    return;
  }
  if (integrator != mjINT_EULER && integrator != mjINT_RK4 && integrator != mjINT_IMPLICITFAST) {
    snprintf(why, size, "integrator %d is not one chainfd reproduces (Euler, RK4, implicitfast)",
             integrator);
    return;
  }
  if (integrator == mjINT_RK4)
    for (int j = 0; j < m->njnt; j++)
      if (m->jnt_type[j] == mjJNT_BALL || m->jnt_type[j] == mjJNT_FREE) {
        // MuJoCo 4.0.0's RK4 does not take its stages' quaternions as its tableau says: measured,
        // its second stage sits at X1 + h/2 (v1 - v0) rather than X0 + h/2 v1 (equal for hinges
        // and slides, not on SO(3)), and its other stages and final update differ by 1e-11 to
        // 1e-8 from any combination tried; chainfd's RK4 (the tableau) would not be MuJoCo's step
        snprintf(why, size, "RK4 with %s joint %s: MuJoCo 4.0.0's RK4 combines the stages' "
                            "rotations in a way chainfd does not reproduce (use Euler or "
                            "implicitfast)", m->jnt_type[j] == mjJNT_BALL ? "ball" : "free",
                 cfd_mj_name(m, mjOBJ_JOINT, j, nm, sizeof nm));
        return;
      }
  if (integrator != mjINT_IMPLICITFAST) return;

  // implicitfast solves a standalone free body (a free joint alone in its tree) with its own 6x6
  // block, gyroscopic derivative included: not a diagonal term
  for (int j = 0; j < m->njnt; j++) {
    int b = m->jnt_bodyid[j];
    if (cfd_mj_free_body_alone(m, j)) {
      snprintf(why, size, "implicitfast with free body %s alone in its tree: MuJoCo solves its 6 "
                          "dofs with their gyroscopic velocity derivative, which chainfd's "
                          "implicitfast (a diagonal one) does not (use Euler)",
               cfd_mj_name(m, mjOBJ_BODY, b, nm, sizeof nm));
      return;
    }
  }

  // implicitfast: every velocity derivative must be diagonal (one joint each)
  int springs_and_dampers_off = disabled(m, mjDSBL_SPRING) && disabled(m, mjDSBL_DAMPER);
  if (!springs_and_dampers_off && (m->opt.density > 0 || m->opt.viscosity > 0)) {
    snprintf(why, size, "implicitfast with fluid forces (density/viscosity): their velocity "
                        "derivative couples joints");
    return;
  }
  if (!disabled(m, mjDSBL_DAMPER)) {
    for (int t = 0; t < m->ntendon; t++) {
      int damped = m->tendon_damping[t] != 0 || m->tendon_actuatorid[t] != -1;
      for (int k = 0; k < mjNPOLY; k++) damped |= m->tendon_dampingpoly[mjNPOLY * t + k] != 0;
      if (damped) {
        snprintf(why, size, "implicitfast with tendon %s damped: its velocity derivative couples "
                            "joints", cfd_mj_name(m, mjOBJ_TENDON, t, nm, sizeof nm));
        return;
      }
    }
  }
  if (disabled(m, mjDSBL_ACTUATION)) return;
  for (int i = 0; i < m->nu; i++) {
    if (actuator_group_disabled(m, i)) continue;
    int gain = m->actuator_gaintype[i], bias = m->actuator_biastype[i];
    if (m->actuator_plugin[i] >= 0 || (gain != mjGAIN_FIXED && gain != mjGAIN_AFFINE) ||
        (bias != mjBIAS_NONE && bias != mjBIAS_AFFINE)) {
      snprintf(why, size, "implicitfast with actuator %s: chainfd differentiates fixed and affine "
                          "gains and biases only", cfd_mj_name(m, mjOBJ_ACTUATOR, i, nm, sizeof nm));
      return;
    }
    int velocity_dependent = (gain == mjGAIN_AFFINE && m->actuator_gainprm[mjNGAIN * i + 2] != 0) ||
                             (bias == mjBIAS_AFFINE && m->actuator_biasprm[mjNBIAS * i + 2] != 0);
    int trn = m->actuator_trntype[i];
    if (velocity_dependent && trn != mjTRN_JOINT && trn != mjTRN_JOINTINPARENT) {
      snprintf(why, size, "implicitfast with actuator %s: a velocity-dependent force through a "
                          "non-joint transmission couples joints",
               cfd_mj_name(m, mjOBJ_ACTUATOR, i, nm, sizeof nm));
      return;
    }
  }
}

static int wants_kinetic_energy(const mjModel* m) {
  if (enabled(m, mjENBL_ENERGY)) return 1;
  if (disabled(m, mjDSBL_SENSOR)) return 0;
  for (int i = 0; i < m->nsensor; i++)
    if (m->sensor_type[i] == mjSENS_E_KINETIC) return 1;
  return 0;
}

// The numeric parameters the chain (cfd_chain_model_arrays) and the verdicts (tendon damping for
// implicitfast) are made from; their sizes are fixed by the sizes check_model compares. Actuator
// gains are read at every step by implicitfast_diag, which refuses a coupling derivative itself.
#define MODEL_ARRAYS (CFD_CHAIN_MODEL_ARRAYS + 2)
static int model_arrays(const mjModel* m, cfd_model_array* a) {
  int n = cfd_chain_model_arrays(m, a);
  size_t nt = (size_t)m->ntendon, d8 = sizeof(mjtNum);
  a[n++] = (cfd_model_array){m->tendon_damping, nt * d8};
  a[n++] = (cfd_model_array){m->tendon_dampingpoly, nt * mjNPOLY * d8};
  return n;
}

static size_t model_params_bytes(const mjModel* m) {
  cfd_model_array a[MODEL_ARRAYS];
  size_t bytes = 0;
  for (int k = 0, n = model_arrays(m, a); k < n; k++) bytes += a[k].bytes;
  return bytes;
}

// Whether m is the mjModel the chain was built from (pointer and signature: another one may have
// another structure) with the same numeric parameters, compared byte for byte (an edit in place
// keeps pointer and signature; under 2 kB for a 7-dof arm, cheaper than hashing them).
static int same_model(const chainfd_stepper* s, const mjModel* m) {
  if (m != s->model_seen || m->signature != s->signature_seen) return 0;
  const cfd_model_array* a = s->arrays_seen;  // (m's own arrays: the same mjModel)
  const unsigned char* p = s->params_seen;
  for (int k = 0; k < s->narrays_seen; p += a[k].bytes, k++)
    if (a[k].bytes && memcmp(p, a[k].data, a[k].bytes)) return 0;
  return 1;
}

static void remember_model(chainfd_stepper* s, const mjModel* m) {
  cfd_model_array* a = s->arrays_seen;
  unsigned char* p = s->params_seen;
  s->narrays_seen = model_arrays(m, a);
  for (int k = 0; k < s->narrays_seen; p += a[k].bytes, k++)
    if (a[k].bytes) memcpy(p, a[k].data, a[k].bytes);
  s->model_seen = m;
  s->signature_seen = m->signature;
}

// Re-derive everything that depends on the model or on m->opt when either changed (gravity lives
// in the chain): the chain, the back end and the verdicts.
// backend=auto on the CPU: up to this many dofs MuJoCo's own step (a dense mass matrix, factored
// in O(n^3) but with small constants) beats chainfd's O(n) algorithms, so the stepper hands it the
// whole step; from here on chainfd's cpu.fast wins (chainfd-bench-step --model and the crossover
// in docs/RESULTS.md). Not under fallback=error, which asks for chainfd's dynamics or a refusal.
// On a tree, or with ball or free joints (the tree sweeps of aba_tree.h, slower per dof than the
// chain's), the measure is MuJoCo's: its factorisation costs about nM per dof (nM: the ancestors of
// every dof, M's nonzeros), chainfd's a constant; MuJoCo's step wins while nM <= this many per dof
// (measured with chainfd-bench-step --model on ball chains and the tree scenes, on the development
// VM and the H200 machine's host: docs/RESULTS.md, "Trees").
#define STEP_MUJOCO_MAX_NV 18
#define STEP_MUJOCO_MAX_TREE_DEPTH 22

// backend=auto on the CPU: whether MuJoCo's own step is the faster (the two constants above)
static int mujoco_steps_faster(const mjModel* m) {
  if (cfd_model_is_serial(m)) return m->nv <= STEP_MUJOCO_MAX_NV;
  return m->nM <= (long)STEP_MUJOCO_MAX_TREE_DEPTH * m->nv;
}

// The parameters are compared even where the model or the options refuse every call: an edit in
// place can lift the refusal (a tendon's damping or armature set to zero, a massless link given
// mass).
static void refresh_for_options(chainfd_stepper* s, const mjModel* m) {
  // MuJoCo's own steps read neither the chain nor the options: only another mjModel (another nv)
  // can change that choice
  int same = m == s->model_seen && m->signature == s->signature_seen;
  if (s->use_mujoco && same) return;
  if (same && s->opt_valid && !memcmp(&s->opt_seen, &m->opt, sizeof(mjOption)) && same_model(s, m))
    return;
  s->last_said = NULL;  // the reasons below are written again
  memcpy(&s->opt_seen, &m->opt, sizeof(mjOption));  // bytes, padding included, for the memcmp
  s->opt_valid = 1;
  remember_model(s, m);
  s->needs_mass_matrix = wants_kinetic_energy(m);
  cfd_solver_free(s->solver);
  s->solver = NULL;
  cfd_csolver_free(s->csolver);
  s->csolver = NULL;
  s->csolver_refusal[0] = 0;
  s->use_mujoco = 0;
  s->model_refusal[0] = 0;
  if (s->cfg.is_auto) {
    const char* pick = cfd_auto_pick(m->nv, 1, s->cfg.device >= 0, cfd_model_shape(m), NULL, 0);
    const cfd_backend* b = cfd_backend_find(pick);
    if (b && b->gpu_algorithm < 0 && mujoco_steps_faster(m) && !s->cfg.fallback_error) {
      s->use_mujoco = 1;
      snprintf(s->cfg.backend, sizeof s->cfg.backend, "mujoco");
      s->forward_refusal[0] = s->step_refusal[0] = 0;
      return;
    }
  }
  if (!model_feature_refusal(m, s->model_refusal, sizeof s->model_refusal)) {
    // backend=auto: the fastest back end for this chain and one state, by the measured table
    // (core/auto.c); on a GPU device only if the table says a GPU wins there
    if (s->cfg.is_auto) {
      const char* pick = cfd_auto_pick(m->nv, 1, s->cfg.device >= 0, cfd_model_shape(m), NULL, 0);
      snprintf(s->cfg.backend, sizeof s->cfg.backend, "%s", pick);
    }
    s->solver = cfd_solver_create_on(m, s->cfg.backend, s->cfg.device < 0 ? 0 : s->cfg.device,
                                     s->model_refusal, sizeof s->model_refusal);
    if (s->solver && cfd_solver_set_tuning(s->solver, &s->gpu_tuning, s->model_refusal,
                                           sizeof s->model_refusal)) {
      cfd_solver_free(s->solver);
      s->solver = NULL;
    }
  }
  forward_option_refusal(m, s->forward_refusal, sizeof s->forward_refusal);
  step_option_refusal(m, s->step_refusal, sizeof s->step_refusal);
}

chainfd_stepper* chainfd_stepper_create(const mjModel* m, const chainfd_config* cfg,
                                        const char* label, char* err, int err_size) {
  cfd_resolved_config rc;
  if (!label) label = "chainfd";
  if (cfd_config_resolve(cfg, label, &rc, err, err_size)) return NULL;
  chainfd_stepper* s = calloc(1, sizeof(*s));
  if (!s) {
    snprintf(err, err_size, "%s: out of memory", label);
    return NULL;
  }
  snprintf(s->label, sizeof s->label, "%s", label);
  s->cfg = rc;
  s->nq = m->nq; s->nv = m->nv; s->na = m->na; s->nu = m->nu; s->nbody = m->nbody;
  s->njnt = m->njnt; s->ntendon = m->ntendon;
  s->nstate = mj_stateSize(m, mjSTATE_INTEGRATION);
  size_t nq = (size_t)m->nq, nv = (size_t)m->nv, na = (size_t)m->na;
  s->params_bytes = model_params_bytes(m);
  s->params_seen = malloc(s->params_bytes + 1);
  s->qacc_eval = malloc(sizeof(double) * (nv + 1));
  s->qacc_used = malloc(sizeof(double) * (nv + 1));
  s->diag = malloc(sizeof(double) * (nv + 1));
  s->rk = malloc(sizeof(double) * (4 * (nq + nv + na) + 4 * (nv + na) + 2 * nv + na + 1));
  s->saved = malloc(sizeof(double) * ((size_t)mj_stateSize(m, mjSTATE_INTEGRATION) + 1));
  s->tau_con = malloc(sizeof(double) * (nv + 1));
  s->qacc_con = malloc(sizeof(double) * (nv + 1));
  if (!s->params_seen || !s->qacc_eval || !s->qacc_used || !s->diag || !s->rk || !s->saved ||
      !s->tau_con || !s->qacc_con) {
    chainfd_stepper_free(s);
    snprintf(err, err_size, "%s: out of memory", label);
    return NULL;
  }
  refresh_for_options(s, m);
  return s;
}

void chainfd_stepper_free(chainfd_stepper* s) {
  if (!s) return;
  cfd_solver_free(s->solver);
  cfd_csolver_free(s->csolver);
  free(s->tau_con); free(s->qacc_con);
  free(s->params_seen); free(s->qacc_eval);
  free(s->qacc_used); free(s->diag); free(s->rk); free(s->saved);
  free(s);
}

void chainfd_stepper_stats(const chainfd_stepper* s, chainfd_stats* st) {
  st->steps_chainfd = s->steps_chainfd;
  st->steps_mujoco = s->steps_mujoco;
  st->refusals = s->refusals;
  st->backend = s->cfg.backend;
  st->last_fallback = s->last_fallback;
}

void chainfd_stepper_copy_stats(chainfd_stepper* dst, const chainfd_stepper* src) {
  dst->steps_chainfd = src->steps_chainfd;
  dst->steps_mujoco = src->steps_mujoco;
  dst->refusals = src->refusals;
  dst->said = src->said;
  memcpy(dst->last_fallback, src->last_fallback, sizeof dst->last_fallback);
  dst->last_said = NULL;
}

// --- fallback --------------------------------------------------------------------------------------

// Says once per kind on stderr what MuJoCo computes instead (fallback=mujoco), and why.
static void tell_fallback(chainfd_stepper* s, unsigned kind, const char* what, const char* why) {
  // a static reason (the model's, the options') stays put until refresh_for_options: copied once
  if (kind != SAID_MODEL || why != s->last_said)
    snprintf(s->last_fallback, sizeof s->last_fallback, "%s", why);
  s->last_said = kind == SAID_MODEL ? why : NULL;
  if (!(s->said & kind)) {
    s->said |= kind;
    fprintf(stderr, "%s: using MuJoCo's %s (fallback=mujoco): %s\n", s->label, what, why);
  }
}

// MuJoCo steps (or the call is refused) for the reason in why; said once per kind and stepper.
static int hand_over(chainfd_stepper* s, const mjModel* m, mjData* d, int step, unsigned kind,
                     const char* why) {
  if (s->timer_valid) memcpy(d->timer, s->saved_timer, sizeof s->saved_timer);
  if (s->cfg.fallback_error) {
    snprintf(s->last_fallback, sizeof s->last_fallback, "%s", why);
    s->last_said = NULL;
    if (step && s->saved_valid) {  // as the step found it, a bad state's reset undone
      mj_setState(m, d, s->saved, mjSTATE_INTEGRATION);
      memcpy(d->warning, s->saved_warning, sizeof s->saved_warning);
    }
    s->refusals++;
    cfd_set_last_error("%s: cannot %s exactly (fallback=error): %s", s->label,
                       step ? "step" : "compute forward dynamics", why);
    return CHAINFD_ERR_UNSUPPORTED;
  }
  tell_fallback(s, kind, step ? "mj_step" : "mj_forward", why);
  s->steps_mujoco++;
  if (step) mj_step(m, d);
  else mj_forward(m, d);
  return CHAINFD_OK;
}

// Why chainfd's solver cannot take this state's constraint rows (after mj_makeConstraint), into
// why; 0 when it can: the options it does not reproduce, or a model its solver refuses.
static int constraint_refusal(chainfd_stepper* s, const mjModel* m, const mjData* d, char* why,
                              int size) {
  const char* opt = NULL;
  if (m->opt.noslip_iterations > 0)
    opt = "noslip_iterations > 0: the noslip pass after the solver is MuJoCo's";
  else if (enabled(m, mjENBL_DIAGEXACT))
    opt = "diagexact is enabled: the rows' impedance from the exact diagonal of J M^-1 J^T is "
          "MuJoCo's (mj_projectConstraint)";
  else if (enabled(m, mjENBL_SPECULATIVE) || enabled(m, mjENBL_IPC))
    opt = "speculative or IPC contacts are enabled, which chainfd's solver does not reproduce";
  if (opt) {
    snprintf(why, size, "%d constraint rows are active and %s", (int)d->nefc, opt);
    return 1;
  }
  if (!s->csolver && !s->csolver_refusal[0]) {
    char err[sizeof s->csolver_refusal];
    s->csolver = cfd_csolver_create(m, err, sizeof err);
    if (!s->csolver) snprintf(s->csolver_refusal, sizeof s->csolver_refusal, "%s", err);
  }
  if (!s->csolver) {
    snprintf(why, size, "the constraint solver refuses the model: %s", s->csolver_refusal);
    return 1;
  }
  return 0;
}

// --- one evaluation: mj_forward with chainfd's qacc ------------------------------------------------

// EVAL_FAILED: the back end could not compute qacc (singular, CFA not converged, a CUDA error):
// MuJoCo steps or the call is refused, never an inaccurate or NaN step
enum { EVAL_OK = 0, EVAL_CONSTRAINED = 1, EVAL_FAILED = 2 };

// The integrator's joint-diagonal solve, done inside evaluate on a GPU back end, where a batch of
// two states (without and with the diagonal) costs about one solve: DIAG_EULER (implicit
// damping), DIAG_IMPLICITFAST. s->have_used says whether s->qacc_used holds its result.
enum { DIAG_NONE = 0, DIAG_EULER = 1, DIAG_IMPLICITFAST = 2 };
static int euler_damping_diag(const mjModel* m, const mjData* d, double* diag);
static int implicitfast_diag(const mjModel* m, const mjData* d, double* diag, char* why, int size);

// d->timer as mj_step keeps it: the time of a stage (through mjcb_time, 0 without it) and one more
// call of it. chainfd counts the step, each forward evaluation and the advance; MuJoCo's own
// stage functions count theirs; the stages chainfd replaces (the mass matrix, the constraint
// solver) are not counted.
static double timer_now(void) { return mjcb_time ? mjcb_time() : 0; }
static void timer_end(mjData* d, int timer, double start) {
  d->timer[timer].duration += timer_now() - start;
  d->timer[timer].number++;
}

static int evaluate_untimed(chainfd_stepper* s, const mjModel* m, mjData* d, int skip_sensors,
                            int diag_kind);

// One forward evaluation, counted as mj_forward's when it succeeds (a step handed to MuJoCo then
// counts its own).
static int evaluate_ex(chainfd_stepper* s, const mjModel* m, mjData* d, int skip_sensors,
                       int diag_kind) {
  double start = timer_now();
  int ev = evaluate_untimed(s, m, d, skip_sensors, diag_kind);
  if (ev == 0) timer_end(d, mjTIMER_FORWARD, start);
  return ev;
}

// The constraint solver on d's rows from qacc_smooth = s->qacc_eval, as mj_fwdConstraint: qacc
// into s->qacc_con; efc_b, efc_force, efc_state, qfrc_constraint and the solver's statistics into
// d (derived quantities, which MuJoCo's own step would write again); tau + qfrc_constraint into
// s->tau_con. Nonzero with the reason in s->solver_failure.
static int solve_constraints(chainfd_stepper* s, const mjModel* m, mjData* d) {
  double start = timer_now();
  int nv = m->nv;
  // MuJoCo's tolerance or tighter: Newton on this piecewise quadratic ends exactly once no row
  // changes zone, which the gradient test rarely preempts
  cfd_csolve_opt opt = {m->opt.tolerance > 0 ? fmin(m->opt.tolerance, 1e-10) : 0,
                        m->opt.iterations > 100 ? m->opt.iterations : 100,
                        disabled(m, mjDSBL_WARMSTART) ? NULL : d->qacc_warmstart};
  memset(d->solver_niter, 0, sizeof(d->solver_niter));  // (d->solver: its first entries written)
  memset(d->solver_nnz, 0, sizeof(d->solver_nnz));
  cfd_csolve_out out = {s->qacc_con, d->efc_force, d->efc_state, d->efc_b, d->qfrc_constraint,
                        d->solver, mjNSOLVER};
  cfd_csolve_stats st;
  char err[MSG_SIZE - 64];
  if (cfd_csolver_solve(s->csolver, m, d, s->qacc_eval, &opt, &out, &st, err, sizeof err)) {
    snprintf(s->solver_failure, sizeof s->solver_failure, "the constraint solver: %s", err);
    return 1;
  }
  d->solver_niter[0] = st.iterations;  // (d->solver holds the first mjNSOLVER steps' entries)
  for (int i = 0; i < nv; i++) s->tau_con[i] = s->tau[i] + d->qfrc_constraint[i];
  s->constrained = 1;
  timer_end(d, mjTIMER_CONSTRAINT, start);
  return 0;
}

static int evaluate_untimed(chainfd_stepper* s, const mjModel* m, mjData* d, int skip_sensors,
                            int diag_kind) {
  int nv = m->nv;
  s->have_used = 0;

  // cuda.cfa, cuda.abia up to 256 links: the GPU starts on what needs only q and qd (kinematics,
  // bias forces, the factors of the elimination or of the ABA; with Euler's damping diagonal, which
  // needs only qvel) while MuJoCo's stages below compute the forces; implicitfast's diagonal needs
  // the actuation, so it waits
  int split = 0, split_diag = 0;
  const double *q0 = NULL, *qd0 = NULL;  // the state the GPU started from
  if (cfd_solver_splits(s->solver) && (diag_kind == DIAG_NONE || diag_kind == DIAG_EULER)) {
    cfd_solver_gather_q_qd(s->solver, d, &q0, &qd0);
    split_diag = diag_kind == DIAG_EULER && euler_damping_diag(m, d, s->diag);
    split = !cfd_solver_begin(s->solver, q0, qd0, split_diag ? s->diag : NULL);
  }

  // position stage: MuJoCo's mj_fwdPosition without the mass matrix
  d->flg_energypos = 0;
  mj_kinematics(m, d);
  mj_comPos(m, d);
  mj_camlight(m, d);
  mj_flex(m, d);
  mj_tendon(m, d);
  if (s->needs_mass_matrix) mj_makeM(m, d);
  mj_collision(m, d);
  mj_makeConstraint(m, d);  // (builds the rows from the model's invweight0, not from M)
  s->constrained = 0;
  if (d->nefc > 0 && constraint_refusal(s, m, d, s->constraint_refusal_msg,
                                        sizeof s->constraint_refusal_msg)) {
    if (split) cfd_solver_cancel(s->solver);
    return EVAL_CONSTRAINED;
  }
  mj_island(m, d);
  mj_transmission(m, d);
  if (!skip_sensors) mj_sensorPos(m, d);
  if (!d->flg_energypos) {
    if (enabled(m, mjENBL_ENERGY)) mj_energyPos(m, d);
    else d->energy[0] = d->energy[1] = 0;
  }

  // velocity stage: passive forces, bias forces
  mj_fwdVelocity(m, d);
  if (!skip_sensors) mj_sensorVel(m, d);
  if (enabled(m, mjENBL_ENERGY) && !d->flg_energyvel) mj_energyVel(m, d);

  // actuation
  if (mjcb_control && !disabled(m, mjDSBL_ACTUATION) && !s->skip_control) mjcb_control(m, d);
  mj_fwdActuation(m, d);

  // acceleration: qfrc_smooth as MuJoCo sums it, qacc from the chain
  cfd_solver_gather(s->solver, m, d, &s->q, &s->qd, &s->tau);
  for (int i = 0; i < nv; i++) d->qfrc_smooth[i] = s->tau[i] - d->qfrc_bias[i];
  int with_diag = 0, st;
  if (split) {
    with_diag = split_diag;
    // Euler's diagonal depends on qvel: again from the present one if a callback moved it
    if (split_diag && memcmp(qd0, s->qd, sizeof(double) * cfd_solver_chain(s->solver)->n))
      euler_damping_diag(m, d, s->diag);
    st = cfd_solver_finish(s->solver, s->q, s->qd, s->tau, split_diag ? s->diag : NULL,
                           s->qacc_eval, s->qacc_used);
  } else if (diag_kind != DIAG_NONE && cfd_solver_is_gpu(s->solver)) {
    if (diag_kind == DIAG_EULER) {
      with_diag = euler_damping_diag(m, d, s->diag);
    } else {
      char why[MSG_SIZE];
      if (implicitfast_diag(m, d, s->diag, why, sizeof why)) {
        snprintf(s->solver_failure, sizeof s->solver_failure, "%s", why);
        return EVAL_FAILED;
      }
      with_diag = 1;
    }
  }
  if (!split)
    st = with_diag ? cfd_solver_fd2(s->solver, s->q, s->qd, s->tau, s->diag, s->qacc_eval,
                                    s->qacc_used)
                   : cfd_solver_fd(s->solver, s->q, s->qd, s->tau, NULL, s->qacc_eval);
  // a refused result never reaches d->qacc (the back end writes into qacc_eval)
  if (st == CFD_ERR_NONFINITE) {
    // a non-finite state: qacc is NaN, which mj_checkAcc treats as MuJoCo would
    for (int i = 0; i < nv; i++) s->qacc_eval[i] = NAN;
  } else if (st) {
    snprintf(s->solver_failure, sizeof s->solver_failure, "%s: %s",
             cfd_solver_backend(s->solver)->name, cfd_solver_error(s->solver, st));
    return EVAL_FAILED;
  }
  s->have_used = with_diag && !st;
  if (d->nefc > 0 && !st) {
    if (solve_constraints(s, m, d)) return EVAL_FAILED;
    s->have_used = 0;  // (the diagonal solve above had no constraint force)
    memcpy(d->qacc, s->qacc_con, sizeof(double) * nv);
  } else {
    memcpy(d->qacc, s->qacc_eval, sizeof(double) * nv);
    memset(d->qfrc_constraint, 0, sizeof(double) * nv);
    memset(d->solver_niter, 0, sizeof(d->solver_niter));
    if (d->nefc > 0) {  // a NaN state: no rows' forces from it (as MuJoCo's, NaN)
      for (int i = 0; i < d->nefc; i++) d->efc_force[i] = NAN;
      for (int i = 0; i < nv; i++) d->qfrc_constraint[i] = NAN;
    }
  }
  memcpy(d->qacc_smooth, s->qacc_eval, sizeof(double) * nv);

  if (!skip_sensors) {
    d->flg_rnepost = 0;
    mj_sensorAcc(m, d);
  }
  return EVAL_OK;
}

static int evaluate(chainfd_stepper* s, const mjModel* m, mjData* d, int skip_sensors) {
  return evaluate_ex(s, m, d, skip_sensors, DIAG_NONE);
}

// --- integrator pieces -------------------------------------------------------------------------------

// Damping of dof i as MuJoCo's passive force sees it: the joint's own plus that of the actuators
// acting on the joint (times gear^2), linear coefficient and polynomial terms.
static double dof_damping(const mjModel* m, int i, double poly[mjNPOLY]) {
  double damping = m->dof_damping[i];
  for (int k = 0; k < mjNPOLY; k++) poly[k] = m->dof_dampingpoly[mjNPOLY * i + k];
  int jnt = m->dof_jntid[i];
  int owner = m->jnt_actuatorid[jnt];  // -1: none; >= 0: that actuator; < -1: several, search
  if (owner == -1) return damping;
  for (int a = owner >= 0 ? owner : 0; a < (owner >= 0 ? owner + 1 : m->nu); a++) {
    if (owner < 0 && (m->actuator_trnid[2 * a] != jnt ||
                      (m->actuator_trntype[a] != mjTRN_JOINT &&
                       m->actuator_trntype[a] != mjTRN_JOINTINPARENT)))
      continue;
    double gear = m->actuator_gear[6 * m->actuator_outadr[a]];
    damping += m->actuator_damping[a] * gear * gear;
    for (int k = 0; k < mjNPOLY; k++) poly[k] += m->actuator_dampingpoly[mjNPOLY * a + k] * gear * gear;
  }
  return damping;
}

// d/dv of the damping force magnitude v * (b + p1 |v| + p2 |v|^2 ...)
static double damping_slope(double linear, const double poly[mjNPOLY], double v) {
  double x = fabs(v), slope = linear, xpow = 1;
  for (int k = 0; k < mjNPOLY; k++) {
    xpow *= x;
    slope += (k + 2) * poly[k] * xpow;
  }
  return slope;
}

// Euler: diag = h * dB/dv when MuJoCo integrates damping implicitly; 0 when it does not.
static int euler_damping_diag(const mjModel* m, const mjData* d, double* diag) {
  if (disabled(m, mjDSBL_EULERDAMP) || disabled(m, mjDSBL_DAMPER)) return 0;
  int any = 0;
  for (int i = 0; i < m->nv && !any; i++) {
    any = m->dof_damping[i] > 0 || m->jnt_actuatorid[m->dof_jntid[i]] != -1;
    for (int k = 0; k < mjNPOLY; k++) any |= m->dof_dampingpoly[mjNPOLY * i + k] != 0;
  }
  if (!any) return 0;
  double h = m->opt.timestep, poly[mjNPOLY];
  for (int i = 0; i < m->nv; i++) {
    double b = dof_damping(m, i, poly);
    diag[i] = h * damping_slope(b, poly, d->qvel[i]);
  }
  return 1;
}

static double next_activation(const mjModel* m, const mjData* d, int actuator, int adr,
                              double act_dot) {
  double act = d->act[adr], h = m->opt.timestep;
  if (m->actuator_dyntype[actuator] == mjDYN_FILTEREXACT) {
    double tau = fmax(mjMINVAL, m->actuator_dynprm[mjNDYN * actuator]);
    act += act_dot * tau * (1 - exp(-h / tau));
  } else {
    act += act_dot * h;
  }
  if (m->actuator_actlimited[actuator]) {
    const double* range = m->actuator_actrange + 2 * actuator;
    act = fmin(fmax(act, range[0]), range[1]);
  }
  return act;
}

// Whether the joint of dof i limits its actuator force (actuatorfrcrange) and mj_fwdActuation
// clamped it: at or past a bound (the force with gravity compensation, as MuJoCo sums it). MuJoCo
// 4.0.0's implicitfast takes no velocity derivative from the actuators of such a joint (measured:
// kv = 4 gives no damping term when clamped, 4 when not; none exactly at a bound either).
static int joint_force_saturated(const mjModel* m, const mjData* d, int i) {
  int j = m->dof_jntid[i];
  if (!m->jnt_actfrclimited[j]) return 0;
  const double* range = m->jnt_actfrcrange + 2 * j;
  return d->qfrc_actuator[i] <= range[0] || d->qfrc_actuator[i] >= range[1];
}

// implicitfast: diag = -h * diag(qDeriv); returns 1 when the derivative is not diagonal here, or
// when it cannot tell what MuJoCo's would be (a clamped joint moved through another transmission).
static int implicitfast_diag(const mjModel* m, const mjData* d, double* diag, char* why, int size) {
  int nv = m->nv;
  double h = m->opt.timestep;
  for (int i = 0; i < nv; i++) diag[i] = 0;  // -qDeriv, accumulated

  if (!disabled(m, mjDSBL_DAMPER)) {
    double poly[mjNPOLY];
    for (int i = 0; i < nv; i++) diag[i] += damping_slope(dof_damping(m, i, poly), poly, d->qvel[i]);
  }
  if (!disabled(m, mjDSBL_ACTUATION)) {
    for (int a = 0; a < m->nu; a++) {
      if (actuator_group_disabled(m, a)) continue;
      int out = m->actuator_outadr[a];
      if (m->actuator_forcelimited[a]) {  // a saturated force does not vary
        const double* range = m->actuator_forcerange + 2 * a;
        double f = d->actuator_force[out];
        if (f <= range[0] || f >= range[1]) continue;
      }
      double bias_vel = 0, gain_vel = 0;
      if (m->actuator_biastype[a] == mjBIAS_AFFINE) bias_vel = m->actuator_biasprm[mjNBIAS * a + 2];
      if (m->actuator_gaintype[a] == mjGAIN_AFFINE) gain_vel = m->actuator_gainprm[mjNGAIN * a + 2];
      if (gain_vel != 0) {
        if (m->actuator_dyntype[a] == mjDYN_NONE) {
          double u = d->ctrl[m->actuator_ctrladr[a]];  // as MuJoCo: the clamped control
          if (m->actuator_ctrllimited[a] && !disabled(m, mjDSBL_CLAMPCTRL))
            u = fmin(fmax(u, m->actuator_ctrlrange[2 * a]), m->actuator_ctrlrange[2 * a + 1]);
          bias_vel += gain_vel * u;
        } else {
          int adr = m->actuator_actadr[a] + m->actuator_actnum[a] - 1;
          double act = m->actuator_actearly[a] ? next_activation(m, d, a, adr, d->act_dot[adr])
                                               : d->act[adr];
          bias_vel += gain_vel * act;
        }
      }
      if (bias_vel == 0) continue;
      for (int k = 0; k < m->actuator_outnum[a]; k++) {
        int row = out + k;
        if (d->moment_rownnz[row] != 1) {
          char nm[128];
          snprintf(why, size, "implicitfast: actuator %s moves %d dofs, so its velocity derivative "
                              "is not diagonal", cfd_mj_name(m, mjOBJ_ACTUATOR, a, nm, sizeof nm),
                   d->moment_rownnz[row]);
          return 1;
        }
        int adr = d->moment_rowadr[row];
        if (joint_force_saturated(m, d, d->moment_colind[adr])) {
          if (m->actuator_trntype[a] == mjTRN_JOINT) continue;  // clamped: no derivative
          char nm[128];  // another transmission onto a clamped joint: not measured, MuJoCo's step
          snprintf(why, size, "implicitfast: actuator %s acts through a tendon or site on a joint "
                              "whose actuatorfrcrange clamps its force",
                   cfd_mj_name(m, mjOBJ_ACTUATOR, a, nm, sizeof nm));
          return 1;
        }
        double g = d->actuator_moment[adr];
        diag[d->moment_colind[adr]] -= g * g * bias_vel;
      }
    }
  }
  for (int i = 0; i < nv; i++) diag[i] *= h;
  return 0;
}

// MuJoCo's mj_advance: activations, velocities, positions (with qvel_pos when given), time, plugin
// states, warmstart; counted in d->timer as mj_step counts it (Euler and implicitfast, not RK4).
static void advance_untimed(const mjModel* m, mjData* d, const double* act_dot, const double* qacc,
                            const double* qvel_pos);
static void advance(const mjModel* m, mjData* d, const double* act_dot, const double* qacc,
                    const double* qvel_pos) {
  double start = timer_now();
  advance_untimed(m, d, act_dot, qacc, qvel_pos);
  timer_end(d, mjTIMER_ADVANCE, start);
}

static void advance_untimed(const mjModel* m, mjData* d, const double* act_dot, const double* qacc,
                            const double* qvel_pos) {
  double h = m->opt.timestep;
  if (m->na && !disabled(m, mjDSBL_ACTUATION)) {
    for (int a = 0; a < m->nu; a++) {
      int begin = m->actuator_actadr[a], end = begin + m->actuator_actnum[a];
      for (int j = begin; j < end; j++)
        d->act[j] = next_activation(m, d, a, j, actuator_group_disabled(m, a) ? 0 : act_dot[j]);
    }
  }
  for (int i = 0; i < m->nv; i++) d->qvel[i] += h * qacc[i];
  mj_integratePos(m, d->qpos, qvel_pos ? qvel_pos : d->qvel, h);
  d->time += h;
  for (int i = 0; i < m->nplugin; i++) {
    const mjpPlugin* plugin = mjp_getPluginAtSlot(m->plugin[i]);
    if (plugin && plugin->advance) plugin->advance(m, d, i);
  }
  memcpy(d->qacc_warmstart, d->qacc, sizeof(double) * m->nv);
}

// qacc with the joint-diagonal term diag, from the last evaluation's state. Nonzero (with the
// reason in s->solver_failure) when the back end failed for another reason than a NaN state.
static int solve_with_diag(chainfd_stepper* s, const mjModel* m, const double* diag, double* qacc) {
  int st = cfd_solver_fd(s->solver, s->q, s->qd, s->constrained ? s->tau_con : s->tau, diag, qacc);
  if (st == CFD_ERR_NONFINITE)
    for (int i = 0; i < m->nv; i++) qacc[i] = NAN;
  else if (st)
    snprintf(s->solver_failure, sizeof s->solver_failure, "%s: %s",
             cfd_solver_backend(s->solver)->name, cfd_solver_error(s->solver, st));
  return st && st != CFD_ERR_NONFINITE;
}

// --- RK4 -----------------------------------------------------------------------------------------

// MuJoCo's classical Runge-Kutta tableau (A lower triangular, by rows; B weights; C = row sums)
static const double rk4_a[3][3] = {{0.5, 0, 0}, {0, 0.5, 0}, {0, 0, 1}};
static const double rk4_b[4] = {1.0 / 6.0, 1.0 / 3.0, 1.0 / 3.0, 1.0 / 6.0};
static const double rk4_c[3] = {0.5, 0.5, 1};

static void add_scaled(double* dst, const double* src, double scale, int n) {
  for (int i = 0; i < n; i++) dst[i] += scale * src[i];
}

// A stage whose constraint rows chainfd's solver refuses (constraint_refusal) is evaluated by
// MuJoCo's own mj_forwardSkip, as mj_RungeKutta evaluates it (fallback=mujoco; *mujoco_stages
// counts them), the other stages stay chainfd's. So mjcb_control runs once a stage, as under
// mj_step: chainfd refuses rows before it calls the callback. Returns EVAL_CONSTRAINED (state restored) where fallback=error,
// EVAL_FAILED (state restored) when the back end fails.
static int rk4(chainfd_stepper* s, const mjModel* m, mjData* d, int* mujoco_stages) {
  int nq = m->nq, nv = m->nv, na = m->na, nx = nq + nv + na, nf = nv + na;
  double h = m->opt.timestep, time0 = d->time;
  double *X[4], *F[4], *dX = s->rk + 4 * nx + 4 * nf;
  for (int i = 0; i < 4; i++) {
    X[i] = s->rk + i * nx;
    F[i] = s->rk + 4 * nx + i * nf;
  }
  memcpy(X[0], d->qpos, sizeof(double) * nq);
  memcpy(X[0] + nq, d->qvel, sizeof(double) * nv);
  memcpy(X[0] + nq + nv, d->act, sizeof(double) * na);
  memcpy(F[0], d->qacc, sizeof(double) * nv);
  memcpy(F[0] + nv, d->act_dot, sizeof(double) * na);

  for (int i = 1; i < 4; i++) {
    memset(dX, 0, sizeof(double) * (2 * nv + na));
    for (int j = 0; j < i; j++) {
      add_scaled(dX, X[j] + nq, rk4_a[i - 1][j], nv);
      add_scaled(dX + nv, F[j], rk4_a[i - 1][j], nv + na);
    }
    memcpy(X[i], X[0], sizeof(double) * nx);
    mj_integratePos(m, X[i], dX, h);
    add_scaled(X[i] + nq, dX + nv, h, nv + na);

    memcpy(d->qpos, X[i], sizeof(double) * nq);
    memcpy(d->qvel, X[i] + nq, sizeof(double) * nv);
    memcpy(d->act, X[i] + nq + nv, sizeof(double) * na);
    d->time = time0 + rk4_c[i - 1] * h;
    memcpy(s->stage_timer, d->timer, sizeof s->stage_timer);
    int ev = evaluate(s, m, d, 1);
    if (ev == EVAL_CONSTRAINED && !s->cfg.fallback_error) {
      // what the evaluation counted before it stopped (collision, ...) is counted again by MuJoCo
      memcpy(d->timer, s->stage_timer, sizeof s->stage_timer);
      mj_forwardSkip(m, d, mjSTAGE_NONE, 1);  // 1: no sensors or energy, as mj_RungeKutta
      (*mujoco_stages)++;
      ev = EVAL_OK;
    }
    if (ev != EVAL_OK) {  // the start's state, and its qacc and act_dot from the first stage
      memcpy(d->qpos, X[0], sizeof(double) * nq);
      memcpy(d->qvel, X[0] + nq, sizeof(double) * nv);
      memcpy(d->act, X[0] + nq + nv, sizeof(double) * na);
      memcpy(d->qacc, F[0], sizeof(double) * nv);
      memcpy(d->act_dot, F[0] + nv, sizeof(double) * na);
      d->time = time0;
      return ev;
    }
    memcpy(F[i], d->qacc, sizeof(double) * nv);
    memcpy(F[i] + nv, d->act_dot, sizeof(double) * na);
  }

  memset(dX, 0, sizeof(double) * (2 * nv + na));
  for (int j = 0; j < 4; j++) {
    add_scaled(dX, X[j] + nq, rk4_b[j], nv);
    add_scaled(dX + nv, F[j], rk4_b[j], nv + na);
  }
  d->time = time0;
  memcpy(d->qpos, X[0], sizeof(double) * nq);
  memcpy(d->qvel, X[0] + nq, sizeof(double) * nv);
  memcpy(d->act, X[0] + nq + nv, sizeof(double) * na);
  advance_untimed(m, d, dX + 2 * nv, dX + nv, dX);
  memcpy(d->qacc, dX + nv, sizeof(double) * nv);  // as mj_RungeKutta: the stages' weighted qacc
  return EVAL_OK;
}

// --- entry points ------------------------------------------------------------------------------------

// Sizes first: a model of other sizes cannot step this mjData (the integration state's size is
// compared only for another mjModel; sizes do not change in place).
static int check_model(chainfd_stepper* s, const mjModel* m) {
  if (m->nq != s->nq || m->nv != s->nv || m->na != s->na || m->nu != s->nu || m->nbody != s->nbody ||
      m->njnt != s->njnt || m->ntendon != s->ntendon ||
      (m != s->model_seen && mj_stateSize(m, mjSTATE_INTEGRATION) != s->nstate)) {
    cfd_set_last_error("%s: this stepper was made for another model (nq nv na nu nbody njnt ntendon "
                       "%ld %ld %ld %ld %ld %ld %ld, not %ld %ld %ld %ld %ld %ld %ld%s)",
                       s->label, (long)s->nq, (long)s->nv, (long)s->na, (long)s->nu,
                       (long)s->nbody, (long)s->njnt, (long)s->ntendon, (long)m->nq, (long)m->nv,
                       (long)m->na, (long)m->nu, (long)m->nbody, (long)m->njnt, (long)m->ntendon,
                       m->nq == s->nq && m->nv == s->nv && m->na == s->na && m->nu == s->nu &&
                               m->nbody == s->nbody && m->njnt == s->njnt && m->ntendon == s->ntendon
                           ? "; the integration state's size differs"
                           : "");
    return 1;
  }
  return 0;
}

// "" when chainfd can compute (step: and step) this model with these options; the reason otherwise.
// (after refresh_for_options)
static const char* static_refusal(const chainfd_stepper* s, int step) {
  if (!s->solver) return s->model_refusal;
  return step ? s->step_refusal : s->forward_refusal;
}

// What every call does first (step: a step, else a forward): the model's checks, then MuJoCo's
// own call where auto chose it or a static refusal holds. CHAINFD_OK with *done 0 when chainfd
// goes on (d->timer then saved, for a later hand-over to put back).
static int call_begin(chainfd_stepper* s, const mjModel* m, mjData* d, int step, int* done) {
  *done = 1;
  if (check_model(s, m)) return CHAINFD_ERR_CONFIG;
  refresh_for_options(s, m);
  if (s->use_mujoco) {  // MuJoCo's own, chosen as the faster (not a fallback: nothing to say)
    if (step) mj_step(m, d);
    else mj_forward(m, d);
    s->steps_mujoco++;
    return CHAINFD_OK;
  }
  s->saved_valid = 0;
  s->timer_valid = 0;  // a static refusal comes before anything is counted
  const char* why = static_refusal(s, step);
  if (why[0]) return hand_over(s, m, d, step, SAID_MODEL, why);
  memcpy(s->saved_timer, d->timer, sizeof s->saved_timer);
  s->timer_valid = 1;
  *done = 0;
  return CHAINFD_OK;
}

int chainfd_stepper_forward(chainfd_stepper* s, const mjModel* m, mjData* d) {
  int done, st = call_begin(s, m, d, 0, &done);
  if (done) return st;
  int ev = evaluate(s, m, d, 0);
  if (ev == EVAL_FAILED) return hand_over(s, m, d, 0, SAID_SOLVER, s->solver_failure);
  if (ev == EVAL_CONSTRAINED) {
    return hand_over(s, m, d, 0, SAID_CONSTRAINT, s->constraint_refusal_msg);
  }
  s->steps_chainfd++;
  return CHAINFD_OK;
}

int chainfd_stepper_step(chainfd_stepper* s, const mjModel* m, mjData* d) {
  double start = timer_now();
  int done, st = call_begin(s, m, d, 1, &done);
  if (done) return st;

  if (s->cfg.fallback_error) {
    mj_getState(m, d, s->saved, mjSTATE_INTEGRATION);
    memcpy(s->saved_warning, d->warning, sizeof s->saved_warning);
    s->saved_valid = 1;
  }
  mj_checkPos(m, d);
  mj_checkVel(m, d);
  char msg[MSG_SIZE];
  int kind = m->opt.integrator == mjINT_EULER          ? DIAG_EULER
             : m->opt.integrator == mjINT_IMPLICITFAST ? DIAG_IMPLICITFAST
                                                       : DIAG_NONE;
  int ev = evaluate_ex(s, m, d, 0, kind);
  if (ev == EVAL_FAILED) return hand_over(s, m, d, 1, SAID_SOLVER, s->solver_failure);
  if (ev == EVAL_CONSTRAINED) {
    return hand_over(s, m, d, 1, SAID_CONSTRAINT, s->constraint_refusal_msg);
  }
  // bad qacc: MuJoCo warns, resets and runs mj_forward; redo that forward with chainfd
  int resets = d->warning[mjWARN_BADQACC].number;
  mj_checkAcc(m, d);
  if (d->warning[mjWARN_BADQACC].number != resets && !disabled(m, mjDSBL_AUTORESET)) {
    // mj_checkAcc's own mj_forward counted this forward: the redo is not counted again
    // (and called mjcb_control, whose controls d keeps: not called twice)
    mjTimerStat counted[mjNTIMER];
    memcpy(counted, d->timer, sizeof counted);
    s->skip_control = 1;
    ev = evaluate_ex(s, m, d, 0, kind);
    s->skip_control = 0;
    memcpy(d->timer, counted, sizeof counted);
    if (ev == EVAL_FAILED) return hand_over(s, m, d, 1, SAID_SOLVER, s->solver_failure);
    if (ev == EVAL_CONSTRAINED) {
      return hand_over(s, m, d, 1, SAID_CONSTRAINT, s->constraint_refusal_msg);
    }
  }

  switch (m->opt.integrator) {
    case mjINT_EULER:
      if (s->have_used) {
        advance(m, d, d->act_dot, s->qacc_used, NULL);
      } else if (euler_damping_diag(m, d, s->diag)) {
        if (solve_with_diag(s, m, s->diag, s->qacc_used))
          return hand_over(s, m, d, 1, SAID_SOLVER, s->solver_failure);
        advance(m, d, d->act_dot, s->qacc_used, NULL);
      } else {
        advance(m, d, d->act_dot, d->qacc, NULL);
      }
      break;
    case mjINT_IMPLICITFAST:
      if (s->have_used) {
        advance(m, d, d->act_dot, s->qacc_used, NULL);
        break;
      }
      if (implicitfast_diag(m, d, s->diag, msg, sizeof msg))
        return hand_over(s, m, d, 1, SAID_SOLVER, msg);  // d's state is still the step's start
      if (solve_with_diag(s, m, s->diag, s->qacc_used))
        return hand_over(s, m, d, 1, SAID_SOLVER, s->solver_failure);
      advance(m, d, d->act_dot, s->qacc_used, NULL);
      break;
    case mjINT_RK4: {
      int mujoco_stages = 0;
      ev = rk4(s, m, d, &mujoco_stages);
      if (ev == EVAL_FAILED) return hand_over(s, m, d, 1, SAID_SOLVER, s->solver_failure);
      if (ev == EVAL_CONSTRAINED) {
        snprintf(msg, sizeof msg, "in a later stage inside the RK4 step, %.500s",
                 s->constraint_refusal_msg);
        return hand_over(s, m, d, 1, SAID_CONSTRAINT, msg);
      }
      if (mujoco_stages) {  // a step partly MuJoCo's counts as MuJoCo's
        snprintf(msg, sizeof msg, "in %d of the RK4 step's later stages, %.500s", mujoco_stages,
                 s->constraint_refusal_msg);
        tell_fallback(s, SAID_RK4_STAGE, "forward for those stages", msg);
        timer_end(d, mjTIMER_STEP, start);
        s->steps_mujoco++;
        return CHAINFD_OK;
      }
      break;
    }
  }
  timer_end(d, mjTIMER_STEP, start);
  s->steps_chainfd++;
  return CHAINFD_OK;
}

int cfd_stepper_set_gpu_tuning(chainfd_stepper* s, const cfd_gpu_tuning* t, char* err,
                               int err_size) {
  static const cfd_gpu_tuning defaults = {0};
  s->gpu_tuning = t ? *t : defaults;
  return s->solver ? cfd_solver_set_tuning(s->solver, &s->gpu_tuning, err, err_size) : 0;
}
