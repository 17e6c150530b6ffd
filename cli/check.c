// chainfd info / chainfd check.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mujoco/mjplugin.h>

#include "args.h"
#include "auto.h"
#include "backend.h"
#include "cfd_math.h"
#include "gpu.h"
#include "chainfd.h"
#include "chain_gen.h"
#include "commands.h"
#include "constraint.h"
#include "deriv_internal.h"
#include "mj_chain.h"
#include "mj_random.h"

static const char* joint_kind(int t) {
  return t == mjJNT_HINGE ? "hinge" : t == mjJNT_SLIDE ? "slide" : t == mjJNT_BALL ? "ball" : "free";
}

static const char* nm(const mjModel* m, int type, int id) {
  const char* s = id >= 0 ? mj_id2name(m, type, id) : NULL;
  return s && s[0] ? s : "-";
}

// --- what chainfd_step does with the model as written ---------------------------------------------


// Geoms g1, g2 can touch as mj_collision filters them: contype/conaffinity, same weld, parent-child
// (unless filterparent is disabled), <exclude>. Distance and margins are not considered.
static int geoms_may_collide(const mjModel* m, int g1, int g2) {
  if (!((m->geom_contype[g1] & m->geom_conaffinity[g2]) ||
        (m->geom_contype[g2] & m->geom_conaffinity[g1])))
    return 0;
  int b1 = m->geom_bodyid[g1], b2 = m->geom_bodyid[g2];
  int w1 = m->body_weldid[b1], w2 = m->body_weldid[b2];
  if (w1 == w2) return 0;
  int p1 = m->body_weldid[m->body_parentid[w1]], p2 = m->body_weldid[m->body_parentid[w2]];
  if (!(m->opt.disableflags & mjDSBL_FILTERPARENT) && w1 && w2 && (w1 == p2 || w2 == p1)) return 0;
  int lo = b1 < b2 ? b1 : b2, hi = b1 < b2 ? b2 : b1;
  for (int e = 0; e < m->nexclude; e++)  // body1 << 16 + body2, either order
    if (m->exclude_signature[e] == ((lo << 16) + hi) || m->exclude_signature[e] == ((hi << 16) + lo))
      return 0;
  return 1;
}


// The model's elements that make constraint rows in some states: possible contacts, limited joints
// and tendons. "" when none.
static void conditional_constraints(const mjModel* m, char* out, int size) {
  out[0] = 0;
  if (m->opt.disableflags & mjDSBL_CONSTRAINT) return;
  int len = 0;
  char a[128], b[128];
#define CFD_APPEND(...) \
  if (len < size) len += snprintf(out + len, size - len, __VA_ARGS__)
  if (!(m->opt.disableflags & mjDSBL_CONTACT)) {
    int found = m->npair > 0;
    if (found) CFD_APPEND("contacts (%d explicit <pair>s)", (int)m->npair);
    for (int g1 = 0; g1 < m->ngeom && !found; g1++)
      for (int g2 = g1 + 1; g2 < m->ngeom && !found; g2++)
        if (geoms_may_collide(m, g1, g2)) {
          found = 1;
          CFD_APPEND("contacts (for one, geoms %s and %s can touch)",
                     cfd_mj_name(m, mjOBJ_GEOM, g1, a, sizeof a), cfd_mj_name(m, mjOBJ_GEOM, g2, b, sizeof b));
        }
  }
  if (!(m->opt.disableflags & mjDSBL_LIMIT)) {
    int nlim = 0, first = -1;
    for (int j = 0; j < m->njnt; j++)
      if (m->jnt_limited[j] && nlim++ == 0) first = j;
    if (nlim)
      CFD_APPEND("%sjoint limits (%d limited joint%s: %s%s)", len ? ", " : "", nlim, nlim > 1 ? "s" : "",
                 cfd_mj_name(m, mjOBJ_JOINT, first, a, sizeof a), nlim > 1 ? ", ..." : "");
    nlim = 0;
    for (int t = 0; t < m->ntendon; t++)
      if (m->tendon_limited[t] && nlim++ == 0) first = t;
    if (nlim)
      CFD_APPEND("%stendon limits (%d limited tendon%s: %s%s)", len ? ", " : "", nlim, nlim > 1 ? "s" : "",
                 cfd_mj_name(m, mjOBJ_TENDON, first, a, sizeof a), nlim > 1 ? ", ..." : "");
  }
#undef CFD_APPEND
}

// Where chainfd's constraint solver hands the rows of a state to MuJoCo whatever the state (the
// options step.c refuses, in its words), or which rows it refuses: "" when it takes them all.
static void constraint_handover(const mjModel* m, char* out, int size) {
  out[0] = 0;
  if (m->opt.disableflags & mjDSBL_CONSTRAINT) return;
  if (m->opt.noslip_iterations > 0)
    snprintf(out, size, "noslip_iterations > 0 (the noslip pass after the solver is MuJoCo's)");
  else if (m->opt.enableflags & mjENBL_DIAGEXACT)
    snprintf(out, size, "diagexact is enabled (the rows' impedance from the exact diagonal of "
                        "J M^-1 J^T is MuJoCo's)");
  else if (m->opt.enableflags & (mjENBL_SPECULATIVE | mjENBL_IPC))
    snprintf(out, size, "speculative or IPC contacts are enabled");
}

enum { STEPPER_STEPS = 0, STEPPER_THIS_STATE = 1, STEPPER_NEVER = 2 };

