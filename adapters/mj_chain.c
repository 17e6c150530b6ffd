// mjModel -> chain model.
//
// Walks MuJoCo's bodies in order (parents before children). A body with no joint is welded to the
// link that owns its parent: its frame is kept relative to that link and its inertia merged into
// the link's (exactly, as a spatial inertia in the link frame). A body with k hinge/slide joints
// becomes k links: the first carries the body's home transform from the owner link, the others an
// identity transform, and the last the body's inertia; this is MuJoCo's own composition
// M exp(S_1 q_1) exp(S_2 q_2)... of joints in one body. A ball joint becomes three links, a free
// joint six (joints.h). Each body's first link hangs from the link that owns its parent body (the
// world: -1), so the links form MuJoCo's kinematic tree, in its dof order.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cfd_math.h"
#include "mj_chain.h"

const char* cfd_mj_name(const mjModel* m, int type, int id, char* buf, int size) {
  if (!m || id < 0) {  // a link of a tiled or extended chain: no element of its own
    snprintf(buf, size, "(none)");
    return buf;
  }
  const char* nm = mj_id2name(m, type, id);
  if (nm && nm[0]) snprintf(buf, size, "'%s'", nm);
  else snprintf(buf, size, "#%d", id);
  return buf;
}

int cfd_refuse_prefixed(char* err, int size, const char* prefix, const char* fmt, va_list ap) {
  if (!err || size <= 0) return 1;
  int len = snprintf(err, size, "%s", prefix);
  if (len >= 0 && len < size) vsnprintf(err + len, size - len, fmt, ap);
  return 1;
}

int cfd_refuse(char* err, int size, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  cfd_refuse_prefixed(err, size, "", fmt, ap);
  va_end(ap);
  return 1;
}


// Spatial inertia of body b in a frame in which b's frame has pose (R, p).
static void body_inertia_in(const mjModel* m, int b, const double R[9], const double p[3],
                            double J[36]) {
  double Ri[9], Rc[9], c[3], Ic[9];
  cfd_quat2mat(m->body_iquat + 4 * b, Ri);
  cfd_mat3_mul(R, Ri, Rc);  // principal axes in the target frame
  cfd_rot(R, m->body_ipos + 3 * b, c);
  for (int k = 0; k < 3; k++) c[k] += p[k];
  const double* d = m->body_inertia + 3 * b;
  for (int r = 0; r < 3; r++)
    for (int k = 0; k < 3; k++)
      Ic[3 * r + k] = Rc[3 * r] * d[0] * Rc[3 * k] + Rc[3 * r + 1] * d[1] * Rc[3 * k + 1] +
                      Rc[3 * r + 2] * d[2] * Rc[3 * k + 2];
  cfd_spatial_inertia(m->body_mass[b], c, Ic, J);
}

int cfd_mj_free_body_alone(const mjModel* m, int j) {
  int b = m->jnt_bodyid[j], adr = m->jnt_dofadr[j];
  return m->jnt_type[j] == mjJNT_FREE && m->body_jntnum[b] == 1 &&
         m->tree_dofnum[m->dof_treeid[adr]] == 6 && m->body_subtreemass[b] == m->body_mass[b];
}

int cfd_model_shape(const mjModel* m) {
  for (int i = 0; i < m->nv; i++)
    if (m->dof_parentid[i] != i - 1) return CFD_SHAPE_TREE;
  for (int j = 0; j < m->njnt; j++)
    if (m->jnt_type[j] != mjJNT_HINGE && m->jnt_type[j] != mjJNT_SLIDE) return CFD_SHAPE_BALL_CHAIN;
  return CFD_SHAPE_CHAIN;
}

int cfd_model_is_serial(const mjModel* m) { return cfd_model_shape(m) == CFD_SHAPE_CHAIN; }

