// The plugin loaded at run time as MuJoCo loads plugins (mj_loadPluginLibrary), by a program that
// is not linked to it: the MJCF declaration resolves, and chainfd_step (found with dlsym) steps the
// 7-dof arm as mj_step does (1e-9 in qpos after 100 steps).
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>

#include <mujoco/mujoco.h>

#include "test_util.h"

typedef int (*step_fn)(const mjModel*, mjData*);
typedef const char* (*error_fn)(void);

int main(void) {
  char err[1024];
  EXPECT(mjp_getPlugin("chainfd", NULL) == NULL, "registered before loading");
  mjModel* m = mj_loadXML(CHAINFD_PLUGIN_TESTS "/arm7_plugin.xml", NULL, err, sizeof err);
  EXPECT(m == NULL, "the model should need the plugin");
  if (m) mj_deleteModel(m);

  mj_loadPluginLibrary(CHAINFD_PLUGIN_PATH);
  EXPECT(mjp_getPlugin("chainfd", NULL) != NULL, "chainfd not registered by %s", CHAINFD_PLUGIN_PATH);
  void* lib = dlopen(CHAINFD_PLUGIN_PATH, RTLD_NOW | RTLD_NOLOAD);  // the handle MuJoCo opened
  EXPECT(lib != NULL, "dlopen: %s", dlerror());
  if (!lib) TEST_EXIT();
  step_fn chainfd_step = (step_fn)dlsym(lib, "chainfd_step");
  error_fn chainfd_last_error = (error_fn)dlsym(lib, "chainfd_last_error");
  EXPECT(chainfd_step && chainfd_last_error, "dlsym: %s", dlerror());

  m = mj_loadXML(CHAINFD_PLUGIN_TESTS "/arm7_plugin.xml", NULL, err, sizeof err);
  EXPECT(m != NULL, "load: %s", err);
  if (!m || !chainfd_step) TEST_EXIT();
  mjData* ref = mj_makeData(m);
  mjData* got = mj_makeData(m);
  for (int i = 0; i < m->nq; i++) ref->qpos[i] = got->qpos[i] = 0.4 * sin(i + 0.5);
  for (int i = 0; i < m->nu; i++) ref->ctrl[i] = got->ctrl[i] = 0.2 * cos(i);
  double dq = 0;
  for (int t = 0; t < 100; t++) {
    mj_step(m, ref);
    int status = chainfd_step(m, got);
    EXPECT(status == 0, "step %d: %s", t, chainfd_last_error());
    if (status) break;
    for (int i = 0; i < m->nq; i++) dq = fmax(dq, fabs(got->qpos[i] - ref->qpos[i]));
  }
  printf("loaded with mj_loadPluginLibrary: max |dqpos| = %.3e over 100 steps\n", dq);
  EXPECT(dq <= 1e-9, "max |dqpos| %.3e", dq);
  mj_deleteData(ref);
  mj_deleteData(got);
  mj_deleteModel(m);
  TEST_EXIT();
}
