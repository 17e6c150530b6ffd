// chain_gen: procedural chain models built with mjSpec (and, with ball=, branch= and free=, trees
// with ball joints and a floating base), plus a loader that accepts either an MJCF path or a
// "chain:..." spec string.
//
// Built with mjSpec rather than generated XML text. Note that MuJoCo 4.0.0's compiler itself
// caps body-tree depth (mjCModel::PrintTree throws "depth limit exceeded in signature
// computation" at depth 1024, world = 0), for XML and mjSpec alike, so a serial chain that
// MuJoCo can compile has at most CFD_CHAIN_MAX_MJ_LINKS links; and its compile time grows
// like n^3 (mj_setConst solves with the dense chain mass matrix per body): seconds at n = 1000.
//
// The chain hangs from the world at a height equal to its length; link0 is turned so the chain
// starts horizontal along +x and falls under gravity. Geoms are visual capsules with
// contype = conaffinity = 0; inertials are explicit (compiler inertiafromgeom = false).
// Random chains are whippy (light links next to heavy ones): with gravity, no damping and the
// default Euler step they diverge within about a second; give them damping/armature/stiffness
// or a smaller step to simulate them for long. Per-state dynamics is unaffected.

#ifndef CHAINFD_SCENES_CHAIN_GEN_H_
#define CHAINFD_SCENES_CHAIN_GEN_H_

#include <mujoco/mujoco.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CFD_CHAIN_MAX_LINKS 20000    // accepted by the parser
#define CFD_CHAIN_MAX_MJ_LINKS 1023  // compilable by MuJoCo 4.0.0 (see above)

typedef struct cfd_chain_gen {
  int n;                  // links (1 .. 20000)
  unsigned seed;          // random stream for the randomised properties
  int randomize;          // 0: regular chain (hinges alternating y/x axes, equal 0.1 m capsule
                          //    links of mass 0.1 kg); 1: random axes (aligned, slightly skewed
                          //    and fully random unit vectors), 3-D link offsets (body_pos),
                          //    joint anchors (jnt_pos != 0), masses (0.05..2), full inertia
                          //    tensors (fullinertia), random body_quat
  double slide_fraction;  // fraction of joints that are slide joints (0 = all hinges), by seed
  double damping;         // joint damping (linear coefficient); x[0.5,1.5] when randomize
  double armature;        // joint armature; x[0.5,1.5] when randomize
  double stiffness;       // joint spring stiffness; springref in [-0.5,0.5] when randomize
  int actuators;          // 0: none; 1: one per joint (a_k on j_k) cycling motor, position
                          //    (kp), velocity (kv), general with affine gain+bias, all without
                          //    activation; 2: cycle of 6 adding general actuators with
                          //    activation dynamics (dyntype filter, integrator). Gains scale
                          //    with the joint's own link inertia; no ctrl/force/act limits
  int gravity;            // 1: gravity (0 0 -9.81); 0: gravity off
  double timestep;        // 0: MuJoCo default
  int multi_joint;        // 1: every 5th body (index % 5 == 4) carries two joints about
                          //    different axes; still a serial chain
  double ball_fraction;   // fraction of the (non-slide) joints of one-joint bodies that are ball
                          //    joints (MuJoCo takes no rotation after a ball), by seed;
                          //    an actuator on a ball is a motor with a random gear (3 axes)
  double branch;          // probability (by seed) that body i > 0 hangs from a random earlier
                          //    body instead of body i-1: a kinematic tree (0: a chain)
  int free_base;          // 1: body 0 is on a free joint instead of its own joints (a floating
                          //    base), placed as the chain's root would be
  double floor;           // > 0: a plane this far below the chain's starting line, and the
                          //    links' capsules collide with it (with each other not: a rope on
                          //    a floor; pyramidal cones, condim 3, friction 1)
  double limit;           // > 0: every hinge and slide limited to +-limit (rad, m)
  double frictionloss;    // dry friction of every hinge and slide
} cfd_chain_gen;

// Regular chain of n links, gravity on, no damping/armature/springs/actuators.
void cfd_chain_gen_defaults(cfd_chain_gen* g, int n);

// Parse "chain:N" or "chain:N,key=value,..." with keys seed, random, slide, damping,
// armature, stiffness, actuators, gravity, timestep, multijoint, ball, branch, free, floor, limit,
// frictionloss.
// Returns 0 on success, nonzero with a message in err (err may be NULL).
int cfd_chain_gen_parse(const char* spec, cfd_chain_gen* g, char* err, int err_size);

// Build and compile the chain. Returns NULL with a message in err on failure, at once for
// n > CFD_CHAIN_MAX_MJ_LINKS rather than after the long compile that would fail anyway.
// Names: bodies "link0".."link{n-1}", joints "j0".., actuators "a0"..
mjModel* cfd_chain_generate(const cfd_chain_gen* g, char* err, int err_size);

// Write the chain as MJCF to path (MuJoCo's own writer, from the same mjSpec that
// cfd_chain_generate compiles). Returns 0 on success, nonzero with a message in err.
int cfd_chain_save_xml(const cfd_chain_gen* g, const char* path, char* err, int err_size);

// Load a model from an MJCF path, a binary model (.mjb, MuJoCo's own version only), or generate it
// from a "chain:..." spec.
// Returns NULL with a message in err on failure. Free with mj_deleteModel.
mjModel* cfd_load_model(const char* path_or_spec, char* err, int err_size);

// The index in m->plugin of m's instance of the engine plugin `name`, or -1; and one of that
// instance's config values (NULL where unset or empty, or where instance < 0).
int cfd_plugin_instance(const mjModel* m, const char* name);
const char* cfd_plugin_config(const mjModel* m, int instance, const char* key);

#ifdef __cplusplus
}
#endif

#endif  // CHAINFD_SCENES_CHAIN_GEN_H_
