// Every refusal names the element and says why; bad states are refused and leave outputs untouched.
#include <stdlib.h>

#include "auto.h"
#include "backend.h"
#include "chain_gen.h"
#include "mj_chain.h"
#include "test_util.h"

static mjModel* load(const char* name) {
  char path[1024], err[1024];
  snprintf(path, sizeof path, "%s/%s", CHAINFD_TEST_MODELS, name);
  mjModel* m = mj_loadXML(path, NULL, err, sizeof err);
  if (!m) fprintf(stderr, "cannot load %s: %s\n", path, err);
  return m;
}

// The model must be refused by the adapter with a message containing every word of `words`.
static void expect_refused(const char* file, const char* const* words) {
  mjModel* m = load(file);
  EXPECT(m != NULL, "%s must load in MuJoCo", file);
  if (!m) return;
  cfd_chain c;
  char err[1024] = "";
  int st = cfd_chain_from_model(m, &c, err, sizeof err);
  EXPECT(st != 0, "%s must be refused", file);
  EXPECT(c.n == 0 && c.screw == NULL, "%s: a refused chain is left empty", file);
  for (const char* const* w = words; *w; w++)
    EXPECT(strstr(err, *w) != NULL, "%s: message '%s' must name '%s'", file, err, *w);
  printf("%-22s refused: %s\n", file, err);
  mj_deleteModel(m);
}

// backend=auto by the model's shape: MuJoCo's dof parents give the chain's shape, and one chain
// with ball joints is never handed a back end that refuses balls.
static void auto_by_shape(void) {
  static const struct { const char* spec; int shape; } models[] = {
      {"chain:20", CFD_SHAPE_CHAIN},
      {"chain:20,ball=1", CFD_SHAPE_BALL_CHAIN},
      {"chain:10,free=1", CFD_SHAPE_BALL_CHAIN},
      {"chain:20,random=1,seed=3,branch=0.5", CFD_SHAPE_TREE},
  };
  char err[1024];
  for (size_t k = 0; k < sizeof models / sizeof models[0]; k++) {
    mjModel* m = cfd_load_model(models[k].spec, err, sizeof err);
    cfd_chain c;
    EXPECT(m && !cfd_chain_from_model(m, &c, err, sizeof err), "%s: %s", models[k].spec, err);
    if (!m) continue;
    EXPECT(cfd_model_shape(m) == models[k].shape && cfd_chain_shape(&c) == models[k].shape,
           "%s: shape %d from the model, %d from the chain, not %d", models[k].spec,
           cfd_model_shape(m), cfd_chain_shape(&c), models[k].shape);
    cfd_chain_free(&c);
    mj_deleteModel(m);
  }
  const int ns[] = {8, 200, 1024, 16384}, Bs[] = {1, 4, 64, 1024, 65536};
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 5; j++)
      for (int gpu = 0; gpu < 2; gpu++) {
        const char* p = cfd_auto_pick(ns[i], Bs[j], gpu, CFD_SHAPE_BALL_CHAIN, NULL, 0);
        EXPECT(!strcmp(p, "cpu.fast") || (gpu && !strcmp(p, "cuda.abia")),
               "auto on a ball chain n=%d B=%d gpu=%d: %s", ns[i], Bs[j], gpu, p);
      }
  printf("auto by shape: checked\n");
}

