// chainfd_rollout: the model check, the step parameters from mjModel, and the CPU and GPU runs.
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chainfd_rollout.h"
#include "gpu.h"
#include "rollout_internal.h"
#include "joints.h"
#include "mj_chain.h"
#include "rollout_step.h"

#define CFD_MAX_GPUS 16

struct chainfd_rollout {
  int n, nu, device;  // device -1: the CPU
  int layout;         // the sweeps' scratch on the CPU: 0 (a chain, aba_core.h), CFD_ROLLOUT_TREE
  cfd_chain chain;
  cfd_rollout_params params;
  double* param_data;   // the arrays params points into
  int* act_dof;
  cfd_gpu_rollout* gpu[CFD_MAX_GPUS];  // one per device used
  int ngpu;
  double* work;         // CPU scratch (one instance)
  int* warnings;        // CPU: per instance of the last run (warnings_cap entries)
  int warnings_cap;
  int last_B[CFD_MAX_GPUS];  // the last run's instances per device (index 0: the CPU's)
  long last_warnings;   // the CPU's total over the last run
};

static int refuse(char* err, int size, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  cfd_refuse_prefixed(err, size, "rollout refused: ", fmt, ap);
  va_end(ap);
  return 1;
}

// an element's name for a refusal ('name', or #id where it has none: mj_chain.h), by value (the
// temporary lives to the end of the call it is an argument of)
typedef struct {
  char s[128];
} elem_name;
static elem_name name(const mjModel* m, int type, int id) {
  elem_name n;
  cfd_mj_name(m, type, id, n.s, sizeof n.s);
  return n;
}

static int off(const mjModel* m, int flag) { return (m->opt.disableflags & flag) != 0; }

