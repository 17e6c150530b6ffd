// aba_world_tree.h: the articulated-body algorithm in world coordinates on a kinematic tree with
// ball and free joints, one state: aba_world.h's sweeps (articulated inertias add, no 6x6
// congruence; 7 numbers a link kept between sweeps, poses recomputed or walked back) extended to
// trees. For the GPU's thread-per-instance tree kernel (cuda/abia.cu) and its CPU check.
//
// Links come in MuJoCo's order, a depth-first walk of the tree, so a link's first child is the
// next link, and a link whose next link does not hang from it ends a branch. The sweeps run over
// the links in order, as on a chain; only where the order leaves a branch do they need what they
// cannot carry along, and that goes to a slot (cfd_wtree_plan):
//   - a link with two or more children: its pose, velocity and acceleration, which the forward
//     sweeps take up again at each later child; and the articulated inertia and bias force that
//     those children pass back, which the backward sweep adds in when it reaches the link;
//   - a link that ends a branch: its pose and velocity, which the backward sweep (walking poses
//     back from the tip, T_parent = T T_loc^-1) cannot reach from the next link.
// A tree has few of these (a humanoid: the torso and the end of each limb but the last).
//
// Ball joints (joints.h): the velocity term of a ball's second and third links is taken against
// the velocity before the ball, V_i - sum of the ball's links' S_k qd_k up to i, all in the world.
// Rounding grows with (extent / link size)^2 about the sweeps' origin; the origin is put at the
// first root body's frame (a floating base's position is its qpos, which may be far from zero),
// and the kernel takes trees of at most ABIA_WT_MAX_N links (cuda/abia.cu).
#ifndef CHAINFD_ABA_WORLD_TREE_H
#define CHAINFD_ABA_WORLD_TREE_H

#include "aba_world.h"
#include "joints.h"

// per link: 0-5 U / d, 6 u / d; per slot: 0-8 R, 9-11 p, 12-17 V, 18-23 a, 24-44 IA (A, B, C),
// 45-50 pA
enum { CFD_WTREE_LINK_DOUBLES = 7, CFD_WTREE_SLOT_DOUBLES = 51 };

// The last link of the first root body's run of links (its joints): the sweeps' origin
CFD_HD int cfd_wtree_origin_link(const cfd_chain* c) {
  int r = 0;
  if (!c->body || c->body[0] < 0) return 0;  // a tiled chain: no bodies
  while (r + 1 < c->n && c->parent[r + 1] == r && c->body[r + 1] == c->body[0]) r++;
  return r;
}

// The plan of the sweeps, n + 1 entries: slot[i] the slot of link i (-1: none), as above, and
// slot[n] the origin's link (cfd_wtree_origin_link). Returns the number of slots; the scratch is then
// CFD_WTREE_LINK_DOUBLES * n + CFD_WTREE_SLOT_DOUBLES * slots entries.
CFD_HD int cfd_wtree_plan(const cfd_chain* c, int* slot) {
  int n = c->n, k = 0;
  for (int i = 0; i < n; i++) slot[i] = -1;
  for (int i = 1; i < n; i++) {
    int p = c->parent[i];
    if (p == i - 1) continue;
    if (p >= 0 && slot[p] < 0) slot[p] = k++;  // i is p's second child or later
    if (slot[i - 1] < 0) slot[i - 1] = k++;    // link i - 1 ends a branch
  }
  slot[n] = cfd_wtree_origin_link(c);
  return k;
}

// The world screws of links g .. i of one ball (they share link i's pose (R, p)) summed with their
// velocities: the ball's motion up to link i
CFD_HD void cfd_wtree_ball_motion(const cfd_chain* c, int g, int i, const double R[9],
                                const double p[3], const double* qd, long vstride, double m[6]) {
  for (int k = 0; k < 6; k++) m[k] = 0;
  for (int j = g; j <= i; j++) {
    double Sw[6], x = qd[j * vstride];
    cfd_abw_screw(c->screw + 6 * j, 0, R, p, Sw);  // (a ball's: never in joint frames)
    for (int k = 0; k < 6; k++) m[k] += Sw[k] * x;
  }
}

