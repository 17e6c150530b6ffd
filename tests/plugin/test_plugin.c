// The chainfd plugin declared in MJCF and stepped through chainfd_step / chainfd_forward (the test is
// linked to libchainfd_plugin.so, whose constructor registers the plugin):
//   - the scenes (and two test models) with the plugin declared, every integrator, against mj_step
//     (the 7-dof arms within 1e-9 in qpos after 100 steps) and mj_forward
//   - every config value error: a clear message, mjData byte for byte untouched; unknown keys
//     rejected by MuJoCo's compiler; the short back-end names mapped onto the table
//   - fallback=mujoco / fallback=error with a contact, an active joint limit, a branching model and
//     options chainfd does not reproduce; a trajectory that runs into a limit and out again
//   - mj_copyData, mj_resetData, mj_deleteData of the per-mjData state
//   - 8 threads, each stepping its own mjData, equal to the serial run bit for bit
//   - bad states (NaN qvel, NaN qfrc_applied): MuJoCo's warnings and resets
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mujoco/mjxmacro.h>

#include "chainfd.h"
#include "test_util.h"

static char last_warning[1024];
static int warnings;
static void quiet_warning(const char* msg) {  // keeps MUJOCO_LOG.TXT out of the build tree
  snprintf(last_warning, sizeof last_warning, "%s", msg);
  warnings++;
}

// --- models ---------------------------------------------------------------------------------------

// A 3-link arm; %s: the <config> lines, then the <option> attributes, then extra worldbody content
// and the first joint's extra attributes.
static const char* chain_template =
    "<mujoco>"
    "  <extension><plugin plugin=\"chainfd\"><instance name=\"fd\">%s</instance></plugin></extension>"
    "  <option timestep=\"0.002\" %s/>"
    "  <default><geom type=\"capsule\" size=\"0.03\"/><joint damping=\"0.2\" armature=\"0.01\"/></default>"
    "  <worldbody>%s"
    "    <body name=\"l1\" pos=\"0 0 1\">"
    "      <joint name=\"j1\" axis=\"0 1 0\" %s/>"
    "      <geom fromto=\"0 0 0 0.3 0 0\" contype=\"0\" conaffinity=\"0\"/>"
    "      <body name=\"l2\" pos=\"0.3 0 0\">"
    "        <joint name=\"j2\" axis=\"1 0 0\"/>"
    "        <geom fromto=\"0 0 0 0.3 0 0\" contype=\"0\" conaffinity=\"0\"/>"
    "        <body name=\"l3\" pos=\"0.3 0 0\">"
    "          <joint name=\"j3\" axis=\"0 1 0\"/>"
    "          <geom name=\"tip\" fromto=\"0 0 0 0.3 0 0\"/>"
    "        </body>"
    "      </body>"
    "    </body>"
    "  </worldbody>"
    "  <actuator><position joint=\"j1\" kp=\"10\" kv=\"1\"/><motor joint=\"j3\"/></actuator>"
    "</mujoco>";

static mjModel* compile(const char* xml, char* err, int err_size) {
  mjSpec* spec = mj_parseXMLString(xml, NULL, err, err_size);
  if (!spec) return NULL;
  mjModel* m = mj_compile(spec, NULL);
  if (!m) snprintf(err, err_size, "%s", mjs_getError(spec));
  mj_deleteSpec(spec);
  return m;
}

static mjModel* chain_model(const char* config, const char* option, const char* world,
                            const char* joint1) {
  static char xml[8192];
  char err[1024];
  snprintf(xml, sizeof xml, chain_template, config, option, world, joint1);
  mjModel* m = compile(xml, err, sizeof err);
  EXPECT(m != NULL, "compile: %s", err);
  return m;
}

static mjModel* load_file(const char* path) {
  char err[1024];
  mjModel* m = mj_loadXML(path, NULL, err, sizeof err);
  EXPECT(m != NULL, "load %s: %s", path, err);
  return m;
}

static void set_state(const mjModel* m, mjData* d, double scale) {
  for (int i = 0; i < m->nq; i++) d->qpos[i] = m->qpos0[i] + scale * sin(1.3 * i + 0.4);
  for (int i = 0; i < m->nv; i++) d->qvel[i] = scale * cos(0.7 * i + 0.1);
  for (int i = 0; i < m->nu; i++) d->ctrl[i] = 0.3 * sin(i + 1.0);
}

