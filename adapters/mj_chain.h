// mj_chain.h: MuJoCo's model and state in chainfd's chain form.
#ifndef CHAINFD_MJ_CHAIN_H
#define CHAINFD_MJ_CHAIN_H

#include <stdarg.h>

#include <mujoco/mujoco.h>

#include "chain.h"

#ifdef __cplusplus
extern "C" {
#endif

// A refusal's message into err (prefix, then fmt formatted; err may be NULL): returns 1, so that
// a check can `return cfd_refuse(...)`. The adapters, the rollouts and the stepper share it.
int cfd_refuse(char* err, int size, const char* fmt, ...);
int cfd_refuse_prefixed(char* err, int size, const char* prefix, const char* fmt, va_list ap);

// An element's name for messages: 'name' where it has one, #id where it has none (into buf).
const char* cfd_mj_name(const mjModel* m, int type, int id, char* buf, int size);

// 1 when m's joints form one serial chain of hinges and slides (cfd_chain_is_serial of its chain),
// from m alone: hinge and slide joints only, each dof's parent the dof before it.
int cfd_model_is_serial(const mjModel* m);
// cfd_chain_shape of m's chain (CFD_SHAPE_*), from m alone: one chain when every dof's parent is
// the dof before it (MuJoCo chains a ball's and a free joint's dofs so), balls when any joint is a
// ball or free joint.
int cfd_model_shape(const mjModel* m);

// 1 when joint j is a free joint alone in its tree (one body, no children): MuJoCo's implicitfast
// solves its 6 dofs with their gyroscopic velocity derivative, a 6x6 block, not a diagonal term.
int cfd_mj_free_body_alone(const mjModel* m, int j);

// Builds the chain model of m. Returns 0 on success; otherwise fills err with why the model is
// refused (naming the body, joint or element) and returns nonzero, leaving *c empty.
int cfd_chain_from_model(const mjModel* m, cfd_chain* c, char* err, int err_size);

// The numeric parameters of m that cfd_chain_from_model reads (besides m->opt): the bodies' frames,
// inertias and masses, joint axes and positions, armatures, qpos0, as (address, bytes) pairs in a
// fixed order. A copy of them tells whether an mjModel was edited in place since its chain was
// built (its structure, the ids and types, is that of the mjModel: another one is another chain).
// Writes CFD_CHAIN_MODEL_ARRAYS entries and returns how many.
#define CFD_CHAIN_MODEL_ARRAYS 12
typedef struct cfd_model_array {
  const void* data;
  size_t bytes;
} cfd_model_array;
int cfd_chain_model_arrays(const mjModel* m, cfd_model_array* out);

// The chain's state from d: q (joint coordinate relative to qpos0), qd, and tau, the total joint
// force MuJoCo itself applies: qfrc_passive + qfrc_actuator + qfrc_applied + J^T xfrc_applied.
// Needs d's kinematics, com positions (cdof), passive forces and actuation to be current
// (after mj_forward, or mj_fwdPosition + mj_fwdVelocity + mj_fwdActuation).
// work: m->nbody * 6 doubles.
void cfd_state_from_data(const mjModel* m, const mjData* d, const cfd_chain* c, double* q,
                         double* qd, double* tau, double* work);

// q and qd alone (they need nothing computed).
void cfd_state_q_qd(const mjData* d, const cfd_chain* c, double* q, double* qd);

// The joint forces of xfrc_applied alone (added into tau), through MuJoCo's cdof: for each body the
// wrench about its tree's centre of mass, summed over the subtree. work: m->nbody * 6 doubles.
void cfd_xfrc_to_joints(const mjModel* m, const mjData* d, const cfd_chain* c, double* tau,
                        double* work);

#ifdef __cplusplus
}
#endif

#endif  // CHAINFD_MJ_CHAIN_H