// Link i's pose in its parent. jf: c is in joint frames (cfd_chain_in_joint_frames), where a
// hinge's or slide's pose is H Rz(q) or H Tz(q), a few multiply-adds (a ball's links keep theirs).
CFD_HD void cfd_wtree_local(const cfd_chain* c, int jf, int i, const double* q, long vstride,
                            double R[9], double p[3]) {
  if (jf && c->kind[i] == CFD_LINK_SCREW) {
    double x = q[i * vstride], s = 0, co = 1;
    int slide = c->screw[6 * i + 2] == 0;
    if (!slide) cfd_sincos(x, &s, &co);
    cfd_abw_local_jf(c->home_R + 9 * i, c->home_p + 3 * i, slide, x, s, co, R, p);
  } else {
    cfd_link_pose(c, i, q, vstride, R, p);
  }
}

// Link i's world screw at its world pose (R, p)
CFD_HD void cfd_wtree_screw(const cfd_chain* c, int jf, int i, const double R[9], const double p[3],
                            double Sw[6]) {
  cfd_abw_screw(c->screw + 6 * i, jf && c->kind[i] == CFD_LINK_SCREW, R, p, Sw);
}

// Link i's world pose (R, p) from its parent's (Rp, pp), and with root links (parent -1) placed
// about the origin o.
CFD_HD void cfd_wtree_pose(const cfd_chain* c, int jf, int i, const double* q, long vstride,
                           const double Rp[9], const double pp[3], const double o[3], double R[9],
                           double p[3]) {
  double Rl[9], pl[3];
  cfd_wtree_local(c, jf, i, q, vstride, Rl, pl);
  if (c->parent[i] < 0) {
    for (int k = 0; k < 9; k++) R[k] = Rl[k];
    for (int k = 0; k < 3; k++) p[k] = pl[k] - o[k];
  } else {
    cfd_se3_mul(Rp, pp, Rl, pl, R, p);
  }
}