// Predicts what chainfd_step does with the model as written (constraints and options as in the
// file; the plugin instance's config when declared, else backend=auto) by one chainfd step with
// fallback=error from the model's initial state (qpos0), and prints it on one line beginning
// "stepper:". STEPPER_NEVER: every step goes to MuJoCo (an option or element chainfd does not
// reproduce, rows in every state under an option its solver refuses, e.g. friction loss with a
// noslip pass, or a config error);
// STEPPER_THIS_STATE: the initial state has contacts or active limits.
static int predict_stepper(const mjModel* m) {
  int inst = cfd_plugin_instance(m, CHAINFD_PLUGIN_NAME);
  chainfd_config cfg = {cfd_plugin_config(m, inst, "backend"), cfd_plugin_config(m, inst, "precision"),
                        cfd_plugin_config(m, inst, "device"), "error"};
  char err[1024], more[1024];
  chainfd_stepper* s = chainfd_stepper_create(m, &cfg, "chainfd", err, sizeof err);
  if (!s) {
    printf("stepper: chainfd hands every step to MuJoCo: the configuration cannot be served: %s\n",
           err);
    return STEPPER_NEVER;
  }
  mjData* d = mj_makeData(m);
  if (!d) {
    chainfd_stepper_free(s);
    printf("stepper: not predicted: out of memory for mjData\n");
    return STEPPER_NEVER;
  }
  int rc = chainfd_stepper_step(s, m, d), verdict = STEPPER_STEPS;
  chainfd_stats st;
  chainfd_stepper_stats(s, &st);
  char rows[1024], handover[512];
  conditional_constraints(m, rows, sizeof rows);
  constraint_handover(m, handover, sizeof handover);
  more[0] = 0;
  if (rows[0] && handover[0])
    snprintf(more, sizeof more, "%s; where they are active and %s", rows, handover);
  // backend=auto under the model's own fallback takes MuJoCo's own step where that is faster (a
  // short chain on the CPU; never under fallback=error, which the prediction above uses)
  int mujoco_own = 0;
  chainfd_config own = cfg;
  own.fallback = cfd_plugin_config(m, inst, "fallback");
  chainfd_stepper* so = chainfd_stepper_create(m, &own, "chainfd", err, sizeof err);
  if (so) {
    chainfd_stats sto;
    chainfd_stepper_stats(so, &sto);
    mujoco_own = !strcmp(sto.backend, "mujoco");
    chainfd_stepper_free(so);
  }
  if (rc == CHAINFD_OK && mujoco_own) {
    printf("stepper: backend=auto hands every step to MuJoCo's own mj_step, the faster on a model "
           "this small or shallow (chainfd's dynamics: backend=cpu, or fallback=error)\n");
  } else if (rc == CHAINFD_OK) {
    printf("stepper: chainfd steps this model (backend %s)\n", st.backend);
    if (more[0]) printf("  MuJoCo takes the steps where these make constraint rows: %s\n", more);
    else if (rows[0]) printf("  constraint rows, solved by chainfd where active: %s\n", rows);
  } else if (rc == CHAINFD_ERR_UNSUPPORTED && d->nefc > 0 && d->nf == 0 && d->ne == 0) {
    // contacts or limits active in the initial state only: other states may be chainfd's
    printf("stepper: chainfd hands the initial state's step to MuJoCo: %s\n", st.last_fallback);
    if (mujoco_own)
      printf("  (and with this model's configuration, backend=auto hands every step to MuJoCo's own "
             "mj_step, the faster on a model this small or shallow)\n");
    if (more[0]) printf("  MuJoCo takes the steps where these make constraint rows: %s\n", more);
    verdict = STEPPER_THIS_STATE;
  } else {
    // a refused model or option (no constraint rows made), rows its solver refuses made in every
    // state (friction loss or equality under a noslip pass, say), or an error of the configuration
    const char* why = rc == CHAINFD_ERR_UNSUPPORTED ? st.last_fallback : chainfd_last_error();
    if (rc == CHAINFD_ERR_UNSUPPORTED && d->nf > 0)
      snprintf(more, sizeof more, "%s (frictionloss rows exist in every state)", why);
    else if (rc == CHAINFD_ERR_UNSUPPORTED && d->ne > 0)
      snprintf(more, sizeof more, "%s (equality rows exist in every state)", why);
    else snprintf(more, sizeof more, "%s", why);
    printf("stepper: chainfd hands every step to MuJoCo: %s\n", more);
    verdict = STEPPER_NEVER;
  }
  mj_deleteData(d);
  chainfd_stepper_free(s);
  return verdict;
}

int cfd_cmd_info(int argc, char** argv) {
  const char* path = CFD_DEFAULT_SCENE;
  int batch = 1;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--batch") && i + 1 < argc) {
      if (cfd_arg_int("chainfd info", "--batch", argv[++i], 1, 100000000, &batch)) return 2;
    } else if (argv[i][0] != '-') path = argv[i];
    else {
      fprintf(stderr, "chainfd info: unknown or incomplete option '%s'\n", argv[i]);
      return 2;
    }
  }
  char err[1024];
  mjModel* m = cfd_load_model(path, err, sizeof err);
  if (!m) {
    fprintf(stderr, "chainfd: cannot load %s: %s\n", path, err);
    return 1;
  }
  printf("model %s: nbody=%d njnt=%d nv=%d nu=%d na=%d\n", path, (int)m->nbody, (int)m->njnt,
         (int)m->nv, (int)m->nu, (int)m->na);
  predict_stepper(m);
  cfd_chain c;
  if (cfd_chain_from_model(m, &c, err, sizeof err)) {
    printf("refused: %s\n", err);
    mj_deleteModel(m);
    return 1;
  }
  int roots = 0;
  for (int i = 0; i < c.n; i++) roots += c.parent[i] < 0;
  printf("chain: %d links (one dof each; a ball or free joint has 3 or 6), %s, gravity (%g %g %g)\n",
         c.n, cfd_chain_is_serial(&c) ? "a serial chain"
              : roots > 1 ? "a kinematic tree with several roots" : "a kinematic tree",
         c.gravity[0], c.gravity[1], c.gravity[2]);
  int shown = c.n <= 40 ? c.n : 20;
  printf("  link  parent  body                 joint                type   dof  mass        armature\n");
  for (int i = 0; i < c.n; i++) {
    if (i == shown && c.n > 40) {
      printf("  ... (%d more links)\n", c.n - shown);
      break;
    }
    printf("  %4d  %6d  %-20s %-20s %-6s %4d  %-10.4g  %g\n", i, c.parent[i],
           nm(m, mjOBJ_BODY, c.body[i]), nm(m, mjOBJ_JOINT, c.jnt[i]),
           joint_kind(m->jnt_type[c.jnt[i]]), c.dof[i], c.inertia[36 * i + 35], c.armature[i]);
  }
  printf("back ends:\n");
  for (int b = 0; b < cfd_backend_count(); b++) {
    const cfd_backend* be = cfd_backend_get(b);
    char why[512];
    if (cfd_backend_supports(be, m, &c, why, sizeof why)) printf("  %-10s refused: %s\n", be->name, why);
    else if (be->gpu_algorithm >= 0 && cfd_gpu_device_count() == 0)
      printf("  %-10s needs a CUDA device (none here)\n", be->name);
    else printf("  %-10s supported  (%s)\n", be->name, be->description);
  }
  int gpus = cfd_gpu_device_count();
  char why[512];
  const char* pick = cfd_auto_pick(c.n, batch, gpus > 0, cfd_chain_shape(&c), why, sizeof why);
  printf("backend=auto for a batch of %d: %s\n  (%s)\n", batch, pick, why);
  cfd_chain_free(&c);
  mj_deleteModel(m);
  return 0;
}


// Largest |a - b| over n values (NaN propagates).
static double max_abs_diff(const double* a, const double* b, int n) {
  double w = 0;
  for (int i = 0; i < n; i++) w = cfd_worst(w, fabs(a[i] - b[i]));
  return w;
}

// Largest |dqvel| / max(1, |qvel|): absolute where qvel is small, relative where it is large.
static double max_scaled_diff(const double* got, const double* ref, int n) {
  double w = 0;
  for (int i = 0; i < n; i++) w = cfd_worst(w, fabs(got[i] - ref[i]) / fmax(1, fabs(ref[i])));
  return w;
}

// chainfd_step against mj_step, one step at a time, for every back end `backend` names: from each
// state of MuJoCo's own trajectory (`steps` mj_step from one seeded random state, constraints
// disabled), one chainfd step on a copy of that state against that mj_step. Prints the largest
// one-step |dqpos| and scaled |dqvel| and decides on them (tol); returns nonzero when a step is
// refused or a difference exceeds tol. Free-running trajectories from a random start are chaotic
// (MuJoCo diverges from itself as much), so their divergence is printed beside MuJoCo's own from a
// 1e-15 perturbation of qpos, for information only.
// Whether the --backend argument (all, or names separated by commas) names back end `name`
static int names(const char* list, const char* name) {
  if (!strcmp(list, "all")) return 1;
  size_t len = strlen(name);
  for (const char* at = list; *at;) {
    const char* end = strchr(at, ',');
    size_t k = end ? (size_t)(end - at) : strlen(at);
    if (k == len && !strncmp(at, name, len)) return 1;
    if (!end) break;
    at = end + 1;
  }
  return 0;
}