// 0 when m is within what a rollout steps exactly; otherwise the first reason, naming the element.
static int check_model(const mjModel* m, char* err, int size) {
  if (m->opt.integrator != mjINT_EULER && m->opt.integrator != mjINT_IMPLICITFAST)
    return refuse(err, size, "integrator %d: rollouts step Euler and implicitfast", m->opt.integrator);
  if (m->na > 0) return refuse(err, size, "the model has activations (na=%d): not supported", (int)m->na);
  if (m->ntendon > 0) return refuse(err, size, "tendon %s: tendons are not supported", name(m, mjOBJ_TENDON, 0).s);
  if (m->opt.density > 0 || m->opt.viscosity > 0 || m->opt.wind[0] || m->opt.wind[1] || m->opt.wind[2])
    return refuse(err, size, "fluid forces (density, viscosity or wind) are not supported");
  for (int b = 0; b < m->nbody; b++)
    if (m->body_gravcomp[b] != 0)
      return refuse(err, size, "body %s has gravity compensation", name(m, mjOBJ_BODY, b).s);
  for (int j = 0; j < m->njnt; j++) {
    for (int k = 0; k < mjNPOLY; k++)
      if (m->jnt_stiffnesspoly[mjNPOLY * j + k] != 0)
        return refuse(err, size, "joint %s has a nonlinear spring", name(m, mjOBJ_JOINT, j).s);
    if (m->jnt_actfrclimited[j])
      return refuse(err, size, "joint %s limits actuator forces", name(m, mjOBJ_JOINT, j).s);
  }
  for (int i = 0; i < m->nv; i++)
    for (int k = 0; k < mjNPOLY; k++)
      if (m->dof_dampingpoly[mjNPOLY * i + k] != 0)
        return refuse(err, size, "joint %s has nonlinear damping", name(m, mjOBJ_JOINT, m->dof_jntid[i]).s);
  if (m->nu != m->nactuator) return refuse(err, size, "actuators with several controls are not supported");
  if (m->opt.disableactuator != 0)
    return refuse(err, size, "actuator groups are disabled (opt.disableactuator): not supported");
  for (int i = 0; i < m->nplugin; i++) {
    const mjpPlugin* plugin = mjp_getPluginAtSlot(m->plugin[i]);
    if (plugin && (plugin->capabilityflags & (mjPLUGIN_PASSIVE | mjPLUGIN_ACTUATOR)))
      return refuse(err, size, "plugin %s adds passive or actuator forces", plugin->name);
  }
  if (mjcb_passive || mjcb_control || mjcb_act_gain || mjcb_act_bias || mjcb_act_dyn)
    return refuse(err, size, "a MuJoCo callback (mjcb_*) is installed: its forces are not rolled out");
  for (int a = 0; a < m->nactuator; a++) {
    const elem_name name_a = name(m, mjOBJ_ACTUATOR, a);
    const char* an = name_a.s;
    if (m->actuator_trntype[a] != mjTRN_JOINT)
      return refuse(err, size, "actuator %s does not act on a joint", an);
    if (m->actuator_dyntype[a] != mjDYN_NONE)
      return refuse(err, size, "actuator %s has activation dynamics", an);
    if (m->actuator_gaintype[a] != mjGAIN_FIXED && m->actuator_gaintype[a] != mjGAIN_AFFINE)
      return refuse(err, size, "actuator %s: only fixed and affine gains are supported", an);
    if (m->actuator_biastype[a] != mjBIAS_NONE && m->actuator_biastype[a] != mjBIAS_AFFINE)
      return refuse(err, size, "actuator %s: only affine bias is supported", an);
    if (m->actuator_delay[a] != 0 || m->actuator_historyadr[a] >= 0)
      return refuse(err, size, "actuator %s has a delay", an);
    for (int k = 0; k < mjNPOLY; k++)
      if (m->actuator_dampingpoly[mjNPOLY * a + k] != 0)
        return refuse(err, size, "actuator %s has nonlinear damping", an);
    if (m->actuator_ctrlnum[a] != 1) return refuse(err, size, "actuator %s has several controls", an);
  }
  if (!off(m, mjDSBL_CONSTRAINT)) {
    // rolled out: limits and friction loss of hinges and slides, joint equalities between them
    // (rollout_step.h); the rest must be impossible
    int rows = 0, coupled = 0;
    for (int e = 0; e < m->neq && !off(m, mjDSBL_EQUALITY); e++) {
      if (!m->eq_active0[e]) continue;  // (rows of the model's initial activity, eq_active0)
      if (m->eq_type[e] != mjEQ_JOINT)
        return refuse(err, size, "equality %s is a %s: rollouts take joint equalities", name(m, mjOBJ_EQUALITY, e).s,
                      m->eq_type[e] == mjEQ_CONNECT ? "connect" : m->eq_type[e] == mjEQ_WELD ? "weld"
                      : m->eq_type[e] == mjEQ_TENDON ? "tendon equality" : "flex or other equality");
      for (int k = 0; k < 2; k++) {
        int j = k ? m->eq_obj2id[e] : m->eq_obj1id[e];
        if (j >= 0 && m->jnt_type[j] != mjJNT_HINGE && m->jnt_type[j] != mjJNT_SLIDE)
          return refuse(err, size, "equality %s couples %s joint %s: rollouts take joint equalities "
                        "of hinges and slides", name(m, mjOBJ_EQUALITY, e).s,
                        m->jnt_type[j] == mjJNT_BALL ? "ball" : "free", name(m, mjOBJ_JOINT, j).s);
      }
      rows = 1;
      if (m->eq_obj2id[e] >= 0 && ++coupled > CFD_ROLLOUT_EQ_MAX)
        return refuse(err, size, "equality %s: rollouts take at most %d joint equalities between "
                      "two joints", name(m, mjOBJ_EQUALITY, e).s, CFD_ROLLOUT_EQ_MAX);
    }
    for (int j = 0; j < m->njnt && !off(m, mjDSBL_LIMIT); j++) {
      int t = m->jnt_type[j];
      rows |= m->jnt_limited[j];
      if (m->jnt_limited[j] && t != mjJNT_HINGE && t != mjJNT_SLIDE)
        return refuse(err, size, "%s joint %s has limits: rollouts take the limits of hinges and "
                      "slides", t == mjJNT_BALL ? "ball" : "free", name(m, mjOBJ_JOINT, j).s);
    }
    for (int i = 0; i < m->nv && !off(m, mjDSBL_FRICTIONLOSS); i++) {
      int j = m->dof_jntid[i], t = m->jnt_type[j];
      rows |= m->dof_frictionloss[i] > 0;
      if (m->dof_frictionloss[i] > 0 && t != mjJNT_HINGE && t != mjJNT_SLIDE)
        return refuse(err, size, "%s joint %s has friction loss: rollouts take the friction loss "
                      "of hinges and slides", t == mjJNT_BALL ? "ball" : "free", name(m, mjOBJ_JOINT, j).s);
    }
    if (rows && m->opt.noslip_iterations > 0)
      return refuse(err, size, "noslip_iterations > 0: the noslip pass is MuJoCo's");
    if (rows && (m->opt.enableflags & mjENBL_DIAGEXACT))
      return refuse(err, size, "diagexact is enabled: the rows' exact diagonal is MuJoCo's");
    for (int g1 = 0; g1 < m->ngeom && !off(m, mjDSBL_CONTACT); g1++)
      for (int g2 = g1 + 1; g2 < m->ngeom; g2++) {
        int b1 = m->geom_bodyid[g1], b2 = m->geom_bodyid[g2];
        if (b1 == b2 || (m->body_weldid[b1] == 0 && m->body_weldid[b2] == 0)) continue;
        if ((m->geom_contype[g1] & m->geom_conaffinity[g2]) || (m->geom_contype[g2] & m->geom_conaffinity[g1]))
          return refuse(err, size, "bodies %s and %s can touch (geoms %s and %s collide; contacts "
                        "are not rolled out)", name(m, mjOBJ_BODY, b1).s, name(m, mjOBJ_BODY, b2).s,
                        name(m, mjOBJ_GEOM, g1).s, name(m, mjOBJ_GEOM, g2).s);
      }
    if (m->npair > 0 && !off(m, mjDSBL_CONTACT)) {
      int g1 = m->pair_geom1[0], g2 = m->pair_geom2[0];
      return refuse(err, size, "contact pair %s: bodies %s and %s can touch (contacts are not "
                    "rolled out)", name(m, mjOBJ_PAIR, 0).s, name(m, mjOBJ_BODY, m->geom_bodyid[g1]).s,
                    name(m, mjOBJ_BODY, m->geom_bodyid[g2]).s);
    }
  }
  return 0;
}

