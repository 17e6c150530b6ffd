// chainfd.h: the public C API of the chainfd MuJoCo plugin library (libchainfd_plugin.so).
//
// Declare the plugin in MJCF, load the library, then step with chainfd_step instead of mj_step:
//
//   <extension><plugin plugin="chainfd"><instance name="fd">
//     <config key="backend" value="auto"/>      auto | cfa | abia | jsiia | cpu
//     <config key="precision" value="double"/>  double (float is refused: every back end computes in double)
//     <config key="device" value="cpu"/>        cpu | auto | a CUDA device index (0, 1, ...)
//     <config key="fallback" value="mujoco"/>   mujoco | error
//   </instance></plugin></extension>
//
//   mj_loadPluginLibrary("build/plugin/libchainfd_plugin.so");   // or link the library
//   mjModel* m = mj_loadXML(...);  mjData* d = mj_makeData(m);
//   while (...) if (chainfd_step(m, d)) fprintf(stderr, "%s\n", chainfd_last_error());
//
// Every key is optional; the defaults are backend=auto, precision=double, device=auto (a GPU when
// this build has a GPU back end, the CPU otherwise), fallback=mujoco. Unknown keys are rejected by
// MuJoCo's compiler. Unknown values, float precision (always refused: every back end computes in
// double), a GPU device with no GPU back end (this build has CPU back ends only), a GPU back end
// named exactly (cuda.*) without a CUDA device, and a model declaring more than one chainfd
// instance are reported by chainfd_step / chainfd_forward, which then return CHAINFD_ERR_CONFIG
// and leave mjData untouched. backend=auto with a GPU device index and no GPU back end runs on the
// CPU instead and says so once (on stderr).
//
// What chainfd_step does: MuJoCo's own stage functions for everything except the mass matrix and
// the constraint solver (kinematics, tendons, transmissions, passive forces, actuation, sensors,
// energy, callbacks, warnings and bad-state resets), chainfd for qacc, and MuJoCo's integrators
// reproduced exactly: Euler (implicit joint damping as the diagonal term h*B), implicitfast (the
// diagonal velocity derivative of joint damping and joint-transmission actuators), RK4 (four
// chainfd evaluations). It matches mj_step to rounding.
//
// Kinematic trees of hinge, slide, ball and free joints are stepped. What it cannot step exactly it
// never approximates. A model the chain adapter refuses (tendon or actuator armature, flexes, a
// mocap base, ...), an option it does not reproduce (integrator implicit, sleep, history buffers,
// non-diagonal implicit terms, RK4 with a ball or free joint, ...) or a state whose constraint rows
// chainfd's solver does not take (rows under noslip_iterations > 0, diagexact, speculative or IPC
// contacts) is stepped by mj_step when fallback=mujoco (the reason printed once per mjData, and
// kept in chainfd_stats), or refused with CHAINFD_ERR_UNSUPPORTED when fallback=error: then the
// integration state (time, qpos, qvel, act, qacc_warmstart, ctrl, plugin state, ...) is untouched
// and d->qacc never holds a refused result; for a state-dependent refusal the position-dependent
// quantities (xpos, contacts, efc_*) have been recomputed. Other constraint rows (contacts with
// pyramidal or elliptic cones, limits, equalities, friction loss) are built by MuJoCo and solved
// by chainfd, which writes qacc, efc_force, efc_state, efc_b and qfrc_constraint; a solve that
// does not converge hands the step over as a back end's failure does.
//
// mjData's mass-matrix fields (M, qM, qLD) are not computed by chainfd (they keep old values),
// except that mj_makeM runs when energy is enabled or a kinetic-energy sensor exists, since
// MuJoCo's kinetic energy needs M. The chain model is built from mjModel when mjData is made
// and rebuilt at the next call (never refused) when the call's model is not the one it was built
// from: another mjModel (pointer or m->signature; one of other sizes is CHAINFD_ERR_CONFIG), or the
// same one with a parameter the chain holds edited in place (body masses, inertias and frames,
// joint axes and positions, armature, qpos0, tendon damping: compared with a copy at every call).
// Other parameters and m->opt (timestep, integrator, gravity, flags) are read at every step.
// d->timer counts steps, forward evaluations and advances as mj_step does (through mjcb_time), and MuJoCo's
// stage functions that chainfd calls count themselves; the position stage (whose parts chainfd
// calls one by one) and the mass matrix are not counted; chainfd's constraint solver counts as
// mjTIMER_CONSTRAINT.
//
// Several mjData of one model may step in several threads at once: all state is per mjData.
#ifndef CHAINFD_CHAINFD_H
#define CHAINFD_CHAINFD_H