// The first entry of a --backend list that names no back end (NULL when all are known), into buf:
// an empty entry (an empty list, or a comma with nothing after it) and "all" within a list are
// named as such
static const char* unknown_backend(const char* list, char* buf, size_t size) {
  if (!strcmp(list, "all")) return NULL;
  for (const char* at = list;;) {
    const char* end = strchr(at, ',');
    size_t k = end ? (size_t)(end - at) : strlen(at);
    snprintf(buf, size, "%.*s", (int)k, at);
    if (!k) return snprintf(buf, size, "(an empty entry in '%s')", list), buf;
    if (!strcmp(buf, "all")) return snprintf(buf, size, "'all' in a list"), buf;
    if (!cfd_backend_find(buf)) return buf;
    if (!end) break;
    at = end + 1;
  }
  return NULL;
}

// A back end's refusal that `--backend all` expects: CFA on a link with a singular inertia, or a
// chain-only back end (CFA, cuda.jsiia) on a tree or a ball or free joint. An asked-for back end
// that refuses is a failure.
static int expected_refusal(const char* name, const char* err) {
  return (strstr(name, ".cfa") && strstr(err, "singular")) || strstr(err, "takes serial chains") ||
         strstr(err, "takes unbranched chains");
}

static int check_steps(const mjModel* m, const char* backend, int steps, unsigned long long seed,
                       double tol, int tol_given) {
  char err[1024];
  int nq = m->nq, nv = m->nv, failed = 0;
  mjData* start = mj_makeData(m);
  mjData* traj = mj_makeData(m);  // MuJoCo's trajectory
  mjData* one = mj_makeData(m);   // one chainfd step from its present state
  mjData* free_run = mj_makeData(m);
  mjData* tight = mj_makeData(m);  // one step of MuJoCo's solver at 1e-14 from the same state
  mjModel* mt = mj_copyModel(NULL, m);
  if (mt) {
    mt->opt.tolerance = 1e-14;
    mt->opt.iterations = 1000;
    mt->opt.ls_iterations = 100;
  }
  if (!start || !traj || !one || !free_run || !tight || !mt) {
    fprintf(stderr, "chainfd check: out of memory for mjData\n");
    failed = 1;
    goto done;
  }
  cfd_rng rng = {seed ^ 0x5DEECE66Dull};
  cfd_random_state(m, start, &rng, CFD_RANDOM_ALL);

  // MuJoCo against itself from qpos + 1e-15: how chaotic the free-running trajectory is; and
  // whether MuJoCo's own trajectory went unstable and was reset (mj_step's bad-state reset): the
  // comparisons after a reset start from rest, which says less
  double chaos = 0;
  int resets = 0, first_reset = -1;
  mj_copyData(traj, m, start);
  mj_copyData(one, m, start);
  for (int i = 0; i < nq; i++) one->qpos[i] += 1e-15;
  for (int k = 0; k < steps; k++) {
    int bad = traj->warning[mjWARN_BADQPOS].number + traj->warning[mjWARN_BADQVEL].number +
              traj->warning[mjWARN_BADQACC].number;
    mj_step(m, traj);
    mj_step(m, one);
    chaos = cfd_worst(chaos, max_abs_diff(one->qpos, traj->qpos, nq));
    if (traj->warning[mjWARN_BADQPOS].number + traj->warning[mjWARN_BADQVEL].number +
            traj->warning[mjWARN_BADQACC].number != bad) {
      resets++;
      if (first_reset < 0) first_reset = k;
    }
  }
  // constraint rows: MuJoCo's solver stops at the model's tolerance, so one step's parity is
  // judged to the 1e-6 (relative), and each side is set beside MuJoCo's own solve at 1e-14
  int rows = 0;
  mj_copyData(traj, m, start);
  for (int k = 0; k < steps && !rows; k++) {
    mj_step(m, traj);
    rows = traj->nefc > 0;
  }
  if (rows && !tol_given) tol = 1e-6;
  if (resets)
    printf("steps: MuJoCo's own trajectory from this random start went unstable and was reset %d "
           "time%s (first at step %d): the comparisons from then on start from rest (another "
           "--seed, or a model with more mass, tests more states)\n",
           resets, resets > 1 ? "s" : "", first_reset);

  for (int b = 0; b < cfd_backend_count(); b++) {
    const char* name = cfd_backend_get(b)->name;
    if (!names(backend, name)) continue;
    if (cfd_backend_get(b)->gpu_algorithm >= 0 && cfd_gpu_device_count() == 0) {
      printf("%s steps SKIPPED: no CUDA device\n", name);
      continue;
    }
    cfd_solver* probe = cfd_solver_create(m, name, err, sizeof err);
    if (!probe) {  // under "all", only as expected_refusal says; an asked one never may
      printf("%s refused: %s\n", name, err);
      if (strcmp(backend, "all") || !expected_refusal(name, err)) failed = 1;
      continue;
    }
    cfd_solver_free(probe);
    chainfd_config cfg = {name, NULL, NULL, "error"};  // never a silent MuJoCo step
    chainfd_stepper* s = chainfd_stepper_create(m, &cfg, name, err, sizeof err);
    if (!s) {
      printf("%s error: %s\n", name, err);
      failed = 1;
      continue;
    }
    mj_copyData(traj, m, start);
    mj_copyData(free_run, m, start);
    double dqpos = 0, dqvel = 0, free_dqpos = 0, tight_mj = 0, tight_cfd = 0;
    double judged_pos = 0, judged_vel = 0;
    int done = 0, free_steps = -1, short_steps = 0;  // free_steps: where the free run was refused, -1 when never
    for (; done < steps; done++) {
      if (rows) {
        mj_copyData(tight, m, traj);
        mj_step(mt, tight);
      }
      mj_copyData(one, m, traj);
      if (chainfd_stepper_step(s, m, one)) {
        printf("%s error: step %d: %s\n", name, done, chainfd_last_error());
        failed = 1;
        break;
      }
      if (free_steps < 0 && chainfd_stepper_step(s, m, free_run)) free_steps = done;
      mj_step(m, traj);
      double ep = max_abs_diff(one->qpos, traj->qpos, nq);
      double ev = max_scaled_diff(one->qvel, traj->qvel, nv);
      dqpos = cfd_worst(dqpos, ep);
      dqvel = cfd_worst(dqvel, ev);
      if (rows) {
        double em = max_scaled_diff(traj->qvel, tight->qvel, nv);
        double ec = max_scaled_diff(one->qvel, tight->qvel, nv);
        tight_mj = cfd_worst(tight_mj, em);
        tight_cfd = cfd_worst(tight_cfd, ec);
        // a step where mj_step at the model's tolerance is farther from MuJoCo's converged solve
        // than chainfd's is judged against the converged one (MuJoCo's solver stopped short)
        if ((ep > tol || ev > tol) && ec <= em) {
          short_steps++;
          ep = max_abs_diff(one->qpos, tight->qpos, nq);
          ev = ec;
        }
      }
      judged_pos = cfd_worst(judged_pos, ep);
      judged_vel = cfd_worst(judged_vel, ev);
      if (free_steps < 0) free_dqpos = cfd_worst(free_dqpos, max_abs_diff(free_run->qpos, traj->qpos, nq));
    }
    int pass = done == steps && judged_pos <= tol && judged_vel <= tol;
    printf("%s max_abs_dqpos=%.3e max_abs_dqvel=%.3e steps=%d%s\n", name, dqpos, dqvel, done,
           pass ? "" : "  FAIL");
    if (short_steps)
      printf("  (judged) in %d steps mj_step at the model's tolerance was farther from MuJoCo's "
             "converged solve than chainfd_step: those judged against the converged one, "
             "max_abs_dqpos=%.3e max_abs_dqvel=%.3e\n", short_steps, judged_pos, judged_vel);
    if (rows)
      printf("  (information) constraint rows: against one mj_step with MuJoCo's solver at "
             "tolerance 1e-14: chainfd_step max_abs_dqvel=%.3e, mj_step at the model's tolerance "
             "%.0e max_abs_dqvel=%.3e\n", tight_cfd, m->opt.tolerance, tight_mj);
    if (free_steps >= 0)
      printf("  (information) free-running chainfd_step stopped at step %d: %s\n", free_steps,
             chainfd_last_error());
    else
      printf("  (information) free-running over %d steps: chainfd_step vs mj_step max_abs_dqpos=%.3e; "
             "mj_step vs mj_step from qpos+1e-15 max_abs_dqpos=%.3e\n", steps, free_dqpos, chaos);
    if (!pass) failed = 1;
    chainfd_stepper_free(s);
  }
done:
  mj_deleteModel(mt);
  mj_deleteData(tight);
  mj_deleteData(free_run);
  mj_deleteData(one);
  mj_deleteData(traj);
  mj_deleteData(start);
  return failed;
}