const cfd_chain* cfd_rollout_chain(const chainfd_rollout* r) { return &r->chain; }
const cfd_rollout_params* cfd_rollout_params_of(const chainfd_rollout* r) { return &r->params; }
cfd_gpu_rollout* cfd_rollout_gpu(const chainfd_rollout* r) { return r->ngpu ? r->gpu[0] : NULL; }

void chainfd_rollout_free(chainfd_rollout* r) {
  if (!r) return;
  for (int k = 0; k < r->ngpu; k++) cfd_gpu_rollout_free(r->gpu[k]);
  cfd_chain_free(&r->chain);
  free(r->param_data);
  free(r->act_dof);
  free(r->work);
  free(r->warnings);
  free(r);
}

// Replaces r's chain and per-dof parameters (n of them, nu = 0) by those of the chain extended to
// `links` links (cfd_chain_extend).
static int extend(chainfd_rollout* r, int links, char* err, int err_size) {
  cfd_chain ext;
  double* data = calloc(5 * (size_t)links + 1, sizeof(double));
  double* work = malloc(sizeof(double) * cfd_rollout_doubles(links, 0));
  if (!data || !work || cfd_chain_extend(&r->chain, links, &ext)) {
    free(data);
    free(work);
    return refuse(err, err_size, "out of memory for a chain of %d links", links);
  }
  cfd_rollout_params* p = &r->params;
  const double* from[5] = {p->qpos0, p->stiffness, p->springref, p->damping, p->reset};
  for (int k = 0; k < 5; k++)  // (link i repeats the model's dof ext.dof[i]: links are dofs)
    for (size_t i = 0; i < (size_t)links; i++) data[(size_t)k * links + i] = from[k][ext.dof[i]];
  p->n = r->n = links;
  p->qpos0 = data;
  p->stiffness = data + links;
  p->springref = data + 2 * (size_t)links;
  p->damping = data + 3 * (size_t)links;
  p->reset = data + 4 * (size_t)links;
  cfd_chain_free(&r->chain);
  r->chain = ext;
  free(r->param_data);
  r->param_data = data;
  free(r->work);
  r->work = work;
  return 0;
}

// Whether the model makes constraint rows a rollout takes (limits, friction loss; check_model has
// refused the rest)
static int rollout_rows(const mjModel* m) {
  if (off(m, mjDSBL_CONSTRAINT)) return 0;
  for (int e = 0; e < m->neq && !off(m, mjDSBL_EQUALITY); e++)
    if (m->eq_active0[e]) return 1;
  for (int j = 0; j < m->njnt && !off(m, mjDSBL_LIMIT); j++)
    if (m->jnt_limited[j]) return 1;
  for (int i = 0; i < m->nv && !off(m, mjDSBL_FRICTIONLOSS); i++)
    if (m->dof_frictionloss[i] > 0) return 1;
  return 0;
}

// MuJoCo's getsolparam on a solref and solimp: the reference's K and B (standard or direct, the
// time constant at least 2 h unless refsafe is disabled; a friction row's K is 0) and solimp
// clamped
static void solver_params(const mjModel* m, const double* solref_in, const double* solimp_in,
                          double* K, double* B, double* imp) {
  double ref[2] = {solref_in[0], solref_in[1]};
  if ((ref[0] > 0) ^ (ref[1] > 0)) ref[0] = 0.02, ref[1] = 1;  // mixed: MuJoCo's default
  if (!off(m, mjDSBL_REFSAFE) && ref[0] > 0) ref[0] = fmax(ref[0], 2 * m->opt.timestep);
  for (int k = 0; k < 5; k++) imp[k] = solimp_in[k];
  imp[0] = fmin(mjMAXIMP, fmax(mjMINIMP, imp[0]));
  imp[1] = fmin(mjMAXIMP, fmax(mjMINIMP, imp[1]));
  imp[2] = fmax(0, imp[2]);
  imp[3] = fmin(mjMAXIMP, fmax(mjMINIMP, imp[3]));
  imp[4] = fmax(1, imp[4]);
  double dmax = imp[1];
  *K = ref[0] > 0 ? 1 / fmax(mjMINVAL, dmax * dmax * ref[0] * ref[0] * ref[1] * ref[1])
                  : -ref[0] / fmax(mjMINVAL, dmax * dmax);
  *B = ref[1] > 0 ? 2 / fmax(mjMINVAL, dmax * ref[0]) : -ref[1] / fmax(mjMINVAL, dmax);
}

