// chainfd export MODEL OUT.xml: the model as MJCF, for other engines and tools to load. For a
// generated chain (chain:N,...) this is the only way to see it as a file: it is written by
// MuJoCo's own writer from the mjSpec that chainfd compiles, so an engine that loads OUT.xml gets
// the same mjModel. An MJCF file is loaded and written back (mj_saveLastXML).
#include <stdio.h>
#include <string.h>

#include <mujoco/mujoco.h>

#include "chain_gen.h"
#include "commands.h"

int cfd_cmd_export(int argc, char** argv) {
  if (argc != 2 || argv[0][0] == '-' || argv[1][0] == '-') {
    fprintf(stderr, "usage: chainfd export MODEL OUT.xml\n");
    return 2;
  }
  const char *model = argv[0], *out = argv[1];
  char err[1024] = "";
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
  printf("wrote %s\n", out);
  return 0;
}