// (--constraints --steps: check_steps above, constraints on, the model's solver settings; a step
// where mj_step is farther from MuJoCo's converged solve than chainfd's is judged against that.)
// --constraints: chainfd's constraint solver (core/constraint.h: M^-1 by cpu.fast's sweeps, the
// unconstrained qacc by cpu.fast) against MuJoCo's Newton solver at tolerance 1e-14 (1000
// iterations, 100 line-search iterations) on the same rows, in states where rows are active: the
// model's keyframes with noise, then random states (hinges over their whole circle reach their
// limits). qacc relative to its inf-norm; exits 1 past tol.
static int check_constraints(mjModel* m, int states, unsigned long long seed, double tol) {
  char err[1024];
  m->opt.solver = mjSOL_NEWTON;
  m->opt.tolerance = 1e-14;
  m->opt.iterations = 1000;
  m->opt.ls_iterations = 100;
  if (m->opt.noslip_iterations > 0) {
    printf("refused: noslip_iterations = %d (chainfd's solver has no noslip pass)\n",
           (int)m->opt.noslip_iterations);
    return 1;
  }
  cfd_solver* fast = cfd_solver_create(m, "cpu.fast", err, sizeof err);
  cfd_csolver* cs = fast ? cfd_csolver_create(m, err, sizeof err) : NULL;
  if (!cs) {
    printf("refused: %s\n", err);
    cfd_solver_free(fast);
    return 1;
  }
  int nv = m->nv, nefc_max = 0, iter_max = 0, failed = 0;
  int body_max = 0, dof_max = 0, coupled_max = 0;
  mjData* d = mj_makeData(m);
  double* smooth = malloc(sizeof(double) * nv);
  double* got = malloc(sizeof(double) * nv);
  double worst = 0, worst_smooth = 0;
  cfd_rng rng = {seed};
  cfd_csolve_opt opt = {1e-12, 200, NULL};
  if (!d || !smooth || !got) {
    printf("out of memory for the states\n");
    failed = 1;
  }
  for (int s = 0; s < states && !failed; s++) {
    mj_resetData(m, d);
    if (m->nkey > 0 && s < states / 2) {  // a keyframe, its qpos and qvel with noise
      mj_resetDataKeyframe(m, d, s % m->nkey);
      for (int j = 0; j < m->njnt; j++) {
        if (m->jnt_type[j] != mjJNT_HINGE && m->jnt_type[j] != mjJNT_SLIDE) continue;
        d->qpos[m->jnt_qposadr[j]] += cfd_rng_uniform(&rng, -0.3, 0.3);
      }
      for (int i = 0; i < nv; i++) d->qvel[i] += cfd_rng_uniform(&rng, -0.5, 0.5);
    } else {
      cfd_random_state(m, d, &rng, CFD_RANDOM_QPOS | CFD_RANDOM_QVEL | CFD_RANDOM_CTRL);
    }
    mj_forward(m, d);
    if ((int)d->nefc > nefc_max) nefc_max = (int)d->nefc;
    if (cfd_solver_qacc(fast, m, d, NULL, smooth, err, sizeof err)) {
      printf("cpu.fast error: %s\n", err);
      failed = 1;
      break;
    }
    worst_smooth = cfd_worst(worst_smooth, cfd_rel_err_inf(smooth, d->qacc_smooth, nv));
    cfd_csolve_stats st;
    cfd_csolve_out out = {got, NULL, NULL, NULL, NULL, NULL, 0};
    if (cfd_csolver_solve(cs, m, d, smooth, &opt, &out, &st, err, sizeof err)) {
      printf("cpu.fast (constraints) error at state %d (nefc %d): %s\n", s, (int)d->nefc, err);
      failed = 1;
      break;
    }
    if (st.iterations > iter_max) iter_max = st.iterations;
    if (st.rows_body > body_max) body_max = st.rows_body;
    if (st.rows_dof > dof_max) dof_max = st.rows_dof;
    if (st.rows_coupled > coupled_max) coupled_max = st.rows_coupled;
    worst = cfd_worst(worst, cfd_rel_err_inf(got, d->qacc, nv));
  }
  int pass = !failed && worst <= tol;
  printf("cpu.fast max_rel_err=%.3e states=%d nefc_max=%d newton_steps_max=%d (qacc_smooth %.1e)%s\n",
         worst, states, nefc_max, iter_max, worst_smooth, pass ? "" : "  FAIL");
  printf("  (information) rows solved through body inertias <= %d, joint diagonals <= %d, "
         "Woodbury <= %d a state\n", body_max, dof_max, coupled_max);
  free(smooth); free(got);
  mj_deleteData(d);
  cfd_csolver_free(cs);
  cfd_solver_free(fast);
  return !pass;
}

// The largest entry of |a - b| over the largest of |b| (at least tiny: an all-zero b compares
// absolutely)
static double matrix_rel_err(const double* a, const double* b, size_t count) {
  double e = 0, s = 0;
  for (size_t k = 0; k < count; k++) {
    e = cfd_worst(e, fabs(a[k] - b[k]));
    s = fmax(s, fabs(b[k]));
  }
  return e / fmax(s, 1e-300);
}

// mjd_transitionFD's A and B (centred, eps) for a model of hinges and slides, by mj_step itself:
// for RK4, which mjd_transitionFD refuses in MuJoCo 4.0.0
static void step_transition_fd(const mjModel* m, const mjData* d, mjData* e, double eps, double* A,
                               double* B) {
  int nv = m->nv, nu = m->nu, nx = 2 * nv;
  double* xp = malloc(sizeof(double) * 2 * nx);
  double* xm = xp + nx;
  for (int j = 0; j < nx + nu; j++) {
    for (int side = 0; side < 2; side++) {
      mj_copyData(e, m, d);
      double dlt = side ? -eps : eps;
      if (j < nv) e->qpos[m->jnt_qposadr[m->dof_jntid[j]]] += dlt;
      else if (j < nx) e->qvel[j - nv] += dlt;
      else e->ctrl[j - nx] += dlt;
      mj_step(m, e);
      double* x = side ? xm : xp;
      for (int i = 0; i < nv; i++) x[i] = e->qpos[m->jnt_qposadr[m->dof_jntid[i]]], x[nv + i] = e->qvel[i];
    }
    for (int i = 0; i < nx; i++) {
      double g = (xp[i] - xm[i]) / (2 * eps);
      if (j < nx) A[(size_t)nx * i + j] = g;
      else B[(size_t)nu * i + j - nx] = g;
    }
  }
  free(xp);
}

