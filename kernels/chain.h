// chain.h: the chain model every algorithm works on, and the CPU algorithms.
//
// A chain is n links, one dof each, in MuJoCo's dof order; each hangs from a parent link of lower
// index or from the world, so the links form a kinematic tree (a serial chain when parent[i] is
// i - 1 throughout). A body with several MuJoCo joints becomes several links, the inner ones
// massless with identity home transform, which reproduces MuJoCo's composition exactly. A ball
// joint is three such links (CFD_LINK_BALL, then two CFD_LINK_BALL_NEXT), a free joint three
// slides along the world axes and then a ball (see joints.h for their poses and velocity terms).
// Everything is in link frames (= MuJoCo body frames). The model is plain arrays (structure of
// arrays) so that the same data can be copied to a GPU.
#ifndef CHAINFD_CHAIN_H
#define CHAINFD_CHAIN_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// What moves link i relative to its parent (joints.h):
//  CFD_LINK_SCREW:     exp(S_i q_i): a hinge, a slide, or one of a free joint's slides
//  CFD_LINK_BALL:      the first dof of a ball joint (or a free joint's rotation): the rotation
//                      exp(sum_k S_{i+k} r_k) about the joint's anchor, r = (q_i, q_i+1, q_i+2) the
//                      rotation vector (MuJoCo's quaternion through its logarithm, joints.h)
//  CFD_LINK_BALL_NEXT: the ball's second and third dofs: identity pose (home_R = I, home_p = 0;
//                      their q is the BALL link's), and a velocity term taken against the
//                      velocity before the ball
enum { CFD_LINK_SCREW = 0, CFD_LINK_BALL = 1, CFD_LINK_BALL_NEXT = 2 };

typedef struct cfd_chain {
  int n;               // links = dofs
  int* parent;         // n: the parent link (< i), -1 for the world
  int* kind;           // n: CFD_LINK_*
  double* home_R;      // n x 9: link i's rotation in its parent's frame at q = 0 (row-major)
  double* home_p;      // n x 3: link i's origin in its parent's frame at q = 0
  double* screw;       // n x 6: joint screw S_i = [w; v] in link i's frame (|w| = 1 or w = 0)
  double* inertia;     // n x 36: spatial inertia J_i about link i's origin, in link i's frame
  double* armature;    // n: joint-space diagonal term that is part of M (armature)
  double gravity[3];   // world-frame gravity (zeros when gravity is disabled)
  // where each link came from in the MuJoCo model (-1 where not applicable)
  int* body;           // n: MuJoCo body id
  int* jnt;            // n: MuJoCo joint id
  int* dof;            // n: MuJoCo dof index (qvel/qacc address)
  int* qpos;           // n: MuJoCo qpos address (a ball's three links: its quaternion's)
  double* qpos0;       // n: MuJoCo qpos0 at that address (the joint's zero; 0 for a ball's and a
                       // free joint's links, whose q is absolute)
} cfd_chain;

// Allocate / free the arrays of a chain of n links (zeroed, and serial: parent[i] = i - 1, every
// link a screw). Returns 0 on success.
int cfd_chain_alloc(cfd_chain* c, int n);
void cfd_chain_free(cfd_chain* c);

// 1 when c is a serial chain of screws (parent[i] = i - 1, no ball): what the chain-only
// algorithms (CFA, the scans, cuda.jsiia, cuda.cfa, cuda.abia's chain kernels) take.
int cfd_chain_is_serial(const cfd_chain* c);

// What the chain is, for the rules that pick a back end or kernel: a serial chain of screws, one
// chain whose links hang one from the next with ball or free joints among them (the scans and
// the sequential sweeps take it, the chain-only algorithms do not), or a branching tree.
enum { CFD_SHAPE_CHAIN = 0, CFD_SHAPE_BALL_CHAIN = 1, CFD_SHAPE_TREE = 2 };
int cfd_chain_shape(const cfd_chain* c);

// The chain's coordinates q (n) from MuJoCo's qpos: q_i = qpos - qpos0 for a screw, the rotation
// vector of the (normalised) quaternion for a ball's three links. And back: qpos entries of the
// chain's joints from q (a ball's quaternion from its rotation vector).
void cfd_chain_q_from_qpos(const cfd_chain* c, const double* qpos, double* q);
void cfd_chain_qpos_from_q(const cfd_chain* c, const double* q, double* qpos);

// The forward-dynamics problem, one state:
//   (M(q) + diag(extra_diag)) qacc = tau - bias(q, qd)
// where M includes chain->armature. extra_diag may be NULL (zero); it carries h*damping for
// implicit joint damping. tau is the total generalised force (passive, actuator, applied, and
// Cartesian forces mapped to joints).
//
// Each algorithm takes a caller-owned scratch buffer of cfd_<alg>_work_size(n) doubles and returns 0,
// or a positive code when the problem is singular for that algorithm (cfd_status_str explains it).