// The active joint equalities' parameters (rollout_step.h, CFD_EP_*) into ep (NULL: only counted);
// returns their count
static int eq_params(const mjModel* m, double* ep) {
  int count = 0;
  for (int e = 0; e < m->neq && !off(m, mjDSBL_CONSTRAINT) && !off(m, mjDSBL_EQUALITY); e++) {
    if (!m->eq_active0[e]) continue;  // (check_model: each a joint equality of hinges and slides)
    if (!ep) {
      count++;
      continue;
    }
    double* E = ep + CFD_EP_COUNT * count++;
    int j1 = m->eq_obj1id[e], j2 = m->eq_obj2id[e];
    E[CFD_EP_DOF1] = m->jnt_dofadr[j1];
    E[CFD_EP_REF1] = m->qpos0[m->jnt_qposadr[j1]];
    E[CFD_EP_DOF2] = j2 >= 0 ? m->jnt_dofadr[j2] : -1;
    E[CFD_EP_REF2] = j2 >= 0 ? m->qpos0[m->jnt_qposadr[j2]] : 0;
    for (int k = 0; k < 5; k++) E[CFD_EP_POLY + k] = m->eq_data[mjNEQDATA * e + k];
    solver_params(m, m->eq_solref + mjNREF * e, m->eq_solimp + mjNIMP * e, &E[CFD_EP_K],
                  &E[CFD_EP_B], E + CFD_EP_IMP);
    // mj_diagApprox: the dofs' invweight0 summed
    E[CFD_EP_DIAG] = m->dof_invweight0[m->jnt_dofadr[j1]] + (j2 >= 0 ? m->dof_invweight0[m->jnt_dofadr[j2]] : 0);
  }
  return count;
}

// The rows' parameters per dof (rollout_step.h, CFD_RP_*) into rp (n x CFD_RP_COUNT)
static const double* rows_params(const mjModel* m, const cfd_chain* c, double* rp) {
  for (int i = 0; i < c->n; i++) {
    double* P = rp + CFD_RP_COUNT * i;
    int j = c->jnt[i], t = m->jnt_type[j];
    if (t != mjJNT_HINGE && t != mjJNT_SLIDE) continue;
    P[CFD_RP_DIAG] = m->dof_invweight0[i];
    if (m->jnt_limited[j] && !off(m, mjDSBL_LIMIT)) {
      P[CFD_RP_LIMITED] = 1;
      P[CFD_RP_LO] = m->jnt_range[2 * j];
      P[CFD_RP_HI] = m->jnt_range[2 * j + 1];
      P[CFD_RP_MARGIN] = m->jnt_margin[j];
      solver_params(m, m->jnt_solref + mjNREF * j, m->jnt_solimp + mjNIMP * j, &P[CFD_RP_K],
                    &P[CFD_RP_B], P + CFD_RP_IMP);
    }
    if (m->dof_frictionloss[i] > 0 && !off(m, mjDSBL_FRICTIONLOSS)) {
      double K, imp[5];
      P[CFD_RP_FL] = m->dof_frictionloss[i];
      solver_params(m, m->dof_solref + mjNREF * i, m->dof_solimp + mjNIMP * i, &K, &P[CFD_RP_FB],
                    imp);
      double im = cfd_rollout_impedance(imp, 0, 0);  // distance 0: imp = solimp[0]
      P[CFD_RP_FR] = fmax(mjMINVAL, (1 - im) * m->dof_invweight0[i] / im);
    }
  }
  return rp;
}