// Which force-limited actuators of e (after mj_forward) sit at or past a force range's end, one bit
// each (the first 64): a stencil across a change is across the clamp's kink
static unsigned long long saturated(const mjModel* m, const mjData* e) {
  unsigned long long bits = 0;
  for (int j = 0; j < m->nu && j < 64; j++) {
    if (!m->actuator_forcelimited[j]) continue;
    const double *gp = m->actuator_gainprm + mjNGAIN * j, *bp = m->actuator_biasprm + mjNBIAS * j;
    double len = e->actuator_length[j], vel = e->actuator_velocity[j], u = e->ctrl[j];
    if (m->actuator_ctrllimited[j] && !(m->opt.disableflags & mjDSBL_CLAMPCTRL))
      u = fmin(fmax(u, m->actuator_ctrlrange[2 * j]), m->actuator_ctrlrange[2 * j + 1]);
    double gain = gp[0] + (m->actuator_gaintype[j] == mjGAIN_AFFINE ? gp[1] * len + gp[2] * vel : 0);
    double bias = m->actuator_biastype[j] == mjBIAS_AFFINE ? bp[0] + bp[1] * len + bp[2] * vel : 0;
    double f = gain * u + bias;
    if (f <= m->actuator_forcerange[2 * j] || f >= m->actuator_forcerange[2 * j + 1]) bits |= 1ull << j;
  }
  return bits;
}