enum {
  CFD_OK = 0,
  CFD_ERR_SINGULAR = 1,    // a pivot of the factorisation was not positive
  CFD_ERR_MASSLESS = 2,    // a link's spatial inertia is not invertible (CFA needs it)
  CFD_ERR_ALLOC = 3,       // out of memory
  CFD_ERR_NONFINITE = 4,   // NaN or Inf in the input
  CFD_ERR_INACCURATE = 5,  // CFA's refinement did not converge: its system is too ill-conditioned
  CFD_ERR_GPU = 6,         // a CUDA call failed (cfd_gpu_fd's message says which)
};
const char* cfd_status_str(int status);

// Inverse dynamics (recursive Newton-Euler in twist/adjoint form): tau = M(q) qdd + bias(q, qd),
// without armature (as mj_rne). qdd may be NULL (bias only). Gravity is the base acceleration -g.
size_t cfd_id_work_size(int n);
int cfd_id_cpu(const cfd_chain* c, const double* q, const double* qd, const double* qdd,
               double* tau, double* work);

// Link poses and Ad matrices used by several algorithms: for each link, its pose (R, p) in the
// parent frame at q.
void cfd_link_poses(const cfd_chain* c, const double* q, double* R, double* p);

// JSIIA: M by composite rigid bodies, then Cholesky.
size_t cfd_jsiia_work_size(int n);
int cfd_fd_jsiia_cpu(const cfd_chain* c, const double* q, const double* qd, const double* tau,
                     const double* extra_diag, double* qacc, double* work);
// The joint-space inertia matrix M(q) + diag(armature) (n x n, row-major, full), for tests.
int cfd_mass_matrix_cpu(const cfd_chain* c, const double* q, double* M, double* work);

// ABIA: articulated-body inertia recursion (reference form, dense 6x6 algebra).
size_t cfd_abia_work_size(int n);
int cfd_fd_abia_cpu(const cfd_chain* c, const double* q, const double* qd, const double* tau,
                    const double* extra_diag, double* qacc, double* work);

// ABIA for one long chain as scans over blocks of about links_per_block links (aba_scan.h): the
// velocities, articulated inertias (Riccati maps), bias forces and accelerations handed between
// blocks by Hillis-Steele scans, each block's own sweeps independent of the others'. The CPU twin
// of the GPU's scan kernel (cuda/abia_scan.cu); exact like the sequential sweeps.
size_t cfd_abia_scan_work_size(int n);
int cfd_fd_abia_scan_cpu(const cfd_chain* c, int links_per_block, const double* q,
                         const double* qd, const double* tau, const double* extra_diag,
                         double* qacc, double* work);

// The split call of cuda.abia (aba_world_tau.h) on the CPU: the first half's factors (about each
// block's origin, as the GPU's world warps kernel writes them; jf: c is in joint frames, as
// aba_world.h), then the host's second half. Its CPU twin: the factors' definitions and the second
// half checked without a GPU. cfd_abia_split_factors_cpu writes one state's factors and status to
// f (cfd_awt_doubles(n)), scratch in work.
size_t cfd_abia_split_work_size(int n);
int cfd_abia_split_factors_cpu(const cfd_chain* c, int jf, const double* q, const double* qd,
                               const double* extra_diag, double* f, double* work);
int cfd_fd_abia_split_cpu(const cfd_chain* c, int jf, const double* q, const double* qd,
                          const double* tau, const double* extra_diag, double* qacc, double* work);

// CFA: constraint force algorithm with odd-even elimination of the block-tridiagonal system,
// followed by iterative refinement (see cfa_cpu.c); CFD_ERR_INACCURATE when the refinement did not
// converge (cfd_cfa_converged, cfa_blocks.h). cfd_fd_cfa_cpu_ex takes the options (NULL: the
// defaults): refine_steps (0: CFD_CFA_REFINE_STEPS; negative: none, the raw algorithm) and
// residual_ld (1: the refinement's inverse dynamics in long double, cfd_id_ld, rounded once, for
// measurements: it does not rescue long chains).
#define CFD_CFA_REFINE_STEPS 6
typedef struct cfd_cfa_options {
  int refine_steps;
  int residual_ld;
} cfd_cfa_options;
size_t cfd_cfa_work_size(int n);
int cfd_fd_cfa_cpu(const cfd_chain* c, const double* q, const double* qd, const double* tau,
                   const double* extra_diag, double* qacc, double* work);
int cfd_fd_cfa_cpu_ex(const cfd_chain* c, const cfd_cfa_options* opt, const double* q,
                      const double* qd, const double* tau, const double* extra_diag, double* qacc,
                      double* work);