// mjData as chainfd must leave it: every array (except plugin_data, which holds each mjData's own
// chainfd state) and the scalars that a step changes.
static int same_data(const mjModel* m, const mjData* a, const mjData* b) {
  int same = 1;
#define X(type, name, nr, nc)                                                        \
  if (strcmp(#name, "plugin_data") &&                                                 \
      memcmp(a->name, b->name, sizeof(type) * (size_t)(m->nr) * (nc))) {             \
    fprintf(stderr, "mjData field %s differs\n", #name);                             \
    same = 0;                                                                          \
  }
  MJDATA_POINTERS
#undef X
  return same && a->time == b->time && !memcmp(a->warning, b->warning, sizeof(a->warning)) &&
         a->ncon == b->ncon && a->nefc == b->nefc && !memcmp(a->energy, b->energy, sizeof(a->energy));
}

// the integration state (what mj_step reads and writes)
static int same_state(const mjModel* m, const mjData* a, const mjData* b) {
  int n = mj_stateSize(m, mjSTATE_INTEGRATION);
  double* sa = malloc(sizeof(double) * (n + 1));
  double* sb = malloc(sizeof(double) * (n + 1));
  mj_getState(m, a, sa, mjSTATE_INTEGRATION);
  mj_getState(m, b, sb, mjSTATE_INTEGRATION);
  int same = !memcmp(sa, sb, sizeof(double) * n);
  free(sa);
  free(sb);
  return same;
}

// --- the scenes, through the plugin ------------------------------------------------------------------

// Every scene with the plugin declared, every integrator: chainfd_step against mj_step over 100 steps
// (the arms within 1e-9 in qpos, the others 1e-8), then chainfd_forward against mj_forward.
static void test_scenes(void) {
  static const struct { const char* file; double tol; } scenes[] = {
      {CHAINFD_PLUGIN_TESTS "/arm7_plugin.xml", 1e-9},
      {CHAINFD_PLUGIN_TESTS "/servo_arm_plugin.xml", 1e-9},
      {CHAINFD_PLUGIN_TESTS "/double_pendulum_plugin.xml", 1e-8},
      {CHAINFD_PLUGIN_TESTS "/slide_hinge_plugin.xml", 1e-8},
      {CHAINFD_PLUGIN_TESTS "/actuation_plugin.xml", 1e-8},
  };
  static const int kinds[3] = {mjINT_EULER, mjINT_IMPLICITFAST, mjINT_RK4};
  static const char* kind_names[3] = {"Euler", "implicitfast", "RK4"};
  for (int sc = 0; sc < (int)(sizeof(scenes) / sizeof(scenes[0])); sc++) {
    mjModel* m = load_file(scenes[sc].file);
    if (!m) continue;
    EXPECT(m->nplugin == 1, "nplugin %d", (int)m->nplugin);
    const char* short_name = strrchr(scenes[sc].file, '/') + 1;
    for (int k = 0; k < 3; k++) {
      m->opt.integrator = kinds[k];
      mjData* ref = mj_makeData(m);
      mjData* got = mj_makeData(m);
      set_state(m, ref, 0.5);
      set_state(m, got, 0.5);
      double dq = 0;
      for (int t = 0; t < 100; t++) {
        mj_step(m, ref);
        int status = chainfd_step(m, got);
        EXPECT(status == 0, "%s step %d: %s", short_name, t, chainfd_last_error());
        if (status) break;
        double e = max_abs_diff(got->qpos, ref->qpos, m->nq);
        dq = cfd_worst(dq, e);
      }
      printf("%-28s %-12s max |dqpos| = %.3e over 100 steps\n", short_name, kind_names[k], dq);
      EXPECT(dq <= scenes[sc].tol, "%s %s: max |dqpos| %.3e", short_name, kind_names[k], dq);
      chainfd_stats st;
      EXPECT(chainfd_get_stats(m, got, &st) == 0, "stats");
      EXPECT(st.steps_chainfd == 100 && st.steps_mujoco == 0 && !strcmp(st.backend, "cpu.fast"),
             "stats: %lld chainfd, %lld MuJoCo, backend %s", st.steps_chainfd, st.steps_mujoco,
             st.backend);

      // chainfd_forward against mj_forward in the state reached
      mj_copyData(ref, m, got);
      mj_forward(m, ref);
      EXPECT(chainfd_forward(m, got) == 0, "forward: %s", chainfd_last_error());
      EXPECT(cfd_rel_err_inf(got->qacc, ref->qacc, m->nv) <= 1e-10, "%s forward qacc %.3e", short_name,
             cfd_rel_err_inf(got->qacc, ref->qacc, m->nv));
      EXPECT(cfd_rel_err_inf(got->sensordata, ref->sensordata, m->nsensordata) <= 1e-9,
             "%s forward sensors %.3e", short_name,
             cfd_rel_err_inf(got->sensordata, ref->sensordata, m->nsensordata));
      EXPECT(cfd_rel_err_inf(got->qfrc_smooth, ref->qfrc_smooth, m->nv) <= 1e-12, "qfrc_smooth");
      EXPECT(cfd_rel_err_inf(got->energy, ref->energy, 2) <= 1e-12, "energy");
      mj_deleteData(ref);
      mj_deleteData(got);
    }
    mj_deleteModel(m);
  }
}

// --- configuration ---------------------------------------------------------------------------------

static void test_config_errors(void) {
  static const struct { const char* config; const char* expect; } bad[] = {
      {"<config key=\"backend\" value=\"xyz\"/>", "backend='xyz' is not one of"},
      {"<config key=\"backend\" value=\"CFA\"/>", "backend='CFA'"},
      {"<config key=\"precision\" value=\"half\"/>", "precision='half' is not one of"},
      {"<config key=\"precision\" value=\"float\"/>", "precision='float' is not available"},
      {"<config key=\"precision\" value=\"float\"/><config key=\"device\" value=\"0\"/>",
       "precision='float' is not available"},
      {"<config key=\"device\" value=\"gpu\"/>", "device='gpu' is not one of"},
      {"<config key=\"device\" value=\"-1\"/>", "device='-1' is not one of"},
      // no such device (here: no device at all; on a GPU machine: an index past the last one)
      {"<config key=\"device\" value=\"7\"/><config key=\"backend\" value=\"cfa\"/>",
       "device='7'"},
      {"<config key=\"device\" value=\"9\"/><config key=\"backend\" value=\"jsiia\"/>",
       "device='9'"},
      {"<config key=\"device\" value=\"0\"/><config key=\"backend\" value=\"cpu\"/>",
       "runs on the CPU"},
      {"<config key=\"fallback\" value=\"maybe\"/>", "fallback='maybe' is not one of"},
  };
  for (int i = 0; i < (int)(sizeof(bad) / sizeof(bad[0])); i++) {
    mjModel* m = chain_model(bad[i].config, "", "", "");
    if (!m) continue;
    mjData* d = mj_makeData(m);  // an invalid value must not make mj_makeData fail (or abort)
    set_state(m, d, 0.3);
    mj_forward(m, d);
    mjData* before = mj_copyData(NULL, m, d);
    int status = chainfd_step(m, d);
    EXPECT(status == CHAINFD_ERR_CONFIG, "%s: status %d", bad[i].config, status);
    EXPECT(strstr(chainfd_last_error(), bad[i].expect) != NULL, "%s: message '%s'", bad[i].config,
           chainfd_last_error());
    EXPECT(strstr(chainfd_last_error(), "'fd'") != NULL, "message names the instance: '%s'",
           chainfd_last_error());
    EXPECT(same_data(m, d, before), "%s: mjData changed", bad[i].config);
    EXPECT(chainfd_forward(m, d) == CHAINFD_ERR_CONFIG, "%s: forward", bad[i].config);
    EXPECT(same_data(m, d, before), "%s: mjData changed by forward", bad[i].config);
    chainfd_stats st;
    EXPECT(chainfd_get_stats(m, d, &st) == 0 && strstr(st.last_fallback, bad[i].expect),
           "stats carry the error");
    printf("config %s -> %s\n", bad[i].config, chainfd_last_error());
    mj_deleteData(before);
    mj_deleteData(d);
    mj_deleteModel(m);
  }

  // unknown keys: MuJoCo's compiler rejects them, naming the key
  {
    char xml[8192], err[1024];
    snprintf(xml, sizeof xml, chain_template, "<config key=\"backnd\" value=\"cfa\"/>", "", "", "");
    mjModel* m = compile(xml, err, sizeof err);
    EXPECT(m == NULL && strstr(err, "backnd"), "unknown key: %s", m ? "accepted" : err);
    printf("unknown key -> %s\n", err);
    if (m) mj_deleteModel(m);
  }

  // the short names onto the table; auto with a GPU device index runs on the CPU (said once)
  // where there is no CUDA device. An algorithm's short name with device=auto (the default) runs
  // on the GPU where there is one: with_gpu, where that differs. backend=auto on this short chain
  // on the CPU takes MuJoCo's own step, the faster there: the same steps, bit for bit.
  static const struct { const char* config; const char* backend; const char* with_gpu; } good[] = {
      {"", "mujoco", NULL},
      {"<config key=\"backend\" value=\"auto\"/><config key=\"device\" value=\"cpu\"/>", "mujoco", NULL},
      {"<config key=\"backend\" value=\"auto\"/><config key=\"device\" value=\"0\"/>", "mujoco", NULL},
      {"<config key=\"backend\" value=\"cpu\"/>", "cpu.fast", NULL},
      {"<config key=\"backend\" value=\"cfa\"/>", "cpu.cfa", "cuda.cfa"},
      {"<config key=\"backend\" value=\"abia\"/><config key=\"device\" value=\"cpu\"/>", "cpu.abia", NULL},
      {"<config key=\"backend\" value=\"jsiia\"/><config key=\"precision\" value=\"double\"/>",
       "cpu.jsiia", "cuda.jsiia"},
      {"<config key=\"backend\" value=\"cpu.jsiia\"/>", "cpu.jsiia", NULL},
      {"<config key=\"backend\" value=\"dca\"/>", "cpu.dca", "cuda.dca"},
  };
  int have_gpu = chainfd_gpu_count() > 0;
  for (int i = 0; i < (int)(sizeof(good) / sizeof(good[0])); i++) {
    mjModel* m = chain_model(good[i].config, "", "", "");
    if (!m) continue;
    mjData* d = mj_makeData(m);
    mjData* ref = mj_makeData(m);
    set_state(m, d, 0.3);
    set_state(m, ref, 0.3);
    for (int t = 0; t < 20; t++) {
      EXPECT(chainfd_step(m, d) == 0, "%s: %s", good[i].config, chainfd_last_error());
      mj_step(m, ref);
    }
    chainfd_stats st;
    chainfd_get_stats(m, d, &st);
    const char* want = have_gpu && good[i].with_gpu ? good[i].with_gpu : good[i].backend;
    int by_mujoco = !strcmp(want, "mujoco");
    EXPECT(!strcmp(st.backend, want) && (by_mujoco ? st.steps_mujoco : st.steps_chainfd) == 20 &&
               !st.last_fallback[0],
           "%s: backend %s (%s expected), %lld + %lld steps", good[i].config, st.backend, want,
           st.steps_chainfd, st.steps_mujoco);
    EXPECT(max_abs_diff(d->qpos, ref->qpos, m->nq) <= (by_mujoco ? 0 : 1e-10), "%s: qpos",
           good[i].config);
    mj_deleteData(ref);
    mj_deleteData(d);
    mj_deleteModel(m);
  }

  // backend=auto on trees and ball joints: MuJoCo's step while the dofs have few ancestors (the
  // 30-dof floating tree), chainfd's on the 40-ball rope (STEP_MUJOCO_MAX_TREE_DEPTH in step.c)
  {
    static const struct { const char* scene; const char* backend; } trees[] = {
        {CHAINFD_SCENES_DIR "/humanoid_tree.xml", "mujoco"},
        {CHAINFD_SCENES_DIR "/floating_snake.xml", "mujoco"},
        {CHAINFD_SCENES_DIR "/ball_rope.xml", "cpu.fast"}};
    for (int i = 0; i < 3; i++) {
      mjModel* m = load_file(trees[i].scene);
      if (!m) continue;
      mjData* d = mj_makeData(m);
      EXPECT(chainfd_step(m, d) == 0, "%s: %s", trees[i].scene, chainfd_last_error());
      chainfd_stats st;
      chainfd_get_stats(m, d, &st);
      EXPECT(!strcmp(st.backend, trees[i].backend), "%s: auto chose %s, not %s", trees[i].scene,
             st.backend, trees[i].backend);
      printf("%s: backend=auto -> %s\n", trees[i].scene, st.backend);
      mj_deleteData(d);
      mj_deleteModel(m);
    }
  }

  // no instance at all
  {
    char err[1024];
    mjModel* m = compile("<mujoco><worldbody><body><joint/><geom size=\"0.1\"/></body></worldbody>"
                         "</mujoco>", err, sizeof err);
    EXPECT(m != NULL, "%s", err);
    if (m) {
      mjData* d = mj_makeData(m);
      mjData* before = mj_copyData(NULL, m, d);
      EXPECT(chainfd_step(m, d) == CHAINFD_ERR_NO_INSTANCE, "no instance");
      EXPECT(strstr(chainfd_last_error(), "declares no chainfd plugin instance"), "%s",
             chainfd_last_error());
      EXPECT(same_data(m, d, before), "mjData changed");
      chainfd_stats st;
      EXPECT(chainfd_get_stats(m, d, &st) == CHAINFD_ERR_NO_INSTANCE, "stats without instance");
      mj_deleteData(before);
      mj_deleteData(d);
      mj_deleteModel(m);
    }
  }
}

// --- fallback ------------------------------------------------------------------------------------------

// (backend=cpu: on these short chains backend=auto would take MuJoCo's own step, never chainfd's)
static const char* fallback_mujoco =
    "<config key=\"backend\" value=\"cpu\"/><config key=\"fallback\" value=\"mujoco\"/>";
static const char* fallback_error = "<config key=\"fallback\" value=\"error\"/>";

// With fallback=mujoco every step is mj_step's, bit for bit; with fallback=error the first step is
// refused and mjData is left byte for byte as it was (plugin_data aside; the state was computed by
// mj_forward before, so a state-dependent refusal's recomputed quantities are the same bytes).
// forward_too: the reason applies to chainfd_forward as well (not an integrator's).
static void expect_fallback(const char* what, const char* option, const char* world,
                            const char* joint1, double scale, const char* reason, int forward_too) {
  for (int mode = 0; mode < 2; mode++) {
    mjModel* m = chain_model(mode ? fallback_error : fallback_mujoco, option, world, joint1);
    if (!m) return;
    mjData* d = mj_makeData(m);
    set_state(m, d, scale);
    mj_forward(m, d);
    if (mode == 0) {
      mjData* ref = mj_copyData(NULL, m, d);
      for (int t = 0; t < 30; t++) {
        mj_step(m, ref);
        EXPECT(chainfd_step(m, d) == 0, "%s: %s", what, chainfd_last_error());
      }
      EXPECT(same_state(m, d, ref), "%s: fallback=mujoco differs from mj_step", what);
      chainfd_stats st;
      chainfd_get_stats(m, d, &st);
      EXPECT(st.steps_mujoco == 30 && st.steps_chainfd == 0, "%s: %lld MuJoCo steps, %lld chainfd",
             what, st.steps_mujoco, st.steps_chainfd);
      EXPECT(strstr(st.last_fallback, reason) != NULL, "%s: reason '%s'", what, st.last_fallback);
      mj_deleteData(ref);
    } else {
      mjData* before = mj_copyData(NULL, m, d);
      int status = chainfd_step(m, d);
      EXPECT(status == CHAINFD_ERR_UNSUPPORTED, "%s: fallback=error status %d", what, status);
      EXPECT(strstr(chainfd_last_error(), reason) && strstr(chainfd_last_error(), "fallback=error"),
             "%s: message '%s'", what, chainfd_last_error());
      EXPECT(same_state(m, d, before), "%s: fallback=error changed the state", what);
      EXPECT(same_data(m, d, before), "%s: fallback=error changed mjData", what);
      if (forward_too) {
        EXPECT(chainfd_forward(m, d) == CHAINFD_ERR_UNSUPPORTED, "%s: forward", what);
        EXPECT(same_data(m, d, before), "%s: forward changed mjData", what);
      } else {
        EXPECT(chainfd_forward(m, d) == 0, "%s: forward: %s", what, chainfd_last_error());
      }
      printf("%s, fallback=error -> %s\n", what, chainfd_last_error());
      mj_deleteData(before);
    }
    mj_deleteData(d);
    mj_deleteModel(m);
  }
}

// Constraint rows through the plugin (chainfd_step with fallback=error, so a MuJoCo step would
// fail): the tip on a floor (a contact, pyramidal and elliptic), j1 beyond its range (a limit),
// friction loss on j1; 30 steps each against mj_step, and the rows' forces.
static void test_constraint_steps(void) {
  static const struct {
    const char *what, *option, *world, *joint1;
    double scale;
  } c[] = {
      {"contact", "", "<geom type=\"plane\" size=\"2 2 0.1\" pos=\"0 0 0.98\"/>", "", 0.0},
      {"elliptic contact", "cone=\"elliptic\"",
       "<geom type=\"plane\" size=\"2 2 0.1\" pos=\"0 0 0.98\"/>", "", 0.0},
      {"joint limit", "", "", "limited=\"true\" range=\"-0.1 0.1\"", 1.0},
      {"frictionloss", "", "", "frictionloss=\"0.1\"", 0.3},
  };
  for (int i = 0; i < 4; i++) {
    mjModel* m = chain_model("<config key=\"backend\" value=\"cpu\"/>"
                             "<config key=\"fallback\" value=\"error\"/>",
                             c[i].option, c[i].world, c[i].joint1);
    if (!m) continue;
    mjData* d = mj_makeData(m);
    set_state(m, d, c[i].scale);
    mjData* ref = mj_copyData(NULL, m, d);
    double dq = 0, df = 0;
    int rows = 0;
    for (int t = 0; t < 30; t++) {
      mj_step(m, ref);
      int status = chainfd_step(m, d);
      EXPECT(status == 0, "%s: step %d: %s", c[i].what, t, chainfd_last_error());
      if (status) break;
      for (int j = 0; j < m->nq; j++) dq = fmax(dq, fabs(d->qpos[j] - ref->qpos[j]));
      rows += d->nefc;
      if (d->nefc == ref->nefc)
        for (int r = 0; r < d->nefc; r++)
          df = fmax(df, fabs(d->efc_force[r] - ref->efc_force[r]) / (1 + fabs(ref->efc_force[r])));
      else
        df = INFINITY;
      for (int j = 0; j < m->nv; j++)
        df = fmax(df, fabs(d->qfrc_constraint[j] - ref->qfrc_constraint[j]) /
                          (1 + fabs(ref->qfrc_constraint[j])));
    }
    chainfd_stats st;
    chainfd_get_stats(m, d, &st);
    printf("%s through the plugin: %d rows over 30 steps, max|dqpos| %.2e, forces apart %.2e, "
           "%lld chainfd steps\n", c[i].what, rows, dq, df, st.steps_chainfd);
    EXPECT(rows > 0, "%s: no constraint rows: the case tests nothing", c[i].what);
    EXPECT(dq <= 1e-10 && df <= 1e-8, "%s: max|dqpos| %.3e, forces apart %.3e", c[i].what, dq, df);
    EXPECT(st.steps_chainfd == 30 && st.steps_mujoco == 0, "%s: %lld chainfd steps, %lld MuJoCo",
           c[i].what, st.steps_chainfd, st.steps_mujoco);
    mj_deleteData(ref);
    mj_deleteData(d);
    mj_deleteModel(m);
  }
}

// mjcb_control's calls: chainfd_step calls it as often as mj_step does
static int control_calls;
static void count_control(const mjModel* m, mjData* d) {
  (void)m;
  (void)d;
  control_calls++;
}

static void test_fallback(void) {
  // the tip rests on a floor: a contact, with a noslip pass after the solver (without one the
  // contact is chainfd's: test_constraint_steps)
  expect_fallback("contact, noslip", "noslip_iterations=\"2\"",
                  "<geom type=\"plane\" size=\"2 2 0.1\" pos=\"0 0 0.98\"/>", "", 0.0,
                  "noslip_iterations", 1);
  // j1 starts beyond its range: a limit, with a noslip pass after the solver
  expect_fallback("joint limit, noslip", "noslip_iterations=\"2\"", "",
                  "limited=\"true\" range=\"-0.1 0.1\"", 1.0, "noslip_iterations", 1);
  // options chainfd does not reproduce: refused before anything is computed
  expect_fallback("implicit", "integrator=\"implicit\"", "", "", 0.3, "integrator implicit", 0);
  expect_fallback("fluid + implicitfast", "integrator=\"implicitfast\" density=\"1000\"", "", "",
                  0.3, "fluid", 0);
  // a model the chain adapter refuses: a jointed body below a mocap body (trees, ball and free
  // joints are stepped: test_step_trajectories)
  expect_fallback("mocap base", "", "<body name=\"mover\" mocap=\"true\" pos=\"0 1 1\"><body "
                  "name=\"swing\"><joint name=\"js\"/><geom type=\"sphere\" size=\"0.05\"/>"
                  "</body></body>", "", 0.3, "mocap ancestor", 1);

  // fallback=error and a NaN qpos where the reset state (qpos0) has a contact (with a noslip pass:
  // MuJoCo's):
  // mj_checkPos resets the state before the contact is seen; the refusal must put it back,
  // warnings included
  {
    mjModel* m = chain_model(fallback_error, "noslip_iterations=\"2\"",
                             "<geom type=\"plane\" size=\"2 2 0.1\" pos=\"0 0 0.98\"/>", "");
    if (m) {
      mjData* d = mj_makeData(m);
      set_state(m, d, 0.3);
      d->qpos[1] = NAN;
      d->time = 5;
      mjData* before = mj_copyData(NULL, m, d);
      int status = chainfd_step(m, d);
      printf("NaN qpos, contact after the reset, fallback=error -> %d: %s\n", status, chainfd_last_error());
      EXPECT(status == CHAINFD_ERR_UNSUPPORTED && strstr(chainfd_last_error(), "noslip"),
             "a NaN qpos whose reset meets a contact: status %d", status);
      EXPECT(same_state(m, d, before) && d->time == 5 &&
             d->warning[mjWARN_BADQPOS].number == before->warning[mjWARN_BADQPOS].number,
             "a refused step left the bad state's reset behind (time %g, warnings %d)", d->time,
             d->warning[mjWARN_BADQPOS].number);
      mj_deleteData(before);
      mj_deleteData(d);
      mj_deleteModel(m);
    }
  }

  // into a limit and out again, the limit's row MuJoCo's (a noslip pass): chainfd steps, MuJoCo
  // steps, chainfd steps; still mj_step's result, with mjcb_control called as often. RK4: steps
  // whose later stages alone meet the limit have MuJoCo evaluate those stages
  for (int rk4 = 0; rk4 < 2; rk4++) {
    mjModel* m = chain_model(fallback_mujoco, "gravity=\"0 0 0\" noslip_iterations=\"2\"", "",
                             "limited=\"true\" range=\"-11.5 11.5\" damping=\"0\"");
    if (!m) break;
    const char* name = rk4 ? "RK4" : "Euler";
    if (rk4) m->opt.integrator = mjINT_RK4;
    m->opt.enableflags |= mjENBL_ENERGY;  // kinetic energy: chainfd builds M (a timer of its own)
    mjData* d = mj_makeData(m);
    mjData* ref = mj_makeData(m);
    d->qvel[0] = ref->qvel[0] = 2.0;  // hits the upper limit within 0.1 s, bounces back
    double dq = 0;
    int calls_mujoco = 0, calls_chainfd = 0, stage_steps = 0;
    long long handed = 0;
    mjcb_control = count_control;
    for (int t = 0; t < 300; t++) {
      control_calls = 0;
      mj_step(m, ref);
      calls_mujoco += control_calls;
      control_calls = 0;
      EXPECT(chainfd_step(m, d) == 0, "%s limit run: %s", name, chainfd_last_error());
      calls_chainfd += control_calls;
      chainfd_stats st;
      chainfd_get_stats(m, d, &st);
      if (st.steps_mujoco > handed && strstr(st.last_fallback, "RK4 step's later stages")) stage_steps++;
      handed = st.steps_mujoco;
      double e = max_abs_diff(d->qpos, ref->qpos, m->nq);
      dq = cfd_worst(dq, e);
    }
    mjcb_control = NULL;
    // the timers chainfd's steps count (the step, forwards, advances) and those of MuJoCo's stage
    // functions it calls, as often as mj_step counts them (not the position stage's own, nor the
    // stages chainfd replaces: plugin/README.md)
    static const int counted[] = {mjTIMER_STEP, mjTIMER_FORWARD, mjTIMER_ADVANCE, mjTIMER_POS_INERTIA,
                                  mjTIMER_POS_COLLISION, mjTIMER_COL_BROAD, mjTIMER_COL_NARROW};
    for (size_t k = 0; k < sizeof counted / sizeof counted[0]; k++)
      EXPECT(d->timer[counted[k]].number == ref->timer[counted[k]].number,
             "%s limit run: timer %d counted %d times, by mj_step %d", name, counted[k],
             d->timer[counted[k]].number, ref->timer[counted[k]].number);
    chainfd_stats st;
    chainfd_get_stats(m, d, &st);
    printf("%s limit run: %lld chainfd steps, %lld MuJoCo steps (%d with MuJoCo's later RK4 stages "
           "only), max |dqpos| %.3e, mjcb_control %d calls (mj_step %d)\n",
           name, st.steps_chainfd, st.steps_mujoco, stage_steps, dq, calls_chainfd, calls_mujoco);
    EXPECT(st.steps_chainfd > 10 && st.steps_mujoco > 10, "%s: both paths used", name);
    EXPECT(!rk4 || stage_steps > 0, "RK4: no step had MuJoCo evaluate only its later stages");
    EXPECT(dq <= 1e-10, "%s limit run: max |dqpos| %.3e", name, dq);
    EXPECT(calls_chainfd == calls_mujoco, "%s limit run: mjcb_control called %d times, by mj_step %d",
           name, calls_chainfd, calls_mujoco);
    mj_deleteData(ref);
    mj_deleteData(d);
    mj_deleteModel(m);
  }
  // the same run with fallback=error: the first refusal is the RK4 step whose later stage meets
  // the limit, and it leaves the state as it was
  {
    mjModel* m = chain_model(fallback_error,
                             "gravity=\"0 0 0\" integrator=\"RK4\" noslip_iterations=\"2\"", "",
                             "limited=\"true\" range=\"-11.5 11.5\" damping=\"0\"");
    if (!m) return;
    mjData* d = mj_makeData(m);
    d->qvel[0] = 2.0;
    int status = 0, t = 0;
    mjData* before = NULL;
    for (; t < 300 && !status; t++) {
      mj_deleteData(before);
      before = mj_copyData(NULL, m, d);
      status = chainfd_step(m, d);
    }
    printf("RK4 limit run, fallback=error: step %d -> %d: %s\n", t, status, chainfd_last_error());
    EXPECT(status == CHAINFD_ERR_UNSUPPORTED && strstr(chainfd_last_error(), "inside the RK4 step"),
           "RK4 with fallback=error: status %d (%s)", status, chainfd_last_error());
    EXPECT(same_state(m, d, before) && d->time == before->time, "a refused RK4 step moved the state");
    mj_deleteData(before);
    mj_deleteData(d);
    mj_deleteModel(m);
  }
}

// --- copy, reset, destroy ------------------------------------------------------------------------------

static void test_copy_reset(void) {
  mjModel* m = load_file(CHAINFD_PLUGIN_TESTS "/servo_arm_plugin.xml");
  if (!m) return;
  mjData* a = mj_makeData(m);
  set_state(m, a, 0.4);
  for (int t = 0; t < 10; t++) chainfd_step(m, a);
  mjData* b = mj_copyData(NULL, m, a);  // a new mjData: init, then copy
  mjData* c = mj_makeData(m);
  mj_copyData(c, m, a);                 // an existing one: copy into its own state
  chainfd_stats sa, sb;
  chainfd_get_stats(m, a, &sa);
  chainfd_get_stats(m, b, &sb);
  EXPECT(sb.steps_chainfd == sa.steps_chainfd, "copied counters");
  EXPECT(a->plugin_data[0] != b->plugin_data[0] && a->plugin_data[0] != c->plugin_data[0],
         "each mjData has its own chainfd state");
  for (int t = 0; t < 50; t++) {
    EXPECT(chainfd_step(m, a) == 0 && chainfd_step(m, b) == 0 && chainfd_step(m, c) == 0, "%s",
           chainfd_last_error());
  }
  EXPECT(same_state(m, a, b) && same_state(m, a, c), "copies step identically");
  mj_deleteData(a);  // b and c keep working after a's state is freed
  EXPECT(chainfd_step(m, b) == 0 && chainfd_step(m, c) == 0, "after deleting the original");

  mj_resetData(m, b);
  mjData* fresh = mj_makeData(m);
  for (int t = 0; t < 50; t++) {
    EXPECT(chainfd_step(m, b) == 0 && chainfd_step(m, fresh) == 0, "%s", chainfd_last_error());
  }
  EXPECT(same_state(m, b, fresh), "reset mjData steps as a new one");
  mj_deleteData(fresh);
  mj_deleteData(c);
  mj_deleteData(b);
  mj_deleteModel(m);
}

// mjData whose plugin_data does not hold its own chainfd instance: another mjData's pointer (as an
// unpickled copy holds its original's, perhaps freed since), or garbage. chainfd finds each
// mjData's instance by the mjData itself: the step uses b's own state, nothing is read through the
// pointer, and deleting frees each instance once. An mjData whose slot holds another plugin (made
// from another model) is refused.
static void test_foreign_instance(void) {
  mjModel* m = load_file(CHAINFD_PLUGIN_TESTS "/servo_arm_plugin.xml");
  if (!m) return;
  mjData* a = mj_makeData(m);
  mjData* b = mj_makeData(m);
  uintptr_t own = b->plugin_data[0];
  b->plugin_data[0] = a->plugin_data[0];  // as pickle.loads leaves it
  int st = chainfd_step(m, b) | chainfd_step(m, b);
  chainfd_stats sa, sb;
  EXPECT(st == 0 && chainfd_get_stats(m, a, &sa) == 0 && chainfd_get_stats(m, b, &sb) == 0 &&
         sa.steps_chainfd == 0 && sb.steps_chainfd == 2,
         "another mjData's pointer: status %d, steps %lld on a, %lld on b", st, sa.steps_chainfd,
         sb.steps_chainfd);
  mj_deleteData(a);  // b's pointer now dangles: never read
  b->plugin_data[0] = (uintptr_t)0x10;  // garbage
  EXPECT(chainfd_step(m, b) == 0, "a garbage pointer: %s", chainfd_last_error());
  b->plugin_data[0] = own;
  int slot = b->plugin[0];
  b->plugin[0] = slot + 1;  // another plugin in that slot
  st = chainfd_step(m, b);
  printf("another plugin in the slot -> %s\n", chainfd_last_error());
  EXPECT(st == CHAINFD_ERR_NO_INSTANCE && strstr(chainfd_last_error(), "not made from this model"),
         "another plugin's slot: status %d", st);
  b->plugin[0] = slot;
  EXPECT(chainfd_step(m, b) == 0, "after: %s", chainfd_last_error());
  mj_deleteData(b);
  mj_deleteModel(m);
}

// --- configurations and models that must not pass silently ---------------------------------------

// chainfd_step must return code with a message containing every word, mjData byte for byte as before.
static void expect_error(const char* what, const char* xml, int code, const char* const* words) {
  char err[1024];
  mjModel* m = compile(xml, err, sizeof err);
  EXPECT(m != NULL, "%s: %s", what, err);
  if (!m) return;
  mjData* d = mj_makeData(m);
  mj_forward(m, d);
  mjData* before = mj_copyData(NULL, m, d);
  int status = chainfd_step(m, d);
  printf("%s -> %d: %s\n", what, status, chainfd_last_error());
  EXPECT(status == code, "%s: status %d, not %d (%s)", what, status, code, chainfd_last_error());
  for (const char* const* w = words; *w; w++)
    EXPECT(strstr(chainfd_last_error(), *w) != NULL, "%s: message '%s' must say '%s'", what,
           chainfd_last_error(), *w);
  EXPECT(same_data(m, d, before), "%s: mjData changed", what);
  mj_deleteData(before);
  mj_deleteData(d);
  mj_deleteModel(m);
}

static void test_silent_cases(void) {
  // a second chainfd instance, even one with an invalid config, is refused naming both
  expect_error("two instances",
               "<mujoco><extension><plugin plugin=\"chainfd\"><instance name=\"first\"/>"
               "<instance name=\"second\"><config key=\"backend\" value=\"nonsense\"/></instance>"
               "</plugin></extension><worldbody><body><joint axis=\"0 1 0\"/>"
               "<geom size=\"0.1\" pos=\"0.2 0 0\" contype=\"0\" conaffinity=\"0\"/></body>"
               "</worldbody></mujoco>",
               CHAINFD_ERR_CONFIG, (const char*[]){"2 chainfd instances", "'first'", "'second'", NULL});

  // a GPU back end named exactly without a CUDA device: the config error plugin/README.md promises
  if (chainfd_gpu_count() == 0)
    expect_error("cuda.abia without a GPU",
                 "<mujoco><extension><plugin plugin=\"chainfd\"><instance name=\"fd\">"
                 "<config key=\"backend\" value=\"cuda.abia\"/></instance></plugin></extension>"
                 "<worldbody><body><joint axis=\"0 1 0\"/>"
                 "<geom size=\"0.1\" pos=\"0.2 0 0\" contype=\"0\" conaffinity=\"0\"/></body>"
                 "</worldbody></mujoco>",
                 CHAINFD_ERR_CONFIG, (const char*[]){"'fd'", "cuda.abia", "no CUDA device", NULL});

  // MuJoCo 4's flexcomp cable (its flex has plastic state, no joint has a springyield): the
  // reason is the flex
  expect_error("flexcomp cable",
               "<mujoco><extension><plugin plugin=\"chainfd\"><instance name=\"fd\">"
               "<config key=\"fallback\" value=\"error\"/></instance></plugin></extension>"
               "<worldbody><flexcomp name=\"cable\" type=\"grid\" count=\"5 1 1\" "
               "spacing=\"0.1 0.1 0.1\" radius=\"0.01\" dim=\"1\"><elasticity young=\"1e6\"/>"
               "</flexcomp></worldbody></mujoco>",
               CHAINFD_ERR_UNSUPPORTED, (const char*[]){"flex 'cable'", NULL});

  // a joint's plastic spring is named by the joint
  expect_error("joint springyield",
               "<mujoco><extension><plugin plugin=\"chainfd\"><instance name=\"fd\">"
               "<config key=\"fallback\" value=\"error\"/></instance></plugin></extension>"
               "<worldbody><body name=\"arm\"><joint name=\"elbow\" axis=\"0 1 0\" stiffness=\"5\" "
               "springyield=\"0.1\"/><geom size=\"0.1\" pos=\"0.2 0 0\" contype=\"0\" "
               "conaffinity=\"0\"/></body></worldbody></mujoco>",
               CHAINFD_ERR_UNSUPPORTED, (const char*[]){"joint 'elbow'", "springyield", NULL});
}

// --- threads -----------------------------------------------------------------------------------------

#define NTHREAD 8
#define THREAD_STEPS 200

typedef struct thread_job {
  const mjModel* m;
  mjData* d;
  int failed;
} thread_job;

static void* run_job(void* arg) {
  thread_job* job = arg;
  for (int t = 0; t < THREAD_STEPS && !job->failed; t++) job->failed = chainfd_step(job->m, job->d);
  return NULL;
}

static void test_threads(void) {
  mjModel* m = load_file(CHAINFD_PLUGIN_TESTS "/arm7_plugin.xml");
  if (!m) return;
  for (int integrator = 0; integrator < 2; integrator++) {
    m->opt.integrator = integrator ? mjINT_RK4 : mjINT_EULER;
    mjData *serial[NTHREAD], *parallel[NTHREAD];
    thread_job jobs[NTHREAD];
    pthread_t threads[NTHREAD];
    for (int i = 0; i < NTHREAD; i++) {
      serial[i] = mj_makeData(m);
      parallel[i] = mj_makeData(m);
      set_state(m, serial[i], 0.1 * (i + 1));
      set_state(m, parallel[i], 0.1 * (i + 1));
      thread_job serial_job = {m, serial[i], 0};
      run_job(&serial_job);
      EXPECT(!serial_job.failed, "serial %d", i);
    }
    for (int i = 0; i < NTHREAD; i++) {
      jobs[i] = (thread_job){m, parallel[i], 0};
      EXPECT(pthread_create(&threads[i], NULL, run_job, &jobs[i]) == 0, "pthread_create");
    }
    for (int i = 0; i < NTHREAD; i++) pthread_join(threads[i], NULL);
    for (int i = 0; i < NTHREAD; i++) {
      EXPECT(!jobs[i].failed, "thread %d failed", i);
      EXPECT(same_state(m, serial[i], parallel[i]), "thread %d differs from the serial run", i);
      mj_deleteData(serial[i]);
      mj_deleteData(parallel[i]);
    }
    printf("%d threads x %d steps (%s): equal to the serial runs\n", NTHREAD, THREAD_STEPS,
           integrator ? "RK4" : "Euler");
  }
  mj_deleteModel(m);
}

// --- bad states ------------------------------------------------------------------------------------------

static void test_bad_state(void) {
  mjModel* m = chain_model("", "", "", "");
  if (!m) return;
  mjcb_control = count_control;
  for (int kind = 0; kind < 2; kind++) {
    mjData* d = mj_makeData(m);
    set_state(m, d, 0.3);
    d->time = 1.5;
    if (kind == 0) d->qvel[1] = NAN;
    else d->qfrc_applied[2] = NAN;
    mjData* ref = mj_copyData(NULL, m, d);
    int before = warnings;
    control_calls = 0;
    mj_step(m, ref);
    int mujoco_calls = control_calls;
    control_calls = 0;
    EXPECT(chainfd_step(m, d) == 0, "%s", chainfd_last_error());
    EXPECT(control_calls == mujoco_calls, "%s: mjcb_control called %d times, by mj_step %d",
           kind ? "bad qacc" : "bad qvel", control_calls, mujoco_calls);
    int w = kind == 0 ? mjWARN_BADQVEL : mjWARN_BADQACC;
    EXPECT(d->warning[w].number == 1 && ref->warning[w].number == 1, "%s warning: %d vs %d",
           kind ? "BADQACC" : "BADQVEL", d->warning[w].number, ref->warning[w].number);
    EXPECT(warnings == before + 2, "MuJoCo's warning raised by both");
    EXPECT(d->time == ref->time && max_abs_diff(d->qpos, ref->qpos, m->nq) <= 1e-12 &&
           max_abs_diff(d->qvel, ref->qvel, m->nv) <= 1e-12, "state after the reset");
    printf("bad %s: reset like mj_step (time %g, warning '%s')\n", kind ? "qfrc_applied" : "qvel",
           d->time, last_warning);
    mj_deleteData(ref);
    mj_deleteData(d);
  }
  mjcb_control = NULL;
  mj_deleteModel(m);
}

int main(void) {
  mju_user_warning = quiet_warning;
  test_scenes();
  test_config_errors();
  test_fallback();
  test_constraint_steps();
  test_copy_reset();
  test_foreign_instance();
  test_silent_cases();
  test_threads();
  test_bad_state();
  TEST_EXIT();
}