// qacc for one state; vectors entry j at [j * vstride], scratch entry k at work[k * stride];
// slot: cfd_wtree_plan's; jf: c is in joint frames (cfd_wtree_local). CFD_OK or CFD_ERR_SINGULAR.
CFD_HD int cfd_aba_world_tree(const cfd_chain* c, int jf, const int* slot, const double* q,
                              const double* qd, const double* tau, const double* extra_diag,
                              double* qacc, long vstride, double* work, long stride) {
  const int n = c->n, r = slot[n];
  double* sw = work + (long)CFD_WTREE_LINK_DOUBLES * n * stride;  // the slots
#define W(i, k) work[((long)(i) * CFD_WTREE_LINK_DOUBLES + (k)) * stride]
#define S(s, k) sw[((long)(s) * CFD_WTREE_SLOT_DOUBLES + (k)) * stride]
  // the origin: the world position of link r's frame (links 0 .. r are one body's joints)
  const double zero[3] = {0, 0, 0};
  double o[3], R[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1}, p[3] = {0, 0, 0}, V[6] = {0, 0, 0, 0, 0, 0};
  for (int i = 0; i <= r; i++) {
    double Rn[9], pn[3];
    cfd_wtree_pose(c, jf, i, q, vstride, R, p, zero, Rn, pn);
    for (int k = 0; k < 9; k++) R[k] = Rn[k];
    for (int k = 0; k < 3; k++) p[k] = pn[k];
  }
  for (int k = 0; k < 3; k++) o[k] = p[k];

  // out: world poses and velocities; slots keep theirs (and start their sums at zero)
  for (int i = 0; i < n; i++) {
    int par = c->parent[i];
    double Rp[9], pp[3], Vp[6] = {0, 0, 0, 0, 0, 0};
    if (par >= 0 && par != i - 1) {
      int s = slot[par];
      for (int k = 0; k < 9; k++) Rp[k] = S(s, k);
      for (int k = 0; k < 3; k++) pp[k] = S(s, 9 + k);
      for (int k = 0; k < 6; k++) Vp[k] = S(s, 12 + k);
    } else if (par >= 0) {
      for (int k = 0; k < 9; k++) Rp[k] = R[k];
      for (int k = 0; k < 3; k++) pp[k] = p[k];
      for (int k = 0; k < 6; k++) Vp[k] = V[k];
    }
    cfd_wtree_pose(c, jf, i, q, vstride, Rp, pp, o, R, p);
    double Sw[6], x = qd[i * vstride];
    cfd_wtree_screw(c, jf, i, R, p, Sw);
    for (int k = 0; k < 6; k++) V[k] = Vp[k] + Sw[k] * x;
    int s = slot[i];
    if (s >= 0) {
      for (int k = 0; k < 9; k++) S(s, k) = R[k];
      for (int k = 0; k < 3; k++) S(s, 9 + k) = p[k];
      for (int k = 0; k < 6; k++) S(s, 12 + k) = V[k];
      for (int k = 24; k < CFD_WTREE_SLOT_DOUBLES; k++) S(s, k) = 0;
    }
  }

  // in: articulated inertia and bias force about the origin, from the tip; (R, p, V) is link i's
  cfd_abw_inertia IA = {{0}, {0}, {0}};
  double pA[6] = {0, 0, 0, 0, 0, 0};
  for (int i = n - 1; i >= 0; i--) {
    int par = c->parent[i];
    if (!(i + 1 < n && c->parent[i + 1] == i)) {  // a leaf: its sums start empty
      for (int k = 0; k < 6; k++) IA.A[k] = IA.C[k] = pA[k] = 0;
      for (int k = 0; k < 9; k++) IA.B[k] = 0;
    }
    int s = slot[i];
    if (s >= 0) {  // what its later children passed back
      for (int k = 0; k < 6; k++) IA.A[k] += S(s, 24 + k);
      for (int k = 0; k < 9; k++) IA.B[k] += S(s, 30 + k);
      for (int k = 0; k < 6; k++) IA.C[k] += S(s, 39 + k), pA[k] += S(s, 45 + k);
    }
    double J10[10], bias[6], Sw[6], U[6];
    cfd_abw_rigid(c->inertia + 36 * i, R, p, J10);
    cfd_abw_bias(J10, V, bias);
    cfd_abw_add(&IA, J10);
    for (int k = 0; k < 6; k++) pA[k] += bias[k];
    cfd_wtree_screw(c, jf, i, R, p, Sw);
    cfd_abw_mul(&IA, Sw, U);
    double d = cfd_dot6(Sw, U) + c->armature[i] + (extra_diag ? extra_diag[i * vstride] : 0);
    if (!(d > 0)) return CFD_ERR_SINGULAR;
    double x = qd[i * vstride], u = tau[i * vstride] - cfd_dot6(Sw, pA), inv = 1 / d;
    double su = u * inv, w[6];
    for (int k = 0; k < 6; k++) W(i, k) = w[k] = U[k] * inv;
    W(i, 6) = su;
    if (par < 0 && i == 0) break;
    // Ia = IA - U U^T / d,  pa = pA + Ia c + U u / d, c = Vb x S qd (Vb: V before the joint; for a
    // ball's later links, before the ball)
    double Sqd[6], Vb[6], ci[6], Ic[6];
    for (int k = 0; k < 6; k++) Sqd[k] = Sw[k] * x, Vb[k] = V[k];
    if (c->kind[i] == CFD_LINK_BALL_NEXT) {
      double mb[6];
      cfd_wtree_ball_motion(c, cfd_ball_first(c, i), i, R, p, qd, vstride, mb);
      for (int k = 0; k < 6; k++) Vb[k] = V[k] - mb[k];
    }
    cfd_ad(Vb, Sqd, ci);
    cfd_abw_sub_outer(&IA, w, U);
    cfd_abw_mul(&IA, ci, Ic);
    for (int k = 0; k < 6; k++) pA[k] += Ic[k] + U[k] * su;
    if (par >= 0 && par != i - 1) {  // a later child: its sums wait in the parent's slot
      int sp = slot[par];
      for (int k = 0; k < 6; k++) S(sp, 24 + k) += IA.A[k];
      for (int k = 0; k < 9; k++) S(sp, 30 + k) += IA.B[k];
      for (int k = 0; k < 6; k++) S(sp, 39 + k) += IA.C[k], S(sp, 45 + k) += pA[k];
    }
    if (i == 0) break;
    if (par == i - 1) {  // walk back: T_{i-1} = T_i T_loc^-1, V_{i-1} = V_i - S_i qd_i
      double Rl[9], pl[3], Rq[9], t[3];
      cfd_wtree_local(c, jf, i, q, vstride, Rl, pl);
      for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
          Rq[3 * a + b] = R[3 * a] * Rl[3 * b] + R[3 * a + 1] * Rl[3 * b + 1] + R[3 * a + 2] * Rl[3 * b + 2];
      cfd_rot(Rq, pl, t);
      for (int k = 0; k < 9; k++) R[k] = Rq[k];
      for (int k = 0; k < 3; k++) p[k] -= t[k];
      for (int k = 0; k < 6; k++) V[k] -= Sqd[k];
    } else {  // link i - 1 ends another branch (or is another root's): its slot
      int sl = slot[i - 1];
      for (int k = 0; k < 9; k++) R[k] = S(sl, k);
      for (int k = 0; k < 3; k++) p[k] = S(sl, 9 + k);
      for (int k = 0; k < 6; k++) V[k] = S(sl, 12 + k);
    }
  }

  // out: accelerations, the poses and velocities recomputed (the origin o as in the first sweep)
  double a[6] = {0, 0, 0, 0, 0, 0}, Vball[6] = {0, 0, 0, 0, 0, 0};
  for (int i = 0; i < n; i++) {
    int par = c->parent[i];
    double Rp[9], pp[3], Vp[6] = {0, 0, 0, 0, 0, 0};
    double ap[6] = {0, 0, 0, -c->gravity[0], -c->gravity[1], -c->gravity[2]};
    if (par >= 0 && par != i - 1) {
      int s = slot[par];
      for (int k = 0; k < 9; k++) Rp[k] = S(s, k);
      for (int k = 0; k < 3; k++) pp[k] = S(s, 9 + k);
      for (int k = 0; k < 6; k++) Vp[k] = S(s, 12 + k), ap[k] = S(s, 18 + k);
    } else if (par >= 0) {
      for (int k = 0; k < 9; k++) Rp[k] = R[k];
      for (int k = 0; k < 3; k++) pp[k] = p[k];
      for (int k = 0; k < 6; k++) Vp[k] = V[k], ap[k] = a[k];
    }
    cfd_wtree_pose(c, jf, i, q, vstride, Rp, pp, o, R, p);
    double Sw[6], Sqd[6], ci[6], x = qd[i * vstride];
    cfd_wtree_screw(c, jf, i, R, p, Sw);
    if (c->kind[i] != CFD_LINK_BALL_NEXT)
      for (int k = 0; k < 6; k++) Vball[k] = Vp[k];  // before this joint (a ball: before the ball)
    for (int k = 0; k < 6; k++) Sqd[k] = Sw[k] * x, V[k] = Vp[k] + Sqd[k];
    cfd_ad(Vball, Sqd, ci);
    for (int k = 0; k < 6; k++) a[k] = ap[k] + ci[k];
    double wa = 0;
    for (int k = 0; k < 6; k++) wa += W(i, k) * a[k];
    double qa = W(i, 6) - wa;
    qacc[i * vstride] = qa;
    for (int k = 0; k < 6; k++) a[k] += Sw[k] * qa;
    int s = slot[i];
    if (s >= 0)
      for (int k = 0; k < 6; k++) S(s, 18 + k) = a[k];
  }
#undef W
#undef S
  return CFD_OK;
}

#endif  // CHAINFD_ABA_WORLD_TREE_H