// DCAe (paper 004; dca.h): divide and conquer with the articulated-body algorithm inside each
// subsystem of about links_per_subsystem consecutive links (a subsystem ends only where its last
// link has inertia about its joint), the subsystems' handle equations assembled pairwise up a
// binary tree and the boundary conditions carried down it. Unbranched chains (parent[i] = i - 1;
// hinges, slides, balls); the caller checks. The CPU twin of cuda/dca.cu. cfd_fd_dca_cpu takes
// CFD_DCA_LINKS_DEFAULT links per subsystem; _ex's work is cfd_dca_work_size_ex(n, links).
size_t cfd_dca_work_size(int n);
size_t cfd_dca_work_size_ex(int n, int links_per_subsystem);
int cfd_fd_dca_cpu(const cfd_chain* c, const double* q, const double* qd, const double* tau,
                   const double* extra_diag, double* qacc, double* work);
int cfd_fd_dca_cpu_ex(const cfd_chain* c, int links_per_subsystem, const double* q,
                      const double* qd, const double* tau, const double* extra_diag, double* qacc,
                      double* work);

// The fast CPU path: an O(n) articulated-body algorithm specialised for one-dof joints, on the
// chain re-expressed in joint frames (each link's frame on its joint axis), with 4-wide vector
// algebra (fast_cpu.c). cfd_fast_prepare writes that form of c into the head of work (once per
// chain); cfd_fd_fast_prepared then solves from it (given the same pointer: the prepared form sits
// at a 64-byte boundary inside work, so a copy of work elsewhere is not prepared), and
// cfd_fd_fast_cpu does both (for one-off calls). On a tree or with ball or free joints prepare
// returns 1 and the solves take aba_tree.h's sweeps; a screw that is neither a pure rotation nor a
// pure translation (a pitch: MuJoCo's hinges and slides never have one) has no joint frame either:
// prepare returns 1 and the solves take aba_core.h's sweeps in link frames; exact both.
size_t cfd_fast_work_size(int n);
int cfd_fast_prepare(const cfd_chain* c, double* work);
int cfd_fd_fast_prepared(const cfd_chain* c, const double* q, const double* qd, const double* tau,
                         const double* extra_diag, double* qacc, double* work);
int cfd_fd_fast_cpu(const cfd_chain* c, const double* q, const double* qd, const double* tau,
                    const double* extra_diag, double* qacc, double* work);

// The same chain in joint frames (as cfd_fast_prepare uses it): each link's frame moved onto its
// joint axis with z along it, so that every screw is e_z (angular for a hinge, linear for a slide);
// same q, same qacc. On a tree each link's home pose is taken from its parent's joint frame; a
// ball's links keep their own frames (their three screws share one). Allocates out
// (cfd_chain_free). Returns 0, 1 for a screw with pitch (no such frame), or CFD_ERR_ALLOC.
int cfd_chain_in_joint_frames(const cfd_chain* c, cfd_chain* out);

// A high-precision reference qacc (mixed-precision iterative refinement with a long-double
// residual): accurate to about 1e-15 relative even where M is ill-conditioned. For checks.
int cfd_fd_reference(const cfd_chain* c, const double* q, const double* qd, const double* tau,
                     const double* extra_diag, double* qacc);

// tau = ID(q, qd, qdd) (qdd NULL: the bias) accumulated in long double, rounded once at the end:
// the reference's residual, and CFA's with cfd_cfa_options.residual_ld.
int cfd_id_ld(const cfd_chain* c, const double* q, const double* qd, const double* qdd,
              double* tau);

// A chain of n links that repeats the links of `base` (link i is base's link i mod base->n): long
// chains beyond what MuJoCo compiles (4.0 stops at body-tree depth 1023), for GPU tests and
// benchmarks. base must be unbranched (parent[i] = i - 1; balls allowed, and n must not cut one
// apart; q of a tiled ball chain is rotation vectors, link i's entry its own). Returns 0, or
// CFD_ERR_ALLOC for those.
int cfd_chain_tile(const cfd_chain* base, int n, cfd_chain* out);

// A chain of n links that keeps base's link 0 (hanging from the world) and repeats its links
// 1 .. base->n - 1 after it, in order (link i > 0 is base's link 1 + (i - 1) mod (base->n - 1)):
// each repeat hangs from the last link of the one before as link 1 hangs from link 0, so a chain
// whose links 1 .. n-1 are alike grows longer as MuJoCo would build it. body, jnt, dof, qpos and
// qpos0 name the base link repeated. Needs a serial base (cfd_chain_is_serial) with base->n >= 2;
// returns 0, or CFD_ERR_ALLOC.
int cfd_chain_extend(const cfd_chain* base, int n, cfd_chain* out);

// 0 when every entry of x[0..n) is finite
int cfd_check_finite(const double* x, int n);

#ifdef __cplusplus
}
#endif

#endif  // CHAINFD_CHAIN_H