static int create(const mjModel* m, int links, int device, chainfd_rollout** out, char* err,
                  int err_size) {
  *out = NULL;
  if (check_model(m, err, err_size)) return 1;
  if (links > 0 && m->nu > 0)
    return refuse(err, err_size, "actuator %s: an extended chain takes no actuators (its repeats "
                  "would need controls of their own)", name(m, mjOBJ_ACTUATOR, 0).s);
  chainfd_rollout* r = calloc(1, sizeof(*r));
  if (!r) return refuse(err, err_size, "out of memory");
  if (cfd_chain_from_model(m, &r->chain, err, err_size)) {
    free(r);
    return 1;
  }
  for (int i = 0; i < r->chain.n; i++)  // an extended rollout repeats a serial chain of screws
    if (links > 0 && (r->chain.kind[i] != CFD_LINK_SCREW || r->chain.parent[i] != i - 1)) {
      int j = r->chain.jnt[i], t = m->jnt_type[j];
      char why[512];
      snprintf(why, sizeof why, "joint %s of body %s: %s; an extended rollout repeats a serial "
               "chain of hinges and slides", name(m, mjOBJ_JOINT, j).s,
               name(m, mjOBJ_BODY, r->chain.body[i]).s,
               t == mjJNT_BALL || t == mjJNT_FREE ? "a ball or free joint" : "its body branches");
      chainfd_rollout_free(r);
      return refuse(err, err_size, "%s", why);
    }
  for (int j = 0; j < m->njnt; j++) {  // an actuator on a ball or free joint
    int t = m->jnt_type[j];
    if (t != mjJNT_BALL && t != mjJNT_FREE) continue;
    int b = m->jnt_bodyid[j];
    if (m->opt.integrator == mjINT_IMPLICITFAST && cfd_mj_free_body_alone(m, j)) {
      char why[512];  // as chainfd_step (plugin/step.c): MuJoCo's own 6x6 solve with gyroscopics
      snprintf(why, sizeof why, "implicitfast with free body %s alone in its tree: MuJoCo solves "
               "its 6 dofs with their gyroscopic velocity derivative (use Euler)",
               name(m, mjOBJ_BODY, b).s);
      chainfd_rollout_free(r);
      return refuse(err, err_size, "%s", why);
    }
    for (int a = 0; a < m->nu; a++)
      if (m->actuator_trnid[2 * a] == j) {
        char why[512];
        snprintf(why, sizeof why, "actuator %s acts on %s joint %s: the rollouts take actuators on "
                 "hinges and slides", name(m, mjOBJ_ACTUATOR, a).s,
                 t == mjJNT_BALL ? "ball" : "free", name(m, mjOBJ_JOINT, j).s);
        chainfd_rollout_free(r);
        return refuse(err, err_size, "%s", why);
      }
  }
  r->layout = cfd_chain_is_serial(&r->chain) ? 0 : CFD_ROLLOUT_TREE;
  if (links > 0 && r->chain.n < 2) {
    chainfd_rollout_free(r);
    return refuse(err, err_size, "extending a chain takes at least two links to repeat from");
  }
  if (links > 0 && r->chain.body[1] == r->chain.body[0]) {  // the repeat must start a body
    char why[256];
    snprintf(why, sizeof why, "body %s carries the chain's first two joints: the repeated links "
             "would begin inside it", name(m, mjOBJ_BODY, r->chain.body[0]).s);
    chainfd_rollout_free(r);
    return refuse(err, err_size, "%s", why);
  }
  int n = r->chain.n, nu = m->nu, rows = rollout_rows(m);
  if (links > 0 && rows) {
    chainfd_rollout_free(r);
    return refuse(err, err_size, "an extended chain takes no limits, friction loss or equalities (their repeats "
                  "would need rows of their own)");
  }
  r->n = n;
  r->nu = nu;
  r->device = device;
  int neq = rows ? eq_params(m, NULL) : 0;
  r->param_data = calloc(5 * (size_t)n + 11 * (size_t)nu + (rows ? CFD_RP_COUNT * (size_t)n : 0) +
                         CFD_EP_COUNT * (size_t)neq + 1, sizeof(double));
  r->act_dof = calloc((size_t)nu + 1, sizeof(int));
  r->work = malloc(sizeof(double) * (cfd_rollout_doubles(n, r->layout) + cfd_rollout_rows_doubles(n, rows, neq)));
  if (!r->param_data || !r->act_dof || !r->work) {
    chainfd_rollout_free(r);
    return refuse(err, err_size, "out of memory");
  }
  double* d = r->param_data;
  double* qpos0 = d;
  double* stiffness = d + n;
  double* springref = d + 2 * n;
  double* damping = d + 3 * n;
  double* reset = d + 4 * n;
  double* gear = d + 5 * n;
  double* gain = gear + nu;
  double* bias = gain + 3 * nu;
  double* ctrlrange = bias + 3 * nu;
  double* forcerange = ctrlrange + 2 * nu;
  int springs = !off(m, mjDSBL_SPRING), dampers = !off(m, mjDSBL_DAMPER);
  // links are dofs in order. The state's qpos per link: a hinge's or slide's MuJoCo qpos; a free
  // joint's position; a ball's or free joint's rotation vector over its three links (the chain's
  // q, which is absolute there: qpos0 0). reset: mj_resetData's qpos0 in those coordinates.
  cfd_chain_q_from_qpos(&r->chain, m->qpos0, reset);
  // A ball's spring: its stiffness at its first link, its spring orientation's rotation vector
  // over its three links' springref (cfd_rollout_ball_spring).
  for (int i = 0; i < n; i++) {
    int j = r->chain.jnt[i], adr = r->chain.qpos[i], kind = r->chain.kind[i];
    qpos0[i] = r->chain.qpos0[i];
    reset[i] += qpos0[i];
    stiffness[i] = springs && kind != CFD_LINK_BALL_NEXT ? m->jnt_stiffness[j] : 0;
    if (kind == CFD_LINK_BALL) cfd_quat_log(m->qpos_spring + adr, springref + i);
    else if (kind == CFD_LINK_SCREW) springref[i] = m->qpos_spring[adr];
    damping[i] = dampers ? m->dof_damping[i] : 0;
  }
  int actuation = !off(m, mjDSBL_ACTUATION);
  for (int a = 0; a < nu; a++) {
    int j = m->actuator_trnid[2 * a], i = m->jnt_dofadr[j];
    double g = m->actuator_gear[6 * m->actuator_outadr[a]];
    r->act_dof[a] = i;
    gear[a] = g;
    const double* gp = m->actuator_gainprm + mjNGAIN * a;
    const double* bp = m->actuator_biasprm + mjNBIAS * a;
    int affine_gain = m->actuator_gaintype[a] == mjGAIN_AFFINE;
    int affine_bias = m->actuator_biastype[a] == mjBIAS_AFFINE;
    for (int k = 0; k < 3; k++) {
      gain[3 * a + k] = actuation && (k == 0 || affine_gain) ? gp[k] : 0;
      bias[3 * a + k] = actuation && affine_bias ? bp[k] : 0;
    }
    int clamp = m->actuator_ctrllimited[a] && !off(m, mjDSBL_CLAMPCTRL);
    ctrlrange[2 * a] = clamp ? m->actuator_ctrlrange[2 * a] : 1;
    ctrlrange[2 * a + 1] = clamp ? m->actuator_ctrlrange[2 * a + 1] : 0;
    forcerange[2 * a] = m->actuator_forcelimited[a] ? m->actuator_forcerange[2 * a] : 1;
    forcerange[2 * a + 1] = m->actuator_forcelimited[a] ? m->actuator_forcerange[2 * a + 1] : 0;
    if (dampers) damping[i] += m->actuator_damping[a] * g * g;  // as MuJoCo's passive damping
  }
  cfd_rollout_params* p = &r->params;
  p->n = n;
  p->nu = nu;
  p->h = m->opt.timestep;
  p->integrator = m->opt.integrator == mjINT_IMPLICITFAST ? CFD_INT_IMPLICITFAST : CFD_INT_EULER;
  p->implicit_damping = dampers && !off(m, mjDSBL_EULERDAMP);
  p->autoreset = !off(m, mjDSBL_AUTORESET);
  p->qpos0 = qpos0;
  p->reset = reset;
  p->stiffness = stiffness;
  p->springref = springref;
  p->damping = damping;
  p->act_dof = r->act_dof;
  p->gear = gear;
  p->gain = gain;
  p->bias = bias;
  p->ctrlrange = ctrlrange;
  p->forcerange = forcerange;
  p->rows = rows ? rows_params(m, &r->chain, forcerange + 2 * nu) : NULL;
  p->eqs = rows ? forcerange + 2 * nu + CFD_RP_COUNT * n : NULL;
  p->neq = rows ? eq_params(m, (double*)p->eqs) : 0;
  if (links > 0 && extend(r, links, err, err_size)) {
    chainfd_rollout_free(r);
    return 1;
  }
  int first = device, count = device >= 0 ? 1 : 0;
  if (device == CHAINFD_ALL_GPUS) {
    first = 0;
    count = cfd_gpu_device_count();
    if (count > CFD_MAX_GPUS) count = CFD_MAX_GPUS;
    if (count == 0) {
      chainfd_rollout_free(r);
      return refuse(err, err_size, "all GPUs asked for, but there is no CUDA device");
    }
  } else if (device < CHAINFD_ALL_GPUS) {
    chainfd_rollout_free(r);
    return refuse(err, err_size, "device %d is not a device index, CHAINFD_CPU or CHAINFD_ALL_GPUS", device);
  }
  for (int k = 0; k < count; k++, r->ngpu++)
    if (cfd_gpu_rollout_create(&r->chain, p, first + k, &r->gpu[k], err, err_size)) {
      chainfd_rollout_free(r);
      return 1;
    }
  *out = r;
  return 0;
}