#include <mujoco/mujoco.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define CHAINFD_API __declspec(dllexport)
#else
#define CHAINFD_API __attribute__((visibility("default")))
#endif

#define CHAINFD_PLUGIN_NAME "chainfd"

// Where the arrays of a batched call live: host memory, or the memory of the handle's CUDA device.
typedef enum { CHAINFD_HOST = 0, CHAINFD_DEVICE = 1 } chainfd_memory;

enum {
  CHAINFD_OK = 0,               // stepped (by chainfd, or by MuJoCo under fallback=mujoco)
  CHAINFD_ERR_NO_INSTANCE = 1,  // the model declares no chainfd plugin instance
  CHAINFD_ERR_CONFIG = 2,       // a config value is invalid or cannot be served
  CHAINFD_ERR_UNSUPPORTED = 3,  // fallback=error and chainfd cannot step this model or state
  CHAINFD_ERR_MEMORY = 4,       // reserved: out of memory when an instance is made is reported as
                                // CHAINFD_ERR_CONFIG, with the message
};

// Drop-in replacements for mj_forward and mj_step. 0 on success; otherwise a CHAINFD_ERR_* code,
// the message in chainfd_last_error(), and mjData as described above.
CHAINFD_API int chainfd_forward(const mjModel* m, mjData* d);
CHAINFD_API int chainfd_step(const mjModel* m, mjData* d);

// The message of the last failed call in this thread ("" when none).
CHAINFD_API const char* chainfd_last_error(void);

// How many CUDA devices chainfd's GPU back ends can use here: 0 in a build without CUDA or on a
// machine without a device (device=auto then runs on the CPU).
CHAINFD_API int chainfd_gpu_count(void);

typedef struct chainfd_stats {
  long long steps_chainfd;     // steps and forwards computed by chainfd
  long long steps_mujoco;      // steps and forwards MuJoCo computed: fallbacks (fallback=mujoco),
                               // and every call where backend "mujoco" was chosen (below)
  long long refusals;          // calls refused (fallback=error)
  const char* backend;         // the back end in use, e.g. "cpu.fast" ("" with a config error);
                               // "mujoco": backend=auto chose MuJoCo's own mj_step / mj_forward,
                               // the faster on the CPU for a chain of at most 18 dofs or a tree
                               // with nM <= 22 nv (under fallback=mujoco only; backend=cpu keeps
                               // chainfd's dynamics)
  const char* last_fallback;   // why the last fallback or refusal happened ("" when none)
} chainfd_stats;

// Counters of the chainfd instance of (m, d). 0, or CHAINFD_ERR_NO_INSTANCE. The strings stay
// valid until the next step of d.
CHAINFD_API int chainfd_get_stats(const mjModel* m, const mjData* d, chainfd_stats* stats);

// ------------------------------------------------------------------------------------------------
// Lower level: a stepper not tied to a plugin instance (the plugin keeps one per mjData). Used by
// `chainfd check --steps` to step models that do not declare the plugin.

typedef struct chainfd_config {
  const char* backend;    // NULL or "": auto. Also accepts back-end names: cpu.fast, cpu.cfa, ...
  const char* precision;  // NULL or "": double
  const char* device;     // NULL or "": auto
  const char* fallback;   // NULL or "": mujoco
} chainfd_config;

typedef struct chainfd_stepper chainfd_stepper;

// NULL with a message when the configuration is invalid (or out of memory). A model chainfd cannot
// step is not an error here: the stepper then falls back or refuses at each step.
CHAINFD_API chainfd_stepper* chainfd_stepper_create(const mjModel* m, const chainfd_config* cfg,
                                                    const char* label, char* err, int err_size);
CHAINFD_API void chainfd_stepper_free(chainfd_stepper* s);
CHAINFD_API int chainfd_stepper_forward(chainfd_stepper* s, const mjModel* m, mjData* d);
CHAINFD_API int chainfd_stepper_step(chainfd_stepper* s, const mjModel* m, mjData* d);
CHAINFD_API void chainfd_stepper_stats(const chainfd_stepper* s, chainfd_stats* stats);
// Counters and "said once" flags from src (used when mjData is copied).
CHAINFD_API void chainfd_stepper_copy_stats(chainfd_stepper* dst, const chainfd_stepper* src);

#ifdef __cplusplus
}
#endif

#endif  // CHAINFD_CHAINFD_H
