// joints.h: what each kind of link does (chain.h's CFD_LINK_*): its pose in its parent at q, and
// its velocity-product acceleration c_i. Host and device (CFD_HD), for every tree algorithm.
//
// A ball joint in MuJoCo turns its body by the quaternion qpos[adr..adr+4) about the joint's anchor,
// and its three dofs are the angular velocity in the body's frame (cdof: the body's axes through the
// anchor). chainfd gives it three links with the screws S_k = [e_k; a x e_k] (a: the anchor) in the
// body frame: the first carries the body's home pose (the identity when another joint of the body
// comes first) and the rotation, exp(sum_k S_k r_k) with r
// the rotation vector of the quaternion (R = exp(r^), and the anchor fixed), the next two an
// identity pose. Velocities then add as MuJoCo's do: V_body = X V_parent + sum_k S_k qd_k.
//
// The velocity term differs. For a hinge or slide, c_i = V_i x S_i qd_i (= V_p x S_i qd_i, V_p the
// parent's velocity in frame i, since S qd x S qd = 0); MuJoCo's cdof_dot does the same for several
// hinges in one body, each against the velocity after the ones before. For a ball MuJoCo takes all
// three against the velocity before the ball: c = V_p x S qd. So a BALL_NEXT link's c is taken
// against V_g - S_g qd_g, g the ball's first link (whose frame it shares): three hinges in a row
// would add w1 x w2 + (w1 + w2) x w3, which a ball does not have.
//
// A free joint is three slides along the world axes and a ball about the body's origin, all at the
// identity home pose with qpos0 0: q is the position and the rotation vector of the orientation,
// both absolute (MuJoCo's free body sits at its qpos whatever its parent): MuJoCo's cdof,
// translation in world axes then rotation in the body frame.
#ifndef CHAINFD_JOINTS_H
#define CHAINFD_JOINTS_H

#include <math.h>

#include "cfd_math.h"
#include "chain.h"

// The rotation vector r of the quaternion x (w, x, y, z; any norm): x / |x| = (cos(t/2), sin(t/2)
// r/t), t = |r| <= pi (the quaternion and its negative are one rotation).
CFD_HD void cfd_quat_log(const double x[4], double r[3]) {
  double w = x[0], v0 = x[1], v1 = x[2], v2 = x[3];
  if (w < 0) w = -w, v0 = -v0, v1 = -v1, v2 = -v2;
  double s = sqrt(v0 * v0 + v1 * v1 + v2 * v2);
  // t / sin(t/2) = 2 atan2(s, w) / s, scale free; 2 / w as s -> 0 (and w = |x| > 0 then)
  double k = s > 0 ? 2 * atan2(s, w) / s : (w > 0 ? 2 / w : 0);
  r[0] = k * v0; r[1] = k * v1; r[2] = k * v2;
}

// The unit quaternion of rotation vector r.
CFD_HD void cfd_quat_exp(const double r[3], double x[4]) {
  double t = sqrt(r[0] * r[0] + r[1] * r[1] + r[2] * r[2]);
  double h = 0.5 * t, k = t > 0 ? sin(h) / t : 0.5;
  x[0] = cos(h); x[1] = k * r[0]; x[2] = k * r[1]; x[3] = k * r[2];
}

// The quaternion product ab (w, x, y, z)
CFD_HD void cfd_quat_mul(const double a[4], const double b[4], double ab[4]) {
  ab[0] = a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3];
  ab[1] = a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2];
  ab[2] = a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1];
  ab[3] = a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0];
}