int main(void) {
  auto_by_shape();
  expect_refused("tendon_armature.xml", (const char*[]){"'coupler'", "armature", NULL});
  expect_refused("no_joints.xml", (const char*[]){"no joints", NULL});
  expect_refused("actuator_armature.xml", (const char*[]){"'drive'", "armature", NULL});
  expect_refused("flex.xml", (const char*[]){"'strip'", "flex", NULL});
  expect_refused("mocap_base.xml", (const char*[]){"'a'", "mocap", NULL});

  // Trees, ball and free joints: the tree back ends take them, the chain-only ones refuse them
  // naming the joint, its body and why
  struct {
    const char* file;
    const char* words[3];
  } trees[] = {{"ball.xml", {"'shoulder'", "'b'", "ball or free"}},
               {"free.xml", {"'root'", "'floating'", "ball or free"}},
               {"branch.xml", {"'jr'", "'right'", "branch"}},
               {"two_chains.xml", {"'j2'", "'second'", "branch"}}};
  for (size_t t = 0; t < sizeof trees / sizeof trees[0]; t++) {
    mjModel* m = load(trees[t].file);
    EXPECT(m != NULL, "%s loads", trees[t].file);
    if (!m) continue;
    char err[1024] = "";
    for (const char* const* be = (const char*[]){"cpu.fast", "cpu.abia", "cpu.jsiia", NULL}; *be; be++) {
      cfd_solver* s = cfd_solver_create(m, *be, err, sizeof err);
      EXPECT(s != NULL, "%s accepts %s: %s", *be, trees[t].file, err);
      cfd_solver_free(s);
    }
    cfd_chain c;
    EXPECT(cfd_chain_from_model(m, &c, err, sizeof err) == 0, "%s", err);
    for (const char* const* be = (const char*[]){"cpu.cfa", "cuda.jsiia", "cuda.cfa", NULL};
         *be; be++) {
      int st = cfd_backend_supports(cfd_backend_find(*be), m, &c, err, sizeof err);
      EXPECT(st != 0, "%s refuses %s", *be, trees[t].file);
      for (int w = 0; w < 3; w++)
        EXPECT(strstr(err, trees[t].words[w]) != NULL, "%s: '%s' names '%s'", trees[t].file, err,
               trees[t].words[w]);
    }
    printf("%-22s %s\n", trees[t].file, err);
    cfd_chain_free(&c);
    mj_deleteModel(m);
  }

  // A body with two joints: exact for ABIA/JSIIA/fast (an inner massless link), refused by CFA.
  mjModel* m = load("multi_joint.xml");
  EXPECT(m != NULL, "multi_joint.xml loads");
  if (m) {
    char err[1024] = "";
    cfd_solver* s = cfd_solver_create(m, "cpu.abia", err, sizeof err);
    EXPECT(s != NULL, "cpu.abia accepts a body with two joints: %s", err);
    cfd_solver_free(s);
    s = cfd_solver_create(m, "cpu.cfa", err, sizeof err);
    EXPECT(s == NULL, "cpu.cfa refuses a massless inner link");
    EXPECT(strstr(err, "'wrist_pitch'") && strstr(err, "'wrist'"), "names joint and body: %s", err);
    printf("%-22s cpu.cfa refused: %s\n", "multi_joint.xml", err);
    // unnamed elements: by index (a "?" before)
    mjModel* u = load("multi_joint_unnamed.xml");
    EXPECT(u != NULL, "multi_joint_unnamed.xml loads");
    if (u) {
      s = cfd_solver_create(u, "cpu.cfa", err, sizeof err);
      EXPECT(s == NULL && strstr(err, "joint #1 (body #2)"), "names unnamed elements by index: %s",
             err);
      printf("%-22s cpu.cfa refused: %s\n", "multi_joint_unnamed", err);
      cfd_solver_free(s);
      mj_deleteModel(u);
    }
    s = cfd_solver_create(m, "cpu.nonsense", err, sizeof err);
    EXPECT(s == NULL && strstr(err, "cpu.nonsense") && strstr(err, "cpu.fast"),
           "unknown backend names itself and the choices: %s", err);

    // NaN or Inf in the state: an error, and qacc untouched
    s = cfd_solver_create(m, "cpu.fast", err, sizeof err);
    mjData* d = mj_makeData(m);
    mj_forward(m, d);
    double qacc[3] = {7, 7, 7};
    d->qvel[1] = NAN;
    int st = cfd_solver_qacc(s, m, d, NULL, qacc, err, sizeof err);
    EXPECT(st == CFD_ERR_NONFINITE, "NaN state refused (status %d)", st);
    EXPECT(strstr(err, "NaN") != NULL, "message says NaN: %s", err);
    EXPECT(qacc[0] == 7 && qacc[1] == 7 && qacc[2] == 7, "qacc untouched on error");
    d->qvel[1] = 0;
    d->qfrc_applied[2] = INFINITY;
    st = cfd_solver_qacc(s, m, d, NULL, qacc, err, sizeof err);
    EXPECT(st == CFD_ERR_NONFINITE, "Inf force refused (status %d)", st);
    mj_deleteData(d);
    cfd_solver_free(s);
    mj_deleteModel(m);
  }
  TEST_EXIT();
}