// --derivatives: chainfd_deriv_qacc's d qacc / d(q, qvel, ctrl) against central differences of
// the long-double-refined reference (five points, step 1e-4 scaled by the entry: truncation
// O(h^4), rounding 1e-15 / h; where constraint rows are active, of MuJoCo's converged constrained
// qacc, step 1e-3, the columns whose stencil changes a row's zone left out), and chainfd_transition_derivatives against mjd_transitionFD
// (centred, eps 1e-6), over the model's keyframes and seeded random states (a state with a joint
// at its limit, which the derivatives do not take, drawn again). Exits 1 past tol (1e-8) or, for
// the transition, 1e-5.
static int check_derivatives(mjModel* m, int states, unsigned long long seed, double tol) {
  char err[1024];
  chainfd_deriv* dv;
  if (chainfd_deriv_create(m, CHAINFD_CPU, &dv, err, sizeof err)) {
    printf("refused: %s\n", err);
    return 1;
  }
  int nv = m->nv, nu = m->nu, nx = 2 * nv, failed = 0;
  // constraint rows (limits, friction loss, equalities), as the model's flags leave them: the
  // reference is MuJoCo's constrained qacc, its solver run to convergence (tolerance 1e-15, up to
  // 1000 iterations: the joint rows' Newton method ends exact), for the differences and for
  // mjd_transitionFD alike
  int off = m->opt.disableflags, rows = !(off & mjDSBL_CONSTRAINT), any = 0;
  for (int j = 0; j < m->njnt && !(off & mjDSBL_LIMIT); j++) any |= m->jnt_limited[j];
  for (int i = 0; i < nv && !(off & mjDSBL_FRICTIONLOSS); i++) any |= m->dof_frictionloss[i] > 0;
  for (int k = 0; k < m->neq && !(off & mjDSBL_EQUALITY); k++) any |= m->eq_active0[k];
  rows &= any;
  mjModel* mref = rows ? mj_copyModel(NULL, m) : NULL;
  int forcelimited = 0;
  for (int j = 0; j < m->nu; j++) forcelimited |= m->actuator_forcelimited[j];
  if (mref) mref->opt.tolerance = 1e-15, mref->opt.iterations = 1000;
  mjData* d = mj_makeData(m);
  mjData* e = mj_makeData(m);
  size_t nq2 = (size_t)nv * nv, nuv = (size_t)nv * (nu ? nu : 1);
  double* mine = malloc(sizeof(double) * (2 * nq2 + nuv));
  double* ref = malloc(sizeof(double) * (2 * nq2 + nuv));
  double* f = malloc(sizeof(double) * 4 * nv);
  double* tangent = malloc(sizeof(double) * nv);
  double* col = malloc(sizeof(double) * nv);
  double* act_len = malloc(sizeof(double) * (nu ? 2 * nu : 1));
  double* act_vel = act_len + nu;
  double* A = malloc(sizeof(double) * 2 * (size_t)nx * nx);
  double* Bm = malloc(sizeof(double) * 2 * (size_t)nx * (nu ? nu : 1));
  if (!d || !e || !mine || !ref || !f || !tangent || !col || !act_len || !A || !Bm) {
    printf("out of memory for the derivatives' check\n");
    failed = 1;
  }
  double worst[3] = {0, 0, 0}, worst_A = 0, worst_B = 0;
  int at_limit = 0;  // states drawn at a joint limit (an active row), drawn again
  int rows_states = 0, kinks = 0;  // states with active rows; columns left out at a zone's edge
  cfd_rng rng = {seed};
  static const double w5[4] = {1.0 / 12, -8.0 / 12, 8.0 / 12, -1.0 / 12};  // at -2h, -h, h, 2h
  static const int k5[4] = {-2, -1, 1, 2};
  for (int s = 0; s < states && !failed; s++) {
    mj_resetData(m, d);
    if (m->nkey > 0 && s < states / 2) mj_resetDataKeyframe(m, d, s % m->nkey);
    cfd_random_state(m, d, &rng, CFD_RANDOM_QPOS | CFD_RANDOM_QVEL | CFD_RANDOM_CTRL);
    double* D[3] = {mine, mine + nq2, mine + 2 * nq2};
    if (chainfd_deriv_qacc(dv, m, d, NULL, D[0], D[1], D[2], err, sizeof err)) {
      if (strstr(err, "at its limit")) {  // (a state the derivatives do not take: drawn again)
        if (++at_limit <= 10 * states) s--;
        continue;
      }
      printf("cpu error at state %d: %s\n", s, err);
      failed = 1;
      break;
    }
    mj_copyData(e, m, d);  // (the actuators' lengths and velocities at the state)
    mj_forward(m, e);
    unsigned long long sat0 = saturated(m, e);
    mju_copy(act_len, e->actuator_length, nu);
    mju_copy(act_vel, e->actuator_velocity, nu);
    // with rows active at the state, MuJoCo's converged qacc is the reference and a column whose
    // stencil changes a row's zone (efc_state) is left out: the derivative there is one-sided
    int active = 0, *zone = NULL;
    if (mref) {
      mj_copyData(e, m, d);
      mj_forward(mref, e);
      active = e->nefc;
      zone = active ? malloc(sizeof(int) * active) : NULL;
      for (int r = 0; r < active && zone; r++) zone[r] = e->efc_state[r];
      if (active && !zone) failed = 1;
    }
    // the reference: column by column, each input moved by +-h and +-2h
    for (int kind = 0; kind < 3 && !failed; kind++) {
      int cols = kind == 2 ? nu : nv;
      for (int j = 0; j < cols && !failed; j++) {
        // (a position moves along dof j's tangent, mj_integratePos: a ball's or free joint's
        // rotation in the body's frame, as MuJoCo's derivatives)
        int jt = kind == 0 ? m->jnt_type[m->dof_jntid[j]] : mjJNT_HINGE;
        int scalar = jt == mjJNT_HINGE || jt == mjJNT_SLIDE;
        double* x = kind == 0 ? &d->qpos[m->jnt_qposadr[m->dof_jntid[j]]] : kind == 1 ? &d->qvel[j] : &d->ctrl[j];
        // Against MuJoCo's double-precision solve, whose rounding is larger than the long-double
        // reference's, several steps, the column closest to chainfd's kept: for qvel and ctrl
        // 1e-2 down to 1e-5 (in fixed zones qacc is quadratic in qvel and affine in ctrl, so five
        // points are exact there and a wide step quiets the noise; a narrow one keeps a stiff
        // servo's friction band out of the stencil), for qpos 1e-4 and 1e-5 (a limit's impedance
        // bends within solimp's width, 1e-3 by default).
        double x0 = *x, best = INFINITY;
        size_t at0 = (kind == 2 ? 2 * nq2 : kind * nq2) + j, ld = kind == 2 ? nu : nv;
        int kinked_all = 1, edge = 0;
        int passes = active ? (kind ? 4 : 2) : forcelimited ? 2 : 1;  // (a second, narrower step
                                                                        // where a clamp may cross)
        for (int pass = 0; pass < passes && !failed; pass++) {
          double h = (active && kind ? 1e-2 : 1e-4) * pow(0.1, pass) * (scalar ? fmax(1, fabs(x0)) : 1);
          if (kind == 2 && m->actuator_ctrllimited[j] && !(m->opt.disableflags & mjDSBL_CLAMPCTRL)) {
            // the stencil kept off the clamp's kinks (a control within 2h of its range's ends)
            double lo = m->actuator_ctrlrange[2 * j], hi = m->actuator_ctrlrange[2 * j + 1];
            double gap = fmin(fabs(x0 - lo), fabs(x0 - hi));
            if (gap > 0) h = fmin(h, 0.25 * gap);
            else edge = 1;  // (at the clamp itself, a keyframe's control: one-sided, left out)
          }
          if (kind == 2 && m->actuator_forcelimited[j]) {
            // and off the force range's: the control where gain u + bias (affine, at the state's
            // actuator length and velocity) meets an end
            const double *gp = m->actuator_gainprm + mjNGAIN * j, *bp = m->actuator_biasprm + mjNBIAS * j;
            double len = act_len[j], vel = act_vel[j];
            double gain = gp[0] + (m->actuator_gaintype[j] == mjGAIN_AFFINE ? gp[1] * len + gp[2] * vel : 0);
            double bias = m->actuator_biastype[j] == mjBIAS_AFFINE ? bp[0] + bp[1] * len + bp[2] * vel : 0;
            for (int end = 0; end < 2 && gain != 0; end++) {
              double gap = fabs(x0 - (m->actuator_forcerange[2 * j + end] - bias) / gain);
              if (gap > 0) h = fmin(h, 0.25 * gap);
              else edge = 1;
            }
          }
          int kinked = edge;
          for (int k = 0; k < 4 && !failed && !edge; k++) {
            mj_copyData(e, m, d);
            if (kind == 0) {
              mju_zero(tangent, nv);
              tangent[j] = k5[k] * h;
              mj_integratePos(m, e->qpos, tangent, 1);
            } else {
              double* xe = kind == 1 ? &e->qvel[j] : &e->ctrl[j];
              *xe = x0 + k5[k] * h;
            }
            if (active) {
              mj_forward(mref, e);
              mju_copy(f + k * nv, e->qacc, nv);
              int same = e->nefc == active;
              for (int r = 0; r < active && same; r++) same = e->efc_state[r] == zone[r];
              kinked |= !same;
            } else if (cfd_deriv_reference_qacc(dv, m, e, f + k * nv, err, sizeof err)) {
              printf("reference error: %s\n", err);
              failed = 1;
            } else {
              mj_forward(m, e);
            }
            kinked |= saturated(m, e) != sat0;  // (an actuator crossing its force range's end)
          }
          if (kinked) continue;  // (a row's zone changed: this step says nothing)
          kinked_all = 0;
          double dev = 0;
          for (int i = 0; i < nv; i++) {
            col[i] = (w5[0] * f[i] + w5[1] * f[nv + i] + w5[2] * f[2 * nv + i] + w5[3] * f[3 * nv + i]) / h;
            dev = fmax(dev, fabs(col[i] - mine[at0 + ld * i]));
          }
          if (dev < best)
            for (int i = 0; i < nv; i++) ref[at0 + ld * i] = col[i];
          best = fmin(best, dev);
        }
        kinks += kinked_all;
        if (kinked_all)
          for (int i = 0; i < nv; i++) ref[at0 + ld * i] = mine[at0 + ld * i];  // (left out)
      }
    }
    free(zone);
    rows_states += active > 0;
    worst[0] = cfd_worst(worst[0], matrix_rel_err(D[0], ref, nq2));
    worst[1] = cfd_worst(worst[1], matrix_rel_err(D[1], ref + nq2, nq2));
    if (nu) {
      // every actuator saturated (or its control clamped): chainfd's block is exactly zero and
      // the reference's differences are rounding (below 1e-6), no scale to measure against
      double top = 0, mtop = 0;
      for (size_t k = 0; k < (size_t)nv * nu; k++) top = fmax(top, fabs(ref[2 * nq2 + k])), mtop = fmax(mtop, fabs(D[2][k]));
      if (!(mtop == 0 && top < 1e-6))
        worst[2] = cfd_worst(worst[2], matrix_rel_err(D[2], ref + 2 * nq2, (size_t)nv * nu));
    }
    if (failed) continue;
    double* Am = A + (size_t)nx * nx;
    double* Bmj = Bm + (size_t)nx * nu;
    if (chainfd_transition_derivatives(dv, m, d, A, Bm, err, sizeof err)) {
      printf("cpu transition error at state %d: %s\n", s, err);
      failed = 1;
      break;
    }
    mj_copyData(e, m, d);
    if (m->opt.integrator == mjINT_RK4) step_transition_fd(m, d, e, 1e-6, Am, Bmj);
    else mjd_transitionFD(mref ? mref : m, e, 1e-6, 1, Am, nu ? Bmj : NULL, NULL, NULL);
    double ea = matrix_rel_err(A, Am, (size_t)nx * nx), eb = nu ? matrix_rel_err(Bm, Bmj, (size_t)nx * nu) : 0;
    if (active && m->opt.integrator != mjINT_RK4) {
      // active rows: the differences carry the solver's rounding over eps (small steps) and a
      // zone's edge (large ones): eps 1e-5 too, the closer of the two kept
      mj_copyData(e, m, d);
      mjd_transitionFD(mref, e, 1e-5, 1, Am, nu ? Bmj : NULL, NULL, NULL);
      ea = fmin(ea, matrix_rel_err(A, Am, (size_t)nx * nx));
      if (nu) eb = fmin(eb, matrix_rel_err(Bm, Bmj, (size_t)nx * nu));
    }
    worst_A = cfd_worst(worst_A, ea);
    if (nu) worst_B = cfd_worst(worst_B, eb);
  }
  if (at_limit > 10 * states) {
    printf("cpu: %d of the states drawn had a joint at its limit (an active row): too few others\n",
           at_limit);
    failed = 1;
  }
  int pass = !failed && worst[0] <= tol && worst[1] <= tol && worst[2] <= tol;
  printf("cpu dq=%.3e dqvel=%.3e dctrl=%.3e states=%d%s\n", worst[0], worst[1], worst[2], states,
         pass ? "" : "  FAIL");
  if (at_limit)
    printf("  (information) %d states drawn with a joint at its limit were drawn again\n", at_limit);
  if (rows_states)
    printf("  (information) %d states with active constraint rows (against MuJoCo's converged "
           "qacc)\n", rows_states);
  if (kinks)
    printf("  (information) %d columns at a kink left out (every step's stencil changed a row's "
           "zone or an actuator's saturation, or a control sat on an edge)\n", kinks);
  int tpass = !failed && worst_A <= 1e-5 && worst_B <= 1e-5;
  printf("transition A=%.3e B=%.3e states=%d (against %s, centred, eps 1e-6%s)%s\n", worst_A,
         worst_B, states, m->opt.integrator == mjINT_RK4 ? "differences of mj_step (RK4: "
         "mjd_transitionFD takes none)" : "mjd_transitionFD",
         rows_states && m->opt.integrator != mjINT_RK4 ? "; with active rows the closer of 1e-6 and 1e-5" : "",
         tpass ? "" : "  FAIL");
  pass &= tpass;
  free(mine); free(ref); free(f); free(tangent); free(col); free(act_len); free(A); free(Bm);
  mj_deleteData(d);
  mj_deleteData(e);
  if (mref) mj_deleteModel(mref);
  chainfd_deriv_free(dv);
  return !pass;
}

