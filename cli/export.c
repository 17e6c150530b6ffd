// chainfd export MODEL OUT.xml|OUT.mjb: the model as a file for other engines and tools. For a
// generated chain (chain:N,...) this is the only way to see it as a file: MJCF is written by
// MuJoCo's own writer from the mjSpec that chainfd compiles, so an engine that loads OUT.xml gets
// the same mjModel (to the writer's six digits); an MJCF file is loaded and written back
// (mj_saveLastXML). The MJCF is read back to check it loads: MuJoCo's XML reader refuses elements
// nested past its depth limit, so chains past about 496 links cannot travel as MJCF. OUT.mjb is
// MuJoCo's binary model (mj_saveModel: exact, any depth, read only by the same MuJoCo version).
#include <stdio.h>
#include <string.h>

#include <mujoco/mujoco.h>

#include "chain_gen.h"
#include "commands.h"

int cfd_cmd_export(int argc, char** argv) {
  if (argc != 2 || argv[0][0] == '-' || argv[1][0] == '-') {
    fprintf(stderr, "usage: chainfd export MODEL OUT.xml|OUT.mjb\n");
    return 2;
  }
  const char *model = argv[0], *out = argv[1];
  char err[1024] = "";
  size_t len = strlen(out);
  if (len > 4 && !strcmp(out + len - 4, ".mjb")) {
    mjModel* m = cfd_load_model(model, err, sizeof err);
    if (!m) {
      fprintf(stderr, "chainfd export: %s\n", err);
      return 1;
    }
    mj_saveModel(m, out, NULL, 0);  // (it reports no error of its own: read the file back)
    mjModel* back = mj_loadModel(out, NULL);
    int ok = back && back->nbody == m->nbody && back->nv == m->nv;
    mj_deleteModel(back);
    mj_deleteModel(m);
    if (!ok) {
      fprintf(stderr, "chainfd export: could not write '%s' (or read it back)\n", out);
      return 1;
    }
    printf("wrote %s (MuJoCo %s's binary model)\n", out, mj_versionString());
    return 0;
  }
  if (len > 4 && strlen(model) > 4 && !strcmp(model + strlen(model) - 4, ".mjb")) {
    fprintf(stderr, "chainfd export: a binary model (%s) cannot be written as MJCF\n", model);
    return 1;
  }
  if (!strncmp(model, "chain:", 6)) {
    cfd_chain_gen g;
    if (cfd_chain_gen_parse(model, &g, err, sizeof err) || cfd_chain_save_xml(&g, out, err, sizeof err)) {
      fprintf(stderr, "chainfd export: %s\n", err);
      return 1;
    }
  } else {
    mjModel* m = mj_loadXML(model, NULL, err, sizeof err);
    if (!m) {
      fprintf(stderr, "chainfd export: load '%s': %s\n", model, err[0] ? err : "unknown error");
      return 1;
    }
    int ok = mj_saveLastXML(out, m, err, sizeof err);
    mj_deleteModel(m);
    if (!ok) {
      fprintf(stderr, "chainfd export: writing '%s': %s\n", out, err[0] ? err : "unknown error");
      return 1;
    }
  }
  mjModel* back = mj_loadXML(out, NULL, err, sizeof err);
  if (!back) {  // (the file is removed: nothing should pick up a model MuJoCo cannot read)
    remove(out);
    fprintf(stderr, "chainfd export: MuJoCo cannot load '%s' back, so it was removed: %s%s\n", out,
            err[0] ? err : "unknown error",
            strstr(err, "XML parse error") ? " (a body tree this deep is past its XML reader's "
                                             "nesting limit: write OUT.mjb instead)" : "");
    return 1;
  }
  mj_deleteModel(back);
  printf("wrote %s\n", out);
  return 0;
}
