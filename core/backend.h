// backend.h: every forward-dynamics back end behind one interface, and a solver that runs one of
// them on MuJoCo's model and state.
#ifndef CHAINFD_BACKEND_H
#define CHAINFD_BACKEND_H

#include <stddef.h>

#include <mujoco/mujoco.h>

#include "chain.h"
#include "gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int (*cfd_fd_fn)(const cfd_chain* c, const double* q, const double* qd, const double* tau,
                         const double* extra_diag, double* qacc, double* work);

typedef struct cfd_backend {
  const char* name;         // as given on the command line: cpu.fast, cpu.abia, cpu.jsiia, cpu.cfa
  const char* description;
  size_t (*work_size)(int n);
  cfd_fd_fn fd;
  int (*prepare)(const cfd_chain* c, double* work);  // into work once, before fd reads it (may be NULL)
  int needs_link_mass;      // every link's spatial inertia must be invertible (CFA)
  int needs_serial;         // 1: a serial chain of hinges and slides only (cfd_chain_is_serial);
                            // 2: unbranched, balls allowed (parent[i] = i - 1)
  int gpu_algorithm;        // -1: a CPU back end; else the cfd_gpu_algorithm it runs (fd NULL)
} cfd_backend;

int cfd_backend_count(void);
const cfd_backend* cfd_backend_get(int i);
const cfd_backend* cfd_backend_find(const char* name);  // NULL when unknown

// Whether backend b can run chain c (and m, for naming): 0, or nonzero with the reason in why.
int cfd_backend_supports(const cfd_backend* b, const mjModel* m, const cfd_chain* c, char* why,
                         int why_size);
// A GPU context for back end b (a cuda.* one) on chain c of m: refused as cfd_backend_supports
// refuses (naming the joint and body), else cfd_gpu_create's. 0, or 1 with err set.
int cfd_backend_gpu_create(const cfd_backend* b, const mjModel* m, const cfd_chain* c, int device,
                           cfd_gpu** out, char* err, int err_size);

// The chain model of one mjModel plus one back end's scratch, for one state at a time.
typedef struct cfd_solver cfd_solver;

// NULL with a message naming the element when the model or back end is refused. GPU back ends
// (cuda.*) run one state per call on CUDA device `device` (cfd_solver_create: device 0).
cfd_solver* cfd_solver_create(const mjModel* m, const char* backend, char* err, int err_size);
cfd_solver* cfd_solver_create_on(const mjModel* m, const char* backend, int device, char* err,
                                 int err_size);
void cfd_solver_free(cfd_solver* s);
const cfd_chain* cfd_solver_chain(const cfd_solver* s);
const cfd_backend* cfd_solver_backend(const cfd_solver* s);

// qacc (nv) for d's state: d's kinematics, com positions, passive forces and actuation must be
// current (as after mj_forward). extra_diag (nv, may be NULL) is added to M's diagonal.
// Returns 0, or nonzero with a message; qacc is written only on success.
int cfd_solver_qacc(cfd_solver* s, const mjModel* m, const mjData* d, const double* extra_diag,
                    double* qacc, char* err, int err_size);

// The same from the chain's own state vectors (link order), for benchmarks and tests.
int cfd_solver_fd(cfd_solver* s, const double* q, const double* qd, const double* tau,
                  const double* extra_diag, double* qacc);
// Both qacc (no extra diagonal) and qacc_diag (extra_diag added) for one state: on cuda.abia and
// cuda.cfa one batch of two, which costs about one solve; elsewhere two solves. Same statuses as
// cfd_solver_fd; on failure either may have been written.
int cfd_solver_fd2(cfd_solver* s, const double* q, const double* qd, const double* tau,
                   const double* extra_diag, double* qacc, double* qacc_diag);
// cfd_solver_fd / cfd_solver_fd2 in two halves, for the GPU back ends that gain from it (cuda.cfa,
// whose kinematics, bias forces and elimination factors need no forces; cuda.abia up to 256 links,
// whose articulated inertias need none either, the sweeps that take tau then run on the host:
// cfd_gpu_fd_begin in kernels/gpu.h): cfd_solver_begin takes
// the state (and, with extra_diag, asks for fd2's two solves) and starts the GPU, then the caller
// computes the forces; cfd_solver_finish takes them and gives what fd or fd2 would. q, qd and
// extra_diag are given again, as they are now: if any changed since begin, the solve is redone
// from them. begin returns 0 when started, nonzero when nothing is under way (a back end that does
// not split, a non-finite state, a GPU failure): then use cfd_solver_fd / fd2. A started begin
// ends in finish or cancel (a begin on a solver with one still under way cancels that one first).
int cfd_solver_begin(cfd_solver* s, const double* q, const double* qd, const double* extra_diag);
int cfd_solver_finish(cfd_solver* s, const double* q, const double* qd, const double* tau,
                      const double* extra_diag, double* qacc, double* qacc_diag);
void cfd_solver_cancel(cfd_solver* s);
// Whether cfd_solver_begin can start anything on this back end (cfd_gpu_fd_splits).
int cfd_solver_splits(const cfd_solver* s);

// Whether the back end runs on a GPU.
int cfd_solver_is_gpu(const cfd_solver* s);
// The device time of the last GPU call, in ms (cfd_gpu_last_kernel_ms; 0 on a CPU back end, or
// where calls are not timed: cfd_solver_time_kernels, off by default).
double cfd_solver_kernel_ms(const cfd_solver* s);
void cfd_solver_time_kernels(cfd_solver* s, int on);
// The GPU context's tuning (cfd_gpu_set_tuning; NULL: the defaults). 0 on a CPU back end.
int cfd_solver_set_tuning(cfd_solver* s, const cfd_gpu_tuning* t, char* err, int err_size);
// What a nonzero cfd_solver_fd status means, in words (for CFD_ERR_GPU: the CUDA layer's message).
const char* cfd_solver_error(const cfd_solver* s, int status);

// q and qd of d alone, in link order, into buffers of their own (valid until the next call).
void cfd_solver_gather_q_qd(cfd_solver* s, const mjData* d, const double** q, const double** qd);

// The state vectors of d in link order, into the solver's buffers (valid until the next call).
void cfd_solver_gather(cfd_solver* s, const mjModel* m, const mjData* d, const double** q,
                       const double** qd, const double** tau);

#ifdef __cplusplus
}
#endif

#endif  // CHAINFD_BACKEND_H