int cfd_cmd_check(int argc, char** argv) {
  const char* path = CFD_DEFAULT_SCENE;
  const char* backend = "all";
  int states = 100;
  unsigned long long seed = 1;
  double tol = 1e-10;
  const char* prog = "chainfd check";
  int steps = 0;             // --steps N: also compare N steps of chainfd_step against mj_step
  double steps_tol = 1e-8;   // their largest |qpos| difference (1e-6 where constraint rows are
  int steps_tol_given = 0;   // active: MuJoCo's solver stops at the model's tolerance)
  int constraints = 0;       // --constraints: the constraint solver against MuJoCo's (tol 1e-8)
  int derivatives = 0;       // --derivatives: chainfd_deriv against differences (tol 1e-8)
  int tol_given = 0;
  for (int i = 0; i < argc; i++) {
    const char* a = argv[i];
    int more = i + 1 < argc;
    if (!strcmp(a, "--backend") && more) backend = argv[++i];
    else if (!strcmp(a, "--states") && more) {
      if (cfd_arg_int(prog, a, argv[++i], 1, 100000000, &states)) return 2;
    } else if (!strcmp(a, "--seed") && more) {
      if (cfd_arg_u64(prog, a, argv[++i], &seed)) return 2;
    } else if (!strcmp(a, "--tol") && more) {
      if (cfd_arg_double(prog, a, argv[++i], 0, 1, &tol)) return 2;
      tol_given = 1;
    } else if (!strcmp(a, "--constraints")) {
      constraints = 1;
    } else if (!strcmp(a, "--derivatives")) {
      derivatives = 1;
    } else if (!strcmp(a, "--steps") && more) {
      if (cfd_arg_int(prog, a, argv[++i], 0, 100000000, &steps)) return 2;
    } else if (!strcmp(a, "--steps-tol") && more) {
      if (cfd_arg_double(prog, a, argv[++i], 0, 1, &steps_tol)) return 2;
      steps_tol_given = 1;
    } else if (a[0] != '-') path = a;
    else {
      fprintf(stderr, "chainfd check: unknown or incomplete option '%s'\n", a);
      return 2;
    }
  }
  char err[1024];
  mjModel* m = cfd_load_model(path, err, sizeof err);
  if (!m) {
    fprintf(stderr, "chainfd: cannot load %s: %s\n", path, err);
    return 1;
  }
  if (derivatives) {
    int rc = check_derivatives(m, states, seed, tol_given ? tol : 1e-8);
    mj_deleteModel(m);
    return rc;
  }
  if (constraints) {
    // --steps first: one step at a time against mj_step under the model's own solver settings
    int rc = 0;
    if (steps > 0 && check_steps(m, backend, steps, seed, steps_tol, steps_tol_given)) {
      printf("FAILED: chainfd_step against mj_step: a step failed, or one step's qpos or scaled "
             "qvel differs by more than %.1e (%s)\n", steps_tol_given ? steps_tol : 1e-6,
             steps_tol_given ? "--steps-tol" : "1e-8 where no rows were active");
      rc = 1;
    }
    rc |= check_constraints(m, states, seed, tol_given ? tol : 1e-8);
    mj_deleteModel(m);
    return rc;
  }
  // what chainfd_step does with the model as written, before constraints are disabled below
  int never_steps = predict_stepper(m) == STEPPER_NEVER;
  printf("  (the stepper line is the model's own configuration; the checks below take each back "
         "end as asked)\n");
  m->opt.disableflags |= mjDSBL_CONSTRAINT;  // contacts, limits, equality: not chain dynamics

  // the chain, the state gathering, the reference and inverse dynamics go through cpu.fast
  cfd_solver* base = cfd_solver_create(m, "cpu.fast", err, sizeof err);
  if (!base) {
    printf("refused: %s\n", err);
    mj_deleteModel(m);
    return 1;
  }
  int nb = 0, ng = 0, failed = 0, skipped = 0, all = !strcmp(backend, "all");
  cfd_solver* solvers[16];
  cfd_gpu_algorithm gpu_algs[4];
  const cfd_gpu_algorithm known_gpu[4] = {CFD_GPU_ABIA, CFD_GPU_JSIIA, CFD_GPU_CFA, CFD_GPU_DCA};
  for (int b = 0; b < cfd_backend_count(); b++) {
    const char* name = cfd_backend_get(b)->name;
    if (cfd_backend_get(b)->gpu_algorithm >= 0) continue;  // the GPU: one batch, below
    if (!names(backend, name)) continue;
    cfd_solver* s = cfd_solver_create(m, name, err, sizeof err);
    if (s) solvers[nb++] = s;
    else printf("%s refused: %s\n", name, err);
    // only as expected_refusal says (CFA's massless links, chain-only back ends on trees)
    if (!s && (!all || !expected_refusal(name, err))) failed = 1;
  }
  for (int a = 0; a < 4; a++) {
    const char* name = cfd_gpu_algorithm_name(known_gpu[a]);
    if (!names(backend, name)) continue;
    if (cfd_gpu_device_count() == 0) {
      printf("%s SKIPPED: no CUDA device%s\n", name, all ? "" : " (nothing checked)");
      if (!all) skipped = 1;
      continue;
    }
    gpu_algs[ng++] = known_gpu[a];
  }
  char unknown[64];
  if (unknown_backend(backend, unknown, sizeof unknown)) {
    printf("%s refused: unknown back end\n", unknown);
    failed = 1;
  }

  int nv = m->nv;
  mjData* d = mj_makeData(m);
  double* ref = malloc(sizeof(double) * nv);
  double* got = malloc(sizeof(double) * nv);
  double* qacc_in = malloc(sizeof(double) * nv);
  double* tau_mj = malloc(sizeof(double) * nv);
  double* tau_id = malloc(sizeof(double) * nv);
  double* id_work = malloc(sizeof(double) * cfd_id_work_size(nv));
  double* hp = malloc(sizeof(double) * nv);  // the high-precision reference
  double* Mhp = malloc(sizeof(double) * nv);
  double worst_resid = 0;  // the reference's force residual with MuJoCo's own M and qfrc_smooth
  // every state's chain vectors, MuJoCo's qacc and the reference, for the GPU's one batch
  size_t sn = (size_t)states * nv;
  double* all_q = malloc(sizeof(double) * sn);
  double* all_qd = malloc(sizeof(double) * sn);
  double* all_tau = malloc(sizeof(double) * sn);
  double* all_mj = malloc(sizeof(double) * sn);
  double* all_hp = malloc(sizeof(double) * sn);
  double worst[16] = {0}, worst_ref[16] = {0}, worst_id = 0, worst_mj = 0;
  int bad_status[16] = {0};
  if (!d || !ref || !got || !qacc_in || !tau_mj || !tau_id || !id_work || !hp || !Mhp || !all_q ||
      !all_qd || !all_tau || !all_mj || !all_hp) {
    fprintf(stderr, "chainfd check: out of memory: --states %d of %d dofs need %.3g GiB\n", states,
            nv, 5.0 * sizeof(double) * (double)sn / (1 << 30));
    failed = 1;
    goto done;
  }
  cfd_rng rng = {seed};
  for (int s = 0; s < states; s++) {
    cfd_random_state(m, d, &rng, CFD_RANDOM_ALL);
    mj_forward(m, d);
    memcpy(ref, d->qacc, sizeof(double) * nv);
    {
      const double *q, *qd, *tau;
      cfd_solver_gather(base, m, d, &q, &qd, &tau);
      if (cfd_fd_reference(cfd_solver_chain(base), q, qd, tau, NULL, hp)) {
        printf("reference error: singular system\n");
        for (int i = 0; i < nv; i++) hp[i] = NAN;
        failed = 1;
      }
      // The reference uses chainfd's chain and gathered forces: check them against MuJoCo's own M
      // and qfrc_smooth, so that a shared error cannot hide behind the pass rule below.
      mj_mulM(m, d, Mhp, hp);
      double num = 0, den = 0;
      for (int i = 0; i < nv; i++) {
        num = cfd_worst(num, fabs(Mhp[i] - d->qfrc_smooth[i]));
        den = cfd_worst(den, fmax(fabs(Mhp[i]), fabs(d->qfrc_smooth[i])));
      }
      double r = den > 0 ? num / den : num;
      worst_resid = cfd_worst(worst_resid, r);
      double e = cfd_rel_err_inf(ref, hp, nv);
      worst_mj = cfd_worst(worst_mj, e);
      memcpy(all_q + (size_t)s * nv, q, sizeof(double) * nv);
      memcpy(all_qd + (size_t)s * nv, qd, sizeof(double) * nv);
      memcpy(all_tau + (size_t)s * nv, tau, sizeof(double) * nv);
      memcpy(all_mj + (size_t)s * nv, ref, sizeof(double) * nv);
      memcpy(all_hp + (size_t)s * nv, hp, sizeof(double) * nv);
    }
    for (int b = 0; b < nb; b++) {
      if (cfd_solver_qacc(solvers[b], m, d, NULL, got, err, sizeof err)) {
        if (!bad_status[b]) printf("%s error: %s\n", cfd_solver_backend(solvers[b])->name, err);
        bad_status[b] = 1;
        worst[b] = INFINITY;
        continue;
      }
      double e = cfd_rel_err_inf(got, ref, nv);
      worst[b] = cfd_worst(worst[b], e);
      e = cfd_rel_err_inf(got, hp, nv);
      worst_ref[b] = cfd_worst(worst_ref[b], e);
    }
    // inverse dynamics against mj_rne at a random acceleration
    for (int i = 0; i < nv; i++) qacc_in[i] = cfd_rng_uniform(&rng, -5, 5);
    memcpy(d->qacc, qacc_in, sizeof(double) * nv);
    mj_rne(m, d, 1, tau_mj);
    const double *q, *qd, *tau;
    cfd_solver_gather(base, m, d, &q, &qd, &tau);
    cfd_id_cpu(cfd_solver_chain(base), q, qd, qacc_in, tau_id, id_work);
    double e = cfd_rel_err_inf(tau_id, tau_mj, nv);
    worst_id = cfd_worst(worst_id, e);
  }
  // A back end passes when it matches MuJoCo within tol, or, where MuJoCo's own rounding error
  // (against the high-precision reference) exceeds tol, when it is within tol of the reference and
  // no further from MuJoCo than MuJoCo is from the reference.
  for (int b = 0; b < nb; b++) {
    int pass = worst[b] <= tol || (worst_ref[b] <= tol && worst[b] <= 1.1 * worst_mj + tol);
    printf("%s max_rel_err=%.3e states=%d ref_err=%.3e%s\n", cfd_solver_backend(solvers[b])->name,
           worst[b], states, worst_ref[b], pass ? "" : "  FAIL");
    if (!pass) failed = 1;
  }
  // the GPU back ends: every state in one batch
  for (int a = 0; a < ng; a++) {
    const char* name = cfd_gpu_algorithm_name(gpu_algs[a]);
    cfd_gpu* g = NULL;
    double* out = malloc(sizeof(double) * sn);
    if (!out) {
      printf("%s error: out of memory for %d states\n", name, states);
      failed = 1;
    } else if (cfd_backend_gpu_create(cfd_backend_find(name), m, cfd_solver_chain(base), 0, &g, err,
                               sizeof err)) {
      // as on the CPU: only as expected_refusal says, and only under "all"
      int refusal = all && expected_refusal(name, err);
      printf("%s %s: %s\n", name, refusal ? "refused" : "error", err);
      if (!refusal) failed = 1;
    } else if (cfd_gpu_fd(g, states, all_q, all_qd, all_tau, NULL, out, CFD_HOST, err, sizeof err)) {
      printf("%s error: %s\n", name, err);
      failed = 1;
    } else {
      double wm = 0, wr = 0;
      for (int s = 0; s < states; s++) {
        wm = cfd_worst(wm, cfd_rel_err_inf(out + (size_t)s * nv, all_mj + (size_t)s * nv, nv));
        wr = cfd_worst(wr, cfd_rel_err_inf(out + (size_t)s * nv, all_hp + (size_t)s * nv, nv));
      }
      int pass = wm <= tol || (wr <= tol && wm <= 1.1 * worst_mj + tol);
      printf("%s max_rel_err=%.3e states=%d ref_err=%.3e%s\n", name, wm, states, wr,
             pass ? "" : "  FAIL");
      if (!pass) failed = 1;
    }
    if (g) cfd_gpu_free(g);
    free(out);
  }
  printf("mujoco ref_err=%.3e (mj_forward against the high-precision reference)\n", worst_mj);
  printf("reference force residual %.3e (|M qacc_ref - qfrc_smooth| with MuJoCo's M)\n", worst_resid);
  if (!(worst_resid <= tol)) {
    printf("FAILED: the reference does not solve MuJoCo's own equations\n");
    failed = 1;
  }
  printf("cpu.id max_rel_err=%.3e states=%d (inverse dynamics vs mj_rne)\n", worst_id, states);
  if (!(worst_id <= tol)) failed = 1;
  if (steps > 0 && check_steps(m, backend, steps, seed, steps_tol, steps_tol_given)) {
    printf("FAILED: chainfd_step against mj_step: a step failed, or one step's qpos or scaled qvel "
           "differs by more than %.1e%s\n", steps_tol,
           steps_tol_given ? "" : " (1e-6 where constraint rows were active)");
    failed = 1;
  }
  if (failed) printf("FAILED: an error exceeds the tolerance %.1e\n", tol);
  if (never_steps) {  // the back ends may be exact, but chainfd_step would never use them
    printf("FAILED: chainfd_step hands every step of this model to MuJoCo (see 'stepper:')\n");
    failed = 1;
  }
  if (!failed && skipped) failed = 77;  // the one back end asked for could not run here: not a pass

done:
  for (int b = 0; b < nb; b++) cfd_solver_free(solvers[b]);
  cfd_solver_free(base);
  free(all_q); free(all_qd); free(all_tau); free(all_mj); free(all_hp);
  free(hp); free(Mhp); free(ref); free(got); free(qacc_in); free(tau_mj); free(tau_id); free(id_work);
  mj_deleteData(d);
  mj_deleteModel(m);
  return failed;
}
