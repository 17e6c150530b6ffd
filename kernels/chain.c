// The chain model's storage: allocation, and chains made of another's links (tiled for the
// benchmarks and tests, extended past the length MuJoCo compiles for the extended rollouts).
#include <stdlib.h>
#include <string.h>

#include "chain.h"
#include "joints.h"

int cfd_chain_alloc(cfd_chain* c, int n) {
  memset(c, 0, sizeof(*c));
  c->n = n;
  size_t m = n > 0 ? (size_t)n : 1;
  c->home_R = calloc(9 * m, sizeof(double));
  c->home_p = calloc(3 * m, sizeof(double));
  c->screw = calloc(6 * m, sizeof(double));
  c->inertia = calloc(36 * m, sizeof(double));
  c->armature = calloc(m, sizeof(double));
  c->qpos0 = calloc(m, sizeof(double));
  c->body = calloc(m, sizeof(int));
  c->jnt = calloc(m, sizeof(int));
  c->dof = calloc(m, sizeof(int));
  c->qpos = calloc(m, sizeof(int));
  c->parent = malloc(m * sizeof(int));
  c->kind = calloc(m, sizeof(int));
  if (c->parent)
    for (int i = 0; i < n; i++) c->parent[i] = i - 1;
  if (!c->parent || !c->kind || !c->home_R || !c->home_p || !c->screw || !c->inertia || !c->armature || !c->qpos0 ||
      !c->body || !c->jnt || !c->dof || !c->qpos) {
    cfd_chain_free(c);
    return CFD_ERR_ALLOC;
  }
  return CFD_OK;
}

void cfd_chain_free(cfd_chain* c) {
  free(c->home_R); free(c->home_p); free(c->screw); free(c->inertia); free(c->armature);
  free(c->qpos0); free(c->body); free(c->jnt); free(c->dof); free(c->qpos);
  free(c->parent); free(c->kind);
  memset(c, 0, sizeof(*c));
}

// out's link i: a copy of base's link k (its geometry, inertia and armature)
static void copy_link(cfd_chain* out, size_t i, const cfd_chain* base, size_t k) {
  memcpy(out->home_R + 9 * i, base->home_R + 9 * k, 9 * sizeof(double));
  memcpy(out->home_p + 3 * i, base->home_p + 3 * k, 3 * sizeof(double));
  memcpy(out->screw + 6 * i, base->screw + 6 * k, 6 * sizeof(double));
  memcpy(out->inertia + 36 * i, base->inertia + 36 * k, 36 * sizeof(double));
  out->armature[i] = base->armature[k];
  out->kind[i] = base->kind[k];
}

int cfd_chain_is_serial(const cfd_chain* c) {
  for (int i = 0; i < c->n; i++)
    if (c->parent[i] != i - 1 || c->kind[i] != CFD_LINK_SCREW) return 0;
  return 1;
}

int cfd_chain_shape(const cfd_chain* c) {
  int ball = 0;
  for (int i = 0; i < c->n; i++) {
    if (c->parent[i] != i - 1) return CFD_SHAPE_TREE;
    ball |= c->kind[i] != CFD_LINK_SCREW;
  }
  return ball ? CFD_SHAPE_BALL_CHAIN : CFD_SHAPE_CHAIN;
}

// a chain whose links hang one from the next (balls allowed): what tiling repeats
static int is_unbranched(const cfd_chain* c) {
  for (int i = 0; i < c->n; i++)
    if (c->parent[i] != i - 1) return 0;
  return 1;
}

void cfd_chain_q_from_qpos(const cfd_chain* c, const double* qpos, double* q) {
  for (int i = 0; i < c->n; i++) {
    if (c->kind[i] == CFD_LINK_SCREW) q[i] = qpos[c->qpos[i]] - c->qpos0[i];
    else if (c->kind[i] == CFD_LINK_BALL) cfd_quat_log(qpos + c->qpos[i], q + i);
  }
}

void cfd_chain_qpos_from_q(const cfd_chain* c, const double* q, double* qpos) {
  for (int i = 0; i < c->n; i++) {
    if (c->kind[i] == CFD_LINK_SCREW) qpos[c->qpos[i]] = q[i] + c->qpos0[i];
    else if (c->kind[i] == CFD_LINK_BALL) cfd_quat_exp(q + i, qpos + c->qpos[i]);
  }
}

int cfd_chain_tile(const cfd_chain* base, int n, cfd_chain* out) {
  if (base->n < 1 || n < 1 || !is_unbranched(base)) return CFD_ERR_ALLOC;
  if (cfd_chain_alloc(out, n)) return CFD_ERR_ALLOC;
  for (int i = 0; i < n; i++) {
    copy_link(out, (size_t)i, base, (size_t)(i % base->n));
    out->body[i] = out->jnt[i] = -1;
    out->dof[i] = out->qpos[i] = i;
  }
  if (out->kind[n - 1] != CFD_LINK_SCREW && (n < 3 || out->kind[n - 3] != CFD_LINK_BALL)) {
    cfd_chain_free(out);  // n cuts a ball's three links apart
    return CFD_ERR_ALLOC;
  }
  memcpy(out->gravity, base->gravity, sizeof(out->gravity));
  return CFD_OK;
}

int cfd_chain_extend(const cfd_chain* base, int n, cfd_chain* out) {
  if (base->n < 2 || n < 1 || !cfd_chain_is_serial(base)) return CFD_ERR_ALLOC;
  if (cfd_chain_alloc(out, n)) return CFD_ERR_ALLOC;
  for (size_t i = 0; i < (size_t)n; i++) {
    size_t k = i == 0 ? 0 : 1 + (i - 1) % (size_t)(base->n - 1);
    copy_link(out, i, base, k);
    out->body[i] = base->body[k];
    out->jnt[i] = base->jnt[k];
    out->dof[i] = base->dof[k];
    out->qpos[i] = base->qpos[k];
    out->qpos0[i] = base->qpos0[k];
  }
  memcpy(out->gravity, base->gravity, sizeof(out->gravity));
  return CFD_OK;
}

const char* cfd_status_str(int status) {
  switch (status) {
    case CFD_OK: return "ok";
    case CFD_ERR_SINGULAR: return "the joint-space system is singular (a pivot is not positive)";
    case CFD_ERR_MASSLESS: return "a link has a singular spatial inertia (CFA needs every link's inverse)";
    case CFD_ERR_ALLOC: return "out of memory";
    case CFD_ERR_NONFINITE: return "the state holds NaN or Inf";
    case CFD_ERR_GPU: return "a CUDA call failed";
    case CFD_ERR_INACCURATE:
      return "CFA did not converge to double accuracy on this chain (its constraint-force system is "
             "too ill-conditioned); use abia or jsiia";
    default: return "unknown error";
  }
}
