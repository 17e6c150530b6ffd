// chainfd_fd.h: batched forward dynamics of one MuJoCo model, for NumPy users and MPC code.
//
//   chainfd_fd* f;
//   chainfd_fd_create(m, "auto", 0, 1024, &f, err, sizeof err);
//   chainfd_fd_run(f, B, qpos, qvel, qfrc, qacc, err, sizeof err);   // [B][nq], [B][nv] ...
//
// qacc = (M + armature)^-1 (qfrc - bias) for each state, qfrc being the total joint force
// (passive + actuator + applied, as MuJoCo sums it). Host arrays; a GPU back end moves them itself.
// Every call returns 0, or 1 with the reason in err (a batch size below 1, a NaN or Inf in any
// state, named, a state a back end cannot solve, a CUDA error) and qacc untouched.
#ifndef CHAINFD_FD_H
#define CHAINFD_FD_H

#include <mujoco/mujoco.h>

#include "chainfd.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct chainfd_fd chainfd_fd;

// backend: a table name (cpu.fast, cpu.cfa, cuda.abia, ...) or "auto" (the measured table's pick
// for this chain and `typical_batch` states; a GPU one only when `device` >= 0 exists).
CHAINFD_API int chainfd_fd_create(const mjModel* m, const char* backend, int device,
                                  int typical_batch, chainfd_fd** out, char* err, int err_size);
CHAINFD_API void chainfd_fd_free(chainfd_fd* f);
CHAINFD_API const char* chainfd_fd_backend(const chainfd_fd* f);
CHAINFD_API int chainfd_fd_run(chainfd_fd* f, int B, const double* qpos, const double* qvel,
                               const double* qfrc, double* qacc, char* err, int err_size);

#ifdef __cplusplus
}
#endif

#endif  // CHAINFD_FD_H