int cfd_chain_model_arrays(const mjModel* m, cfd_model_array* out) {
  size_t nb = (size_t)m->nbody, nj = (size_t)m->njnt, d8 = sizeof(mjtNum);
  const cfd_model_array arrays[CFD_CHAIN_MODEL_ARRAYS] = {
      {m->body_pos, 3 * nb * d8},   {m->body_quat, 4 * nb * d8},   {m->body_ipos, 3 * nb * d8},
      {m->body_iquat, 4 * nb * d8}, {m->body_inertia, 3 * nb * d8}, {m->body_mass, nb * d8},
      {m->jnt_axis, 3 * nj * d8},   {m->jnt_pos, 3 * nj * d8},
      {m->dof_armature, (size_t)m->nv * d8}, {m->qpos0, (size_t)m->nq * d8},
      {m->tendon_armature, (size_t)m->ntendon * d8}, {m->actuator_armature, (size_t)m->nu * d8}};
  memcpy(out, arrays, sizeof arrays);
  return CFD_CHAIN_MODEL_ARRAYS;
}

int cfd_chain_from_model(const mjModel* m, cfd_chain* c, char* err, int err_size) {
  char nb[128], nj[128], nx[128];
  memset(c, 0, sizeof(*c));
  if (err && err_size > 0) err[0] = 0;

  if (m->nv == 0) return cfd_refuse(err, err_size, "the model has no joints: nothing to simulate");
  for (int t = 0; t < m->ntendon; t++)
    if (m->tendon_armature[t] != 0)
      return cfd_refuse(err, err_size,
                    "tendon %s has armature: it adds off-diagonal terms to M, which chainfd does not model",
                    cfd_mj_name(m, mjOBJ_TENDON, t, nx, sizeof nx));
  if (m->nflex > 0)
    return cfd_refuse(err, err_size, "flex %s: deformable objects are not chains",
                  cfd_mj_name(m, mjOBJ_FLEX, 0, nx, sizeof nx));
  for (int a = 0; a < m->nu; a++)
    if (m->actuator_armature[a] != 0)
      return cfd_refuse(err, err_size,
                    "actuator %s has armature: chainfd reads armature from dof_armature only",
                    cfd_mj_name(m, mjOBJ_ACTUATOR, a, nx, sizeof nx));
  int nbody = m->nbody;
  int* owner = malloc(sizeof(int) * nbody);          // link owning each body; -1: the world
  double* inR = malloc(sizeof(double) * 9 * nbody);  // body frame in its owner's frame
  double* inp = malloc(sizeof(double) * 3 * nbody);
  if (!owner || !inR || !inp || cfd_chain_alloc(c, m->nv)) {
    free(owner); free(inR); free(inp);
    return cfd_refuse(err, err_size, "out of memory building the chain model (%d dofs)", m->nv);
  }
  static const double I3[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  owner[0] = -1;
  memcpy(inR, I3, sizeof(I3));
  memset(inp, 0, 3 * sizeof(double));

  int status = 0, n = 0;
  for (int b = 1; b < nbody && !status; b++) {
    int parent = m->body_parentid[b];
    double Rl[9], Rb[9], pb[3];
    cfd_quat2mat(m->body_quat + 4 * b, Rl);
    cfd_se3_mul(inR + 9 * parent, inp + 3 * parent, Rl, m->body_pos + 3 * b, Rb, pb);
    int own = owner[parent];

    if (m->body_jntnum[b] == 0) {  // welded: merge into the owner link
      owner[b] = own;
      memcpy(inR + 9 * b, Rb, sizeof(Rb));
      memcpy(inp + 3 * b, pb, sizeof(pb));
      if (own >= 0) {
        double J[36];
        body_inertia_in(m, b, Rb, pb, J);
        for (int k = 0; k < 36; k++) c->inertia[36 * own + k] += J[k];
      }
      continue;
    }
    int mocap = m->body_mocapid[b] >= 0;  // a mocap body anywhere above moves the base
    for (int a = parent; a > 0 && !mocap; a = m->body_parentid[a]) mocap = m->body_mocapid[a] >= 0;
    if (mocap) {
      status = cfd_refuse(err, err_size, "body %s has joints and a mocap ancestor: the base must be fixed",
                      cfd_mj_name(m, mjOBJ_BODY, b, nb, sizeof nb));
      break;
    }
    for (int k = 0; k < m->body_jntnum[b]; k++) {
      int j = m->body_jntadr[b] + k, t = m->jnt_type[j], first = n;
      int links = t == mjJNT_FREE ? 6 : t == mjJNT_BALL ? 3 : 1;
      if (t == mjJNT_FREE && (k > 0 || own >= 0)) {
        status = cfd_refuse(err, err_size, "joint %s of body %s is a free joint below a moving "
                            "body or after another joint: MuJoCo places free joints in world",
                            cfd_mj_name(m, mjOBJ_JOINT, j, nj, sizeof nj),
                            cfd_mj_name(m, mjOBJ_BODY, b, nb, sizeof nb));
        break;
      }
      for (int l = 0; l < links; l++) {
        int i = n++;
        double* S = c->screw + 6 * i;
        const double* a = m->jnt_axis + 3 * j;
        double e[3] = {l % 3 == 0, l % 3 == 1, l % 3 == 2};  // a ball's or free joint's axis
        c->parent[i] = i == first ? (k == 0 ? own : first - 1) : i - 1;
        c->kind[i] = CFD_LINK_SCREW;
        if (t == mjJNT_HINGE) {  // S = [a; p x a]
          S[0] = a[0]; S[1] = a[1]; S[2] = a[2];
          cfd_cross(m->jnt_pos + 3 * j, a, S + 3);
        } else if (t == mjJNT_SLIDE) {  // S = [0; a]
          S[3] = a[0]; S[4] = a[1]; S[5] = a[2];
        } else if (t == mjJNT_FREE && l < 3) {  // the world axes, q the position
          S[3 + l] = 1;
        } else {  // a rotation about the anchor (a free joint's: the body origin)
          S[0] = e[0]; S[1] = e[1]; S[2] = e[2];
          if (t == mjJNT_BALL) cfd_cross(m->jnt_pos + 3 * j, e, S + 3);
          c->kind[i] = l % 3 == 0 ? CFD_LINK_BALL : CFD_LINK_BALL_NEXT;
        }
        // the body's home pose on its first link (a free joint's pose is its qpos: identity)
        int home = k == 0 && i == first && t != mjJNT_FREE;
        memcpy(c->home_R + 9 * i, home ? Rb : I3, 9 * sizeof(double));
        if (home) memcpy(c->home_p + 3 * i, pb, 3 * sizeof(double));
        int dof = m->jnt_dofadr[j] + l, adr = m->jnt_qposadr[j];
        c->armature[i] = m->dof_armature[dof];
        c->body[i] = b;
        c->jnt[i] = j;
        c->dof[i] = dof;
        c->qpos[i] = t == mjJNT_FREE ? (l < 3 ? adr + l : adr + 3) : adr;
        c->qpos0[i] = t == mjJNT_HINGE || t == mjJNT_SLIDE ? m->qpos0[adr] : 0;
      }
    }
    if (status) break;
    owner[b] = n - 1;
    memcpy(inR + 9 * b, I3, sizeof(I3));
    memset(inp + 3 * b, 0, 3 * sizeof(double));
    body_inertia_in(m, b, I3, inp + 3 * b, c->inertia + 36 * (n - 1));
  }
  free(owner); free(inR); free(inp);
  if (!status && n != m->nv)
    status = cfd_refuse(err, err_size, "internal: %d links for %d dofs", n, m->nv);
  for (int i = 0; i < n && !status; i++)  // links are dofs in MuJoCo's order: vectors need no permutation
    if (c->dof[i] != i) status = cfd_refuse(err, err_size, "internal: link %d is dof %d", i, c->dof[i]);
  if (status) {
    cfd_chain_free(c);
    return status;
  }
  int gravity = !(m->opt.disableflags & mjDSBL_GRAVITY);
  for (int k = 0; k < 3; k++) c->gravity[k] = gravity ? m->opt.gravity[k] : 0;
  return 0;
}