int chainfd_rollout_create(const mjModel* m, int device, chainfd_rollout** out, char* err,
                           int err_size) {
  return create(m, 0, device, out, err, err_size);
}

int chainfd_rollout_create_extended(const mjModel* m, int links, int device, chainfd_rollout** out,
                                    char* err, int err_size) {
  if (links < 2 || links > CHAINFD_MAX_EXTENDED_LINKS) {
    *out = NULL;
    return refuse(err, err_size, "an extended chain needs 2 to %d links (got %d)",
                  CHAINFD_MAX_EXTENDED_LINKS, links);
  }
  return create(m, links, device, out, err, err_size);
}

int chainfd_rollout_links(const chainfd_rollout* r) { return r->n; }

int chainfd_rollout_link_dof(const chainfd_rollout* r, int link) {
  return link >= 0 && link < r->n ? r->chain.dof[link] : -1;
}

void chainfd_rollout_link_poses(const chainfd_rollout* r, const double* qpos, double* xpos,
                                double* xmat) {
  const cfd_chain* c = &r->chain;
  static const double I3[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1}, O3[3] = {0, 0, 0};
  for (int i = 0; i < c->n; i++) {  // world pose = parent's world pose x the link's pose
    double Re[9], pe[3], Rl[9], pl[3];
    int par = c->parent[i];
    if (c->kind[i] == CFD_LINK_SCREW) {  // home x exp(S q), q = qpos - qpos0
      cfd_screw_exp(c->screw + 6 * i, qpos[i] - c->qpos0[i], Re, pe);
      cfd_se3_mul(c->home_R + 9 * i, c->home_p + 3 * i, Re, pe, Rl, pl);
    } else {  // a ball's links: their state is the chain's q (a rotation vector)
      cfd_link_pose(c, i, qpos, 1, Rl, pl);
    }
    cfd_se3_mul(par < 0 ? I3 : xmat + 9 * par, par < 0 ? O3 : xpos + 3 * par, Rl, pl, xmat + 9 * i,
                xpos + 3 * i);
  }
}

