// chainfd: the command-line tool. `chainfd info MODEL`, `chainfd check MODEL ...`,
// `chainfd export MODEL OUT.xml`.
// MODEL is an MJCF file or a generated chain "chain:N[,key=value...]" (adapters/chain_gen.h).
#include <stdio.h>
#include <string.h>

#include "commands.h"

static void usage(FILE* f) {
  fprintf(f,
          "usage: chainfd COMMAND [MODEL] [options]\n"
          "  info  [MODEL] [--batch B]   the chain model (links, joints, dofs), what is supported\n"
          "                  or refused and why, what backend=auto picks for B states, and\n"
          "                  whether chainfd_step takes the model's steps or hands them to MuJoCo\n"
          "  check [MODEL] [--backend NAME[,NAME...]|all] [--states N] [--seed S] [--tol T]\n"
          "                [--steps N] [--steps-tol T]\n"
          "                  every back end's qacc against MuJoCo's mj_forward, inverse dynamics\n"
          "                  against mj_rne, over N seeded random states (constraints disabled);\n"
          "                  exit 1 when any error exceeds T (default 1e-10), the model is refused\n"
          "                  or chainfd cannot compute any step of the model (an element or\n"
          "                  option it does not reproduce: every step would be MuJoCo's; auto's\n"
          "                  choice of mj_step for a short chain is not a failure);\n"
          "                  ref_err is the error against a high-precision (long-double refined)\n"
          "                  reference, which decides where MuJoCo's own rounding error exceeds T;\n"
          "                  --steps N: from each of N states of MuJoCo's trajectory, one\n"
          "                  chainfd_step against one mj_step per back end (|dqpos| and\n"
          "                  |dqvel| / max(1, |qvel|) within --steps-tol, default 1e-8); the\n"
          "                  free-running divergence beside MuJoCo's own is shown, not judged\n"
          "        --constraints [--states N] [--steps N]   the constraint solver against\n"
          "                  MuJoCo's Newton solver at tolerance 1e-14 (bound 1e-8)\n"
          "        --derivatives [--states N]   d qacc / d(q, qvel, ctrl) against differences\n"
          "                  of the long-double reference (bound 1e-8), the step's A and B\n"
          "                  against mjd_transitionFD (bound 1e-5)\n"
          "  export MODEL OUT.xml|OUT.mjb   the model as MJCF (a generated chain written by\n"
          "                  MuJoCo from the mjSpec chainfd compiles; read back to check it\n"
          "                  loads: past about 496 links MuJoCo's XML reader cannot) or as\n"
          "                  MuJoCo's binary model (any size, the same MuJoCo version only)\n"
          "  A bad option value exits with status 2; out of memory with status 1.\n"
          "MODEL: an MJCF file, a binary model (.mjb), or chain:N[,seed=S,random=1,slide=F,damping=D,armature=A,\n"
          "       stiffness=K,actuators=1|2,gravity=0,multijoint=1,timestep=T]; default %s\n",
          CFD_DEFAULT_SCENE);
}

int main(int argc, char** argv) {
  if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "info")) return cfd_cmd_info(argc - 2, argv + 2);
  if (!strcmp(argv[1], "check")) return cfd_cmd_check(argc - 2, argv + 2);
  if (!strcmp(argv[1], "export")) return cfd_cmd_export(argc - 2, argv + 2);
  fprintf(stderr, "chainfd: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
