// sim.h: the viewer's simulation, independent of any window: one model and state, the dynamics it
// steps with (MuJoCo's own, or a chainfd back end through the plugin's stepper API), switched at
// any time between steps, an optional travelling-wave controller, and the benchmark loop.
#ifndef CHAINFD_VIEWER_SIM_H
#define CHAINFD_VIEWER_SIM_H

#include <mujoco/mujoco.h>

#include "chainfd.h"
#include "chainfd_rollout.h"

#define CFV_MAX_DYNAMICS 8
#define CFV_MSG 640

typedef struct cfv_sim {
  mjModel* m;
  mjData* d;
  int links;   // chain links as chainfd counts them: hinge and slide joints
  int key;     // keyframe that reset() loads; -1: the model's qpos0

  // dynamics: [0] is MuJoCo's mj_step, the rest are chainfd back ends by name
  int ndyn;
  const char* dyn_name[CFV_MAX_DYNAMICS];
  chainfd_stepper* stepper[CFV_MAX_DYNAMICS];  // all made when the model loads
  int current;
  char unavailable[2 * CFV_MSG];  // back ends not offered here, and why

  // travelling wave on the actuators:
  //   ctrl_i = ctrl0_i + amp * sin(2 pi (freq t - i / len + (i odd ? odd : 0)))
  int wave;
  double wave_amp, wave_freq, wave_len, wave_odd;
  double* ctrl0;  // nu: ctrl after reset (the keyframe's)

  // counters
  long long steps, mujoco_steps;  // all steps, and those MuJoCo took for a chainfd back end
  char fallback_why[CFV_MSG];     // why the last such step was MuJoCo's ("" when none)
  char error[CFV_MSG];            // the last hard error
  mjtNum* saved;                  // the state before a chainfd step (mjSTATE_INTEGRATION)
  int diverged;                   // MuJoCo reset a bad state since the last reset

  // substeps through the CPU rollout for cpu.fast and the GPU rollout for cuda.abia
  // (cfv_sim_substeps); NULL when the rollout refuses the model (the GPU's also when no GPU)
  chainfd_rollout *rollout, *rollout_gpu;
  char rollout_why[CFV_MSG];  // why it refused
  double *rollout_x, *rollout_ctrl;  // state [nq + nv], controls [CFV_MAX_SUBSTEPS][nu]

  // A chain longer than MuJoCo compiles, asked for by <numeric name="chainfd_extend"
  // data="LINKS"/>: the model's chain with its links 1 .. n-1 repeated to `links` links
  // (chainfd_rollout_create_extended). cpu.fast and cuda.abia step it through the extended
  // rollouts; MuJoCo cannot (it is not listed). d keeps the model's own state, for the rest of the
  // scene, and the simulated time; ext_x is the chain's state, ext_xpos / ext_xmat its links' world
  // poses (cfv_sim_ext_poses).
  int ext;                              // 1: extended
  chainfd_rollout *ext_cpu, *ext_gpu;   // the GPU's where cuda.abia is offered
  double *ext_x, *ext_x1;               // [2 links]: the state, and a run's result
  double *ext_xpos, *ext_xmat;          // [links][3], [links][9]
  int ext_posed;                        // ext_xpos / ext_xmat are those of ext_x
} cfv_sim;

#define CFV_MAX_SUBSTEPS 256

// Loads an MJCF file or a "chain:N,..." spec; NULL with a message in err.
mjModel* cfv_load(const char* path_or_spec, char* err, int err_size);

// Sets up dynamics for m (takes ownership of m; makes d). backend: NULL for the model's own chainfd
// plugin configuration, or cpu.fast when it declares none; else "mujoco", a back-end name, or one
// of the plugin's short names (cfa, abia, jsiia, cpu, auto). 0, or nonzero with err set.
int cfv_sim_init(cfv_sim* s, mjModel* m, const char* backend, int key, char* err, int err_size);
void cfv_sim_free(cfv_sim* s);

// The index of a dynamics name (the same names as cfv_sim_init), or -1 with err set.
int cfv_sim_find(cfv_sim* s, const char* name, char* err, int err_size);
// Switches to dynamics i (between two steps: the state carries over unchanged).
int cfv_sim_select(cfv_sim* s, int i, char* err, int err_size);
const char* cfv_sim_name(const cfv_sim* s);

// Resets to the keyframe (or qpos0) and recomputes everything derived from the state.
void cfv_sim_reset(cfv_sim* s);
// Derived quantities (kinematics, forces) for the current state with the current dynamics.
int cfv_sim_forward(cfv_sim* s);
// One step: the wave controller, then the current dynamics. MuJoCo takes the step, counted in
// mujoco_steps with the reason in fallback_why, when chainfd cannot step the model or state exactly
// (contacts, limits, a refused model), and when a back end returns a non-finite qacc (which would
// make MuJoCo reset the state), the step being undone first. Nonzero only for hard errors (message
// in s->error).
int cfv_sim_step(cfv_sim* s);

// k steps at once for cpu.fast, through the CPU rollout (chainfd_rollout on CHAINFD_CPU), and for
// cuda.abia through the GPU rollout (device 0: the k steps on the GPU, past 256 links each step's
// dynamics by the scan kernel, as cuda.abia's for one long chain): the step of rollout_step.h,
// which equals chainfd_step's (tests/test_rollout holds the CPU rollout within 1e-9 of mj_step,
// the GPU's within 1e-10 of the CPU's), without MuJoCo's stage functions at every step; the state
// comes back into mjData once, with its kinematics (what drawing needs). Returns k, or 0 where it
// does not apply (another dynamics, a model the rollout refuses, a force the rollout does not
// model: a mouse perturbation's xfrc_applied, qfrc_applied; a failed or non-finite rollout), the
// state untouched: the caller then steps one by one with cfv_sim_step.
int cfv_sim_substeps(cfv_sim* s, int k);

// Whether qpos, qvel and qacc are finite (and not huge) and MuJoCo reset no bad state since the
// last reset (the back-end failures that cfv_sim_step undid do not count).
int cfv_sim_finite(const cfv_sim* s);

// Steps for `seconds` of wall time from the reset state and prints one line:
// backend=... links=... dofs=... steps=... sim=... wall=... step_us=... rtf=...
// substeps > 1: in chunks of that many steps through cfv_sim_substeps where it applies (the
// steps a window frame takes), and the line says how many steps went that way.
int cfv_sim_benchmark(cfv_sim* s, double seconds, int substeps);

// The degrees of freedom stepped: the extended chain's links, or the model's nv.
int cfv_sim_dofs(const cfv_sim* s);

// An extended chain's link world poses at the current state (computed once per state); NULL when
// the model is not extended. *xmat: the rotations.
const double* cfv_sim_ext_poses(cfv_sim* s, const double** xmat);

// Wall-clock seconds from a monotonic clock.
double cfv_now(void);

#endif  // CHAINFD_VIEWER_SIM_H