// The state's qpos per link from MuJoCo's (and back), joint by joint in dof order: a hinge's or
// slide's as it is, a ball's quaternion as its rotation vector, a free joint's position as it is
// and its quaternion as its rotation vector
void chainfd_rollout_get_state(const mjModel* m, const mjData* d, double* x) {
  for (int j = 0, k = 0; j < m->njnt; j++) {
    const double* q = d->qpos + m->jnt_qposadr[j];
    switch (m->jnt_type[j]) {
      case mjJNT_FREE: x[k] = q[0]; x[k + 1] = q[1]; x[k + 2] = q[2]; cfd_quat_log(q + 3, x + k + 3); k += 6; break;
      case mjJNT_BALL: cfd_quat_log(q, x + k); k += 3; break;
      default: x[k++] = q[0];
    }
  }
  memcpy(x + m->nv, d->qvel, sizeof(double) * m->nv);
}

void chainfd_rollout_set_state(const mjModel* m, mjData* d, const double* x) {
  for (int j = 0, k = 0; j < m->njnt; j++) {
    double* q = d->qpos + m->jnt_qposadr[j];
    switch (m->jnt_type[j]) {
      case mjJNT_FREE: q[0] = x[k]; q[1] = x[k + 1]; q[2] = x[k + 2]; cfd_quat_exp(x + k + 3, q + 3); k += 6; break;
      case mjJNT_BALL: cfd_quat_exp(x + k, q); k += 3; break;
      default: q[0] = x[k++];
    }
  }
  memcpy(d->qvel, x + m->nv, sizeof(double) * m->nv);
}

double chainfd_rollout_last_kernel_ms(const chainfd_rollout* r) {
  double ms = 0;  // the slowest device's
  for (int k = 0; k < r->ngpu; k++)
    if (cfd_gpu_rollout_last_kernel_ms(r->gpu[k]) > ms) ms = cfd_gpu_rollout_last_kernel_ms(r->gpu[k]);
  return ms;
}

// one device's share of a batch split across GPUs
typedef struct {
  cfd_gpu_rollout* gpu;
  int B, H, shared_init, final_only, status;
  const double *init, *ctrl;
  double* out;
  char err[512];
} gpu_share;

static void* run_share(void* arg) {
  gpu_share* s = arg;
  s->status = cfd_gpu_rollout_run(s->gpu, s->B, s->H, s->init, s->shared_init, s->ctrl, s->out,
                                  s->final_only, CFD_HOST, s->err, sizeof s->err);
  return NULL;
}

static int run_split(chainfd_rollout* r, int B, int H, const double* init, int shared_init,
                     const double* ctrl, double* out, int final_only, char* err, int err_size) {
  if (B < 1 || H < 0) {
    snprintf(err, err_size, "rollout: need B >= 1 and H >= 0 (got B=%d, H=%d)", B, H);
    return 1;
  }
  gpu_share shares[CFD_MAX_GPUS];
  pthread_t threads[CFD_MAX_GPUS];
  int n = r->n, per = (B + r->ngpu - 1) / r->ngpu, used = 0;
  size_t out_per = (size_t)(final_only ? 1 : H + 1) * 2 * n;
  for (int k = 0; k < r->ngpu; k++) r->last_B[k] = 0;
  for (int k = 0; k < r->ngpu && k * per < B; k++, used++) {
    int b0 = k * per, nb = B - b0 < per ? B - b0 : per;
    r->last_B[k] = nb;
    shares[k] = (gpu_share){r->gpu[k], nb, H, shared_init, final_only, 0,
                            shared_init ? init : init + (size_t)b0 * 2 * n,
                            ctrl + (size_t)b0 * H * r->nu, out + (size_t)b0 * out_per, ""};
    if (pthread_create(&threads[k], NULL, run_share, &shares[k])) run_share(&shares[k]), threads[k] = 0;
  }
  int status = 0;
  for (int k = 0; k < used; k++) {
    if (threads[k]) pthread_join(threads[k], NULL);
    if (shares[k].status && !status) {
      status = shares[k].status;
      snprintf(err, err_size, "GPU %d: %s", k, shares[k].err);
    }
  }
  if (status)  // no warnings to report from a failed run
    for (int k = 0; k < r->ngpu; k++) r->last_B[k] = 0;
  return status;
}

