// chainfd_rollout.h: many rollouts of one model at once, for sampling-based MPC.
//
//   chainfd_rollout* r;
//   chainfd_rollout_create(m, 0, &r, err, sizeof err);        // device 0, or -1: the CPU
//   chainfd_rollout_run(r, B, H, x0, 1, ctrl, out, 0, CHAINFD_HOST, err, sizeof err);
//   chainfd_rollout_free(r);
//
// A state is x = [qpos (n); qvel (n)], n = m->nv: qpos per dof, a hinge's or slide's qpos as MuJoCo
// has it, a free joint's position too, a ball's or free joint's orientation as the rotation vector
// of its quaternion over its three dofs (chainfd_rollout_get_state / set_state convert; for models
// of hinges and slides x is MuJoCo's qpos and qvel). A rotation vector is kept at angles up to pi:
// through pi it jumps to the equal rotation on the other side (a cost on it should be on the
// rotation); its bad-state test (NaN or past 1e10) is on the vector, MuJoCo's on the quaternion.
// init holds one state (shared_init = 1) or B; ctrl is [B][H][nu]; out receives [B][H+1][2n]
// (every step, the initial state first) or, with final_only, [B][2n]. Arrays live in host memory
// (CHAINFD_HOST) or on the rollout's device (CHAINFD_DEVICE).
// Each step has mj_step's semantics for the models accepted: chains and trees of hinges, slides,
// ball and free joints (no actuator on a ball or free joint; no free body alone in its tree under
// implicitfast, which MuJoCo solves with its gyroscopic derivative); joint springs (linear on
// hinges and slides, MuJoCo's quaternion spring on a ball) and damping; joint limits and friction
// loss of hinges and slides (MuJoCo's soft constraints, solved inside each step; not on an
// extended chain, not with a noslip pass or diagexact); gravity; actuators on joints with fixed or affine gain and none or affine bias
// (motor, position, velocity, general), no activation; Euler (with implicit joint damping) or
// implicitfast. Anything else is refused at creation with the element and the reason. The model's
// timestep, gravity and flags are read at creation: make a new rollout after changing m->opt.
// A rollout (like a chainfd_fd handle) serves one thread at a time.
// Bad states as mj_step treats them (mj_checkPos, mj_checkVel, mj_checkAcc): a qpos or qvel entry
// that is NaN or past 1e10 (mjMAXVAL) before a step, or such a qacc entry after the dynamics, is a
// warning; the instance is then reset as mj_resetData does (qpos0, qvel 0, controls 0 for the
// rest of that step) and, after a bad qacc, its dynamics taken again from there; with
// mjDSBL_AUTORESET it goes on bad instead. A joint-space system with no positive pivot counts as a
// bad qacc; a bad control (NaN or past 1e10 after clamping) is a warning too, and the step's
// forces take every control zero (mj_fwdActuation). The other instances are unaffected;
// chainfd_rollout_warnings and chainfd_rollout_instance_warnings say which instances had trouble
// (were reset, or had their controls zeroed), so that a sampler can drop them.
// chainfd_rollout_run returns 0, or 1 with the reason in err (e.g. a joint-space system that is
// singular even at qpos0); after an error out's contents are unspecified.
#ifndef CHAINFD_ROLLOUT_H
#define CHAINFD_ROLLOUT_H

#include <mujoco/mujoco.h>

#include "chainfd.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct chainfd_rollout chainfd_rollout;

// device: a CUDA device index, CHAINFD_CPU for the CPU, or CHAINFD_ALL_GPUS to split every batch
// across all visible devices (host arrays only; each device runs its share concurrently).
#define CHAINFD_CPU (-1)
#define CHAINFD_ALL_GPUS (-2)

CHAINFD_API int chainfd_rollout_create(const mjModel* m, int device, chainfd_rollout** out, char* err,
                           int err_size);
CHAINFD_API void chainfd_rollout_free(chainfd_rollout* r);
CHAINFD_API int chainfd_rollout_run(chainfd_rollout* r, int B, int H, const double* init, int shared_init,
                        const double* ctrl, double* out, int final_only, chainfd_memory where,
                        char* err, int err_size);
// Chains longer than MuJoCo compiles (MuJoCo 4.0.0 stops at body-tree depth 1023): m's chain
// extended to `links` links, link 0 kept (it hangs from the world) and links 1 .. n-1 repeated
// after it in order, each repeat hanging from the one before as link 1 hangs from link 0, with
// their joints' springs, damping and armature (a chain whose links 1 .. n-1 are alike grows as
// MuJoCo would build it longer). The state is x = [qpos (links); qvel (links)], link i's entry
// being a value of the model joint it repeats (chainfd_rollout_link_dof); the steps are those of
// chainfd_rollout_create's rollouts. m takes no actuators here (the repeats would need controls
// of their own) and needs at least 2 links, the second on a body of its own (the repeat begins a
// body); links is at most CHAINFD_MAX_EXTENDED_LINKS.
#define CHAINFD_MAX_EXTENDED_LINKS (1 << 22)  // 4,194,304 links: 1.6 GB of chain on the host
CHAINFD_API int chainfd_rollout_create_extended(const mjModel* m, int links, int device,
                                                chainfd_rollout** out, char* err, int err_size);
// The rollout's links: its state is [qpos (links); qvel (links)].
CHAINFD_API int chainfd_rollout_links(const chainfd_rollout* r);
// The model dof (qvel index) that link `link` repeats (itself in a chain that is not extended);
// -1 outside 0 .. links - 1.
CHAINFD_API int chainfd_rollout_link_dof(const chainfd_rollout* r, int link);
// The links' world poses at positions qpos (links, the state's first half): xpos [links][3] and
// xmat [links][9]
// (row-major), as MuJoCo's d->xpos, d->xmat of the link bodies (for drawing, or a cost on the tip).
CHAINFD_API void chainfd_rollout_link_poses(const chainfd_rollout* r, const double* qpos,
                                            double* xpos, double* xmat);
// The rollout state x = [qpos; qvel] of d (2 nv entries: a ball's quaternion as its rotation
// vector, above), and back (the quaternion with w >= 0).
CHAINFD_API void chainfd_rollout_get_state(const mjModel* m, const mjData* d, double* x);
CHAINFD_API void chainfd_rollout_set_state(const mjModel* m, mjData* d, const double* x);
// Page-locked host memory for the host arrays of chainfd_rollout_run: transfers from and to it run
// at the bus's full speed, where malloc'd memory is staged through a bounce buffer. Plain malloc
// where there is no GPU. Free with chainfd_host_free.
CHAINFD_API void* chainfd_host_alloc(size_t bytes);
CHAINFD_API void chainfd_host_free(void* p);
// The last run's bad-state warnings (mjWARN_BADQPOS, BADQVEL, BADQACC, BADCTRL, each one mj_step
// raises; its d->warning counters forget those raised before a reset in the same step): the total,
// cheap; and per instance into counts[B], copied from the device(s) when asked. After a failed run:
// none (B = 0).
CHAINFD_API long chainfd_rollout_warnings(const chainfd_rollout* r);
CHAINFD_API int chainfd_rollout_instance_warnings(const chainfd_rollout* r, int* counts, char* err,
                                                  int err_size);
// Device milliseconds of the last GPU run (0 on the CPU).
CHAINFD_API double chainfd_rollout_last_kernel_ms(const chainfd_rollout* r);

#ifdef __cplusplus
}
#endif

#endif  // CHAINFD_ROLLOUT_H
