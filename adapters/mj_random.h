// mj_random.h: seeded random states of a MuJoCo model, for checks, tests and benchmarks.
#ifndef CHAINFD_MJ_RANDOM_H
#define CHAINFD_MJ_RANDOM_H

#include <stdint.h>

#include <mujoco/mujoco.h>

typedef struct cfd_rng {
  uint64_t s;
} cfd_rng;

static inline uint64_t cfd_rng_next(cfd_rng* r) {  // splitmix64
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// uniform in [lo, hi)
static inline double cfd_rng_uniform(cfd_rng* r, double lo, double hi) {
  return lo + (hi - lo) * (double)(cfd_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

enum {
  CFD_RANDOM_QPOS = 1 << 0,   // hinge: qpos0 + U(-pi, pi); slide: qpos0 + U(-0.5, 0.5)
  CFD_RANDOM_QVEL = 1 << 1,   // U(-2, 2)
  CFD_RANDOM_CTRL = 1 << 2,   // in ctrlrange when limited, else U(-1, 1); act U(0, 1)
  CFD_RANDOM_QFRC = 1 << 3,   // qfrc_applied U(-1, 1)
  CFD_RANDOM_XFRC = 1 << 4,   // xfrc_applied U(-1, 1) on every body
  CFD_RANDOM_ALL = 0x1f,
};

// Writes a random state into d (only the fields named by what; others left as they are).
void cfd_random_state(const mjModel* m, mjData* d, cfd_rng* r, int what);

#endif  // CHAINFD_MJ_RANDOM_H