int chainfd_rollout_run(chainfd_rollout* r, int B, int H, const double* init, int shared_init,
                        const double* ctrl, double* out, int final_only, chainfd_memory where,
                        char* err, int err_size) {
  for (int k = 0; k < CFD_MAX_GPUS; k++) r->last_B[k] = 0;
  r->last_warnings = 0;
  if (r->ngpu == 1) {  // (its warnings are reported only after a run that succeeded)
    int st = cfd_gpu_rollout_run(r->gpu[0], B, H, init, shared_init, ctrl, out, final_only, (cfd_memory)where,
                                 err, err_size);
    r->last_B[0] = st ? 0 : B;
    return st;
  }
  if (r->ngpu > 1) {
    if (where == CHAINFD_DEVICE) {
      snprintf(err, err_size, "rollout: a batch split across GPUs takes host arrays");
      return 1;
    }
    return run_split(r, B, H, init, shared_init, ctrl, out, final_only, err, err_size);
  }
  if (where == CHAINFD_DEVICE) {
    snprintf(err, err_size, "rollout: device arrays given to a CPU rollout");
    return 1;
  }
  if (B < 1 || H < 0) {
    snprintf(err, err_size, "rollout: need B >= 1 and H >= 0 (got B=%d, H=%d)", B, H);
    return 1;
  }
  if (B > r->warnings_cap) {
    int* w = realloc(r->warnings, sizeof(int) * (size_t)B);
    if (!w) {
      snprintf(err, err_size, "rollout: out of host memory for %d instances", B);
      return 1;
    }
    r->warnings = w;
    r->warnings_cap = B;
  }
  r->last_B[0] = B;
  int n = r->n;
  double* qpos = cfd_rollout_qpos(r->work, n, 1, r->layout);
  double* qvel = cfd_rollout_qvel(r->work, n, 1, r->layout);
  for (int b = 0; b < B; b++) {
    const double* x0 = init + (shared_init ? 0 : (size_t)b * 2 * n);
    memcpy(qpos, x0, sizeof(double) * n);
    memcpy(qvel, x0 + n, sizeof(double) * n);
    if (r->params.rows) cfd_rollout_rows_init(&r->params, r->work, 1, r->layout);
    double* o = out + (size_t)b * (final_only ? 1 : H + 1) * 2 * n;
    if (!final_only) memcpy(o, x0, sizeof(double) * 2 * n);
    r->warnings[b] = 0;
    for (int t = 0; t < H; t++) {
      int st = cfd_rollout_step(&r->chain, &r->params, ctrl + ((size_t)b * H + t) * r->nu, r->work,
                                1, r->layout, &r->warnings[b]);
      if (st) {
        snprintf(err, err_size, "rollout: instance %d step %d: %s at the reset state qpos0", b, t,
                 cfd_status_str(st));
        r->last_B[0] = 0;  // no warnings to report from a failed run
        r->last_warnings = 0;
        return 1;
      }
      if (!final_only) {
        memcpy(o + (size_t)(t + 1) * 2 * n, qpos, sizeof(double) * n);
        memcpy(o + (size_t)(t + 1) * 2 * n + n, qvel, sizeof(double) * n);
      }
    }
    if (final_only) {
      memcpy(o, qpos, sizeof(double) * n);
      memcpy(o + n, qvel, sizeof(double) * n);
    }
    r->last_warnings += r->warnings[b];
  }
  return 0;
}

const double* cfd_rollout_cpu_rows(chainfd_rollout* r, const double* x, const double* ctrl, int* status) {
  int n = r->n, warnings = 0;
  double* qpos = cfd_rollout_qpos(r->work, n, 1, r->layout);
  double* qvel = cfd_rollout_qvel(r->work, n, 1, r->layout);
  memcpy(qpos, x, sizeof(double) * n);
  memcpy(qvel, x + n, sizeof(double) * n);
  if (r->params.rows) cfd_rollout_rows_init(&r->params, r->work, 1, r->layout);
  *status = cfd_rollout_forward(&r->chain, &r->params, ctrl, r->work, 1, r->layout, &warnings);
  return r->params.rows ? qvel + n : NULL;
}

long chainfd_rollout_warnings(const chainfd_rollout* r) {
  if (r->ngpu == 0) return r->last_warnings;
  long total = 0;
  for (int k = 0; k < r->ngpu; k++)
    if (r->last_B[k]) total += cfd_gpu_rollout_last_warnings(r->gpu[k]);
  return total;
}

int chainfd_rollout_instance_warnings(const chainfd_rollout* r, int* counts, char* err,
                                      int err_size) {
  if (r->ngpu == 0) {
    memcpy(counts, r->warnings, sizeof(int) * (size_t)r->last_B[0]);
    return 0;
  }
  for (int k = 0, b0 = 0; k < r->ngpu; b0 += r->last_B[k], k++)
    if (r->last_B[k] && cfd_gpu_rollout_instance_warnings(r->gpu[k], counts + b0, err, err_size))
      return 1;
  return 0;
}

void* chainfd_host_alloc(size_t bytes) { return cfd_gpu_host_alloc(bytes); }
void chainfd_host_free(void* p) { cfd_gpu_host_free(p); }

int cfd_rollout_set_tuning(chainfd_rollout* r, const cfd_gpu_tuning* t, char* err, int err_size) {
  for (int k = 0; k < r->ngpu; k++)
    if (cfd_gpu_rollout_set_tuning(r->gpu[k], t, err, err_size)) return 1;
  return 0;
}

long cfd_rollout_scan_steps(const chainfd_rollout* r) {
  long steps = 0;
  for (int k = 0; k < r->ngpu; k++) steps += cfd_gpu_rollout_scan_steps(r->gpu[k]);
  return steps;
}