// exp of the twist sum_k S_{i+k} r_k (the three screws of a ball at link i): a rotation by |r|
// about r through the anchor. The twist [r; a x r] is the screw [r/t; a x r/t] times t = |r|.
CFD_HD void cfd_ball_exp(const double* screw, const double r[3], double R[9], double p[3]) {
  double X[6];
  for (int k = 0; k < 6; k++) X[k] = screw[k] * r[0] + screw[6 + k] * r[1] + screw[12 + k] * r[2];
  double t = sqrt(r[0] * r[0] + r[1] * r[1] + r[2] * r[2]);
  if (!(t > 0)) {
    R[0] = 1; R[1] = 0; R[2] = 0; R[3] = 0; R[4] = 1; R[5] = 0; R[6] = 0; R[7] = 0; R[8] = 1;
    p[0] = p[1] = p[2] = 0;
    return;
  }
  for (int k = 0; k < 6; k++) X[k] /= t;
  cfd_screw_exp(X, t, R, p);
}

// Link i's pose in its parent's frame at q (entry j of q at q[j * vstride]).
CFD_HD void cfd_link_pose(const cfd_chain* c, int i, const double* q, long vstride, double R[9],
                          double p[3]) {
  double Re[9], pe[3];
  int kind = c->kind[i];
  if (kind == CFD_LINK_SCREW) {
    cfd_screw_exp(c->screw + 6 * i, q[i * vstride], Re, pe);
  } else if (kind == CFD_LINK_BALL) {
    double r[3] = {q[i * vstride], q[(i + 1) * vstride], q[(i + 2) * vstride]};
    cfd_ball_exp(c->screw + 6 * i, r, Re, pe);
  } else {
    for (int k = 0; k < 9; k++) R[k] = c->home_R[9 * i + k];
    for (int k = 0; k < 3; k++) p[k] = c->home_p[3 * i + k];
    return;
  }
  cfd_se3_mul(c->home_R + 9 * i, c->home_p + 3 * i, Re, pe, R, p);
}

// The first link of the ball that BALL_NEXT link i belongs to.
CFD_HD int cfd_ball_first(const cfd_chain* c, int i) {
  while (c->kind[i] == CFD_LINK_BALL_NEXT) i--;
  return i;
}

// c_i = ad_{Vb} (S_i qd_i) with Vb the velocity the dof moves against: V_i for a screw or a ball's
// first link; for a BALL_NEXT link Vb = V_g - S_g qd_g (g = cfd_ball_first, Vg its velocity, qdg its
// qd), the velocity before the ball in the frame the ball's links share.
CFD_HD void cfd_link_c(const cfd_chain* c, int i, const double Vi[6], double qdi, const double* Vg,
                       double qdg, double ci[6]) {
  const double* S = c->screw + 6 * i;
  double Sqd[6], Vb[6];
  for (int k = 0; k < 6; k++) Sqd[k] = S[k] * qdi;
  if (c->kind[i] == CFD_LINK_BALL_NEXT) {
    int g = cfd_ball_first(c, i);
    for (int k = 0; k < 6; k++) Vb[k] = Vg[k] - c->screw[6 * g + k] * qdg;
    cfd_ad(Vb, Sqd, ci);
  } else {
    cfd_ad(Vi, Sqd, ci);
  }
}

// The same c_i from link i's own velocity V_i and the rates qd (entry j at qd[j]), without the
// ball's first link's velocity: for a BALL_NEXT link Vb = V_i - sum_{j = g..i} S_j qd_j (the
// ball's links share one frame). For sweeps that may start inside a ball (the scans' blocks).
CFD_HD void cfd_link_c_local(const cfd_chain* c, int i, const double Vi[6], const double* qd,
                             double ci[6]) {
  const double* S = c->screw + 6 * i;
  double Vb[6], Sqd[6];
  for (int k = 0; k < 6; k++) Vb[k] = Vi[k], Sqd[k] = S[k] * qd[i];
  if (c->kind[i] == CFD_LINK_BALL_NEXT)
    for (int j = i;; j--) {  // back to the ball's first link
      for (int k = 0; k < 6; k++) Vb[k] -= c->screw[6 * j + k] * qd[j];
      if (c->kind[j] == CFD_LINK_BALL) break;
    }
  cfd_ad(Vb, Sqd, ci);
}

#endif  // CHAINFD_JOINTS_H
