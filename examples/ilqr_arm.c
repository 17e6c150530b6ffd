// iLQR on the 7-dof arm: bring the hand (link7) to a target point and stop there, with the step's
// Jacobians from chainfd_transition_derivatives (analytical, in mjd_transitionFD's layout) and the
// trajectory from mj_step. Prints the cost at every iteration; exits 1 unless it fell to a quarter
// of the first with the hand within 5 cm of the target at the end (most of what is left is the
// running cost of the way there).
//
//   build/examples/ilqr_arm [scenes/arm7.xml] [--iters N] [--horizon T]
//
// Cost: sum over t of 0.5 (wp |p_t - p*|^2 + wv |v_t|^2 + wu |u_t - u0|^2) and at T
// 0.5 (WP |p_T - p*|^2 + WV |v_T|^2); p the hand's position (its Jacobian from mj_jacBody,
// Gauss-Newton Hessian), u0 the start pose (the actuators are position servos).
// The backward pass is the textbook one (Tassa et al. 2012) with a Levenberg-Marquardt term on
// Quu, the forward pass a backtracking line search on the feedforward.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chainfd_deriv.h"

static const double wp = 1, wv = 1e-3, wu = 1e-3, WP = 200, WV = 1;

typedef struct {
  const mjModel* m;
  mjData* d;
  int nv, nu, nx, T, body;
  double target[3];
  double *x, *u, *xn, *un;      // trajectory (T+1) x nx, controls T x nu, and a trial's
  double *A, *B, *K, *k;        // per step: nx x nx, nx x nu, nu x nx, nu
  double *u0;
} ilqr;

// the state from mjData: x = (qpos, qvel) (hinges: qpos is its own tangent)
static void get_x(const ilqr* s, double* x) {
  memcpy(x, s->d->qpos, sizeof(double) * s->nv);
  memcpy(x + s->nv, s->d->qvel, sizeof(double) * s->nv);
}
static void set_x(ilqr* s, const double* x) {
  memcpy(s->d->qpos, x, sizeof(double) * s->nv);
  memcpy(s->d->qvel, x + s->nv, sizeof(double) * s->nv);
}

// the cost at (x, u) (u NULL: terminal) and, when lx is given, its gradient and Gauss-Newton
// Hessian in x (lx nx, lxx nx x nx) and u (lu nu; luu is wu I)
static double cost(ilqr* s, const double* x, const double* u, double* lx, double* lxx, double* lu) {
  int nv = s->nv, nx = s->nx;
  set_x(s, x);
  mj_kinematics(s->m, s->d);
  mj_comPos(s->m, s->d);
  const double* p = s->d->xpos + 3 * s->body;
  double e[3] = {p[0] - s->target[0], p[1] - s->target[1], p[2] - s->target[2]};
  double Wp = u ? wp : WP, Wv = u ? wv : WV, c = 0;
  for (int k = 0; k < 3; k++) c += 0.5 * Wp * e[k] * e[k];
  for (int i = 0; i < nv; i++) c += 0.5 * Wv * x[nv + i] * x[nv + i];
  for (int a = 0; u && a < s->nu; a++) c += 0.5 * wu * (u[a] - s->u0[a]) * (u[a] - s->u0[a]);
  if (!lx) return c;
  double* J = malloc(sizeof(double) * 3 * nv);
  mj_jacBody(s->m, s->d, J, NULL, s->body);
  memset(lx, 0, sizeof(double) * nx);
  memset(lxx, 0, sizeof(double) * nx * nx);
  for (int i = 0; i < nv; i++) {
    for (int k = 0; k < 3; k++) lx[i] += Wp * J[k * nv + i] * e[k];
    for (int j = 0; j < nv; j++)
      for (int k = 0; k < 3; k++) lxx[nx * i + j] += Wp * J[k * nv + i] * J[k * nv + j];
    lx[nv + i] = Wv * x[nv + i];
    lxx[nx * (nv + i) + nv + i] = Wv;
  }
  for (int a = 0; u && a < s->nu; a++) lu[a] = wu * (u[a] - s->u0[a]);
  free(J);
  return c;
}

// x_0 and controls u: the trajectory into x (mj_step), its total cost
static double rollout(ilqr* s, const double* x0, const double* u, double* x) {
  double c = 0;
  memcpy(x, x0, sizeof(double) * s->nx);
  for (int t = 0; t < s->T; t++) {
    c += cost(s, x + t * s->nx, u + t * s->nu, NULL, NULL, NULL);
    set_x(s, x + t * s->nx);
    memcpy(s->d->ctrl, u + t * s->nu, sizeof(double) * s->nu);
    mj_step(s->m, s->d);
    get_x(s, x + (t + 1) * s->nx);
  }
  return c + cost(s, x + s->T * s->nx, NULL, NULL, NULL, NULL);
}

// Cholesky of the nu x nu Q (in place, lower); 0, or 1 when not positive definite
static int chol(double* Q, int n) {
  for (int j = 0; j < n; j++) {
    double dj = Q[n * j + j];
    for (int k = 0; k < j; k++) dj -= Q[n * j + k] * Q[n * j + k];
    if (!(dj > 0)) return 1;
    Q[n * j + j] = sqrt(dj);
    for (int i = j + 1; i < n; i++) {
      double v = Q[n * i + j];
      for (int k = 0; k < j; k++) v -= Q[n * i + k] * Q[n * j + k];
      Q[n * i + j] = v / Q[n * j + j];
    }
  }
  return 0;
}
static void chol_solve(const double* L, int n, double* b) {
  for (int i = 0; i < n; i++) {
    for (int k = 0; k < i; k++) b[i] -= L[n * i + k] * b[k];
    b[i] /= L[n * i + i];
  }
  for (int i = n - 1; i >= 0; i--) {
    for (int k = i + 1; k < n; k++) b[i] -= L[n * k + i] * b[k];
    b[i] /= L[n * i + i];
  }
}

// the backward pass with regularisation mu; 0, or 1 when some Quu is not positive definite
static int backward(ilqr* s, chainfd_deriv* dv, double mu) {
  int nx = s->nx, nu = s->nu, T = s->T;
  double *Vx = malloc(sizeof(double) * nx), *Vxx = malloc(sizeof(double) * nx * nx);
  double *lx = malloc(sizeof(double) * nx), *lxx = malloc(sizeof(double) * nx * nx);
  double *lu = malloc(sizeof(double) * nu), *Qx = malloc(sizeof(double) * nx);
  double *Qu = malloc(sizeof(double) * nu), *Qxx = malloc(sizeof(double) * nx * nx);
  double *Quu = malloc(sizeof(double) * nu * nu), *Qux = malloc(sizeof(double) * nu * nx);
  double *VA = malloc(sizeof(double) * nx * nx), *VB = malloc(sizeof(double) * nx * nu);
  int failed = 0;
  cost(s, s->x + T * nx, NULL, Vx, Vxx, NULL);
  for (int t = T - 1; t >= 0 && !failed; t--) {
    const double *A = s->A + (size_t)t * nx * nx, *B = s->B + (size_t)t * nx * nu;
    cost(s, s->x + t * nx, s->u + t * nu, lx, lxx, lu);
    for (int i = 0; i < nx; i++)  // VA = Vxx A, VB = Vxx B
      for (int j = 0; j < nx; j++) {
        double a = 0;
        for (int k = 0; k < nx; k++) a += Vxx[nx * i + k] * A[nx * k + j];
        VA[nx * i + j] = a;
      }
    for (int i = 0; i < nx; i++)
      for (int j = 0; j < nu; j++) {
        double b = 0;
        for (int k = 0; k < nx; k++) b += Vxx[nx * i + k] * B[nu * k + j];
        VB[nu * i + j] = b;
      }
    for (int i = 0; i < nx; i++) {
      Qx[i] = lx[i];
      for (int k = 0; k < nx; k++) Qx[i] += A[nx * k + i] * Vx[k];
      for (int j = 0; j < nx; j++) {
        double q = lxx[nx * i + j];
        for (int k = 0; k < nx; k++) q += A[nx * k + i] * VA[nx * k + j];
        Qxx[nx * i + j] = q;
      }
    }
    for (int a = 0; a < nu; a++) {
      Qu[a] = lu[a];
      for (int k = 0; k < nx; k++) Qu[a] += B[nu * k + a] * Vx[k];
      for (int b = 0; b < nu; b++) {
        double q = (a == b) * (wu + mu);
        for (int k = 0; k < nx; k++) q += B[nu * k + a] * VB[nu * k + b];
        Quu[nu * a + b] = q;
      }
      for (int j = 0; j < nx; j++) {
        double q = 0;
        for (int k = 0; k < nx; k++) q += B[nu * k + a] * VA[nx * k + j];
        Qux[nx * a + j] = q;
      }
    }
    double* Quu_f = malloc(sizeof(double) * nu * nu);
    memcpy(Quu_f, Quu, sizeof(double) * nu * nu);
    if (chol(Quu_f, nu)) {
      failed = 1;
      free(Quu_f);
      break;
    }
    double *K = s->K + (size_t)t * nu * nx, *kk = s->k + (size_t)t * nu, col[64];
    for (int a = 0; a < nu; a++) kk[a] = -Qu[a];
    chol_solve(Quu_f, nu, kk);
    for (int j = 0; j < nx; j++) {
      for (int a = 0; a < nu; a++) col[a] = -Qux[nx * a + j];
      chol_solve(Quu_f, nu, col);
      for (int a = 0; a < nu; a++) K[nx * a + j] = col[a];
    }
    free(Quu_f);
    // V = Q + K^T Quu k + K^T Qu + Qux^T k, Vxx = Qxx + K^T Quu K + K^T Qux + Qux^T K
    for (int i = 0; i < nx; i++) {
      double v = Qx[i];
      for (int a = 0; a < nu; a++) {
        double Quuk = 0;
        for (int b = 0; b < nu; b++) Quuk += Quu[nu * a + b] * kk[b];
        v += K[nx * a + i] * (Quuk + Qu[a]) + Qux[nx * a + i] * kk[a];
      }
      Vx[i] = v;
      for (int j = 0; j < nx; j++) {
        double w = Qxx[nx * i + j];
        for (int a = 0; a < nu; a++) {
          double QuuK = 0;
          for (int b = 0; b < nu; b++) QuuK += Quu[nu * a + b] * K[nx * b + j];
          w += K[nx * a + i] * (QuuK + Qux[nx * a + j]) + Qux[nx * a + i] * K[nx * a + j];
        }
        Vxx[nx * i + j] = w;
      }
    }
    for (int i = 0; i < nx; i++)  // (kept symmetric against rounding)
      for (int j = 0; j < i; j++) Vxx[nx * i + j] = Vxx[nx * j + i] = 0.5 * (Vxx[nx * i + j] + Vxx[nx * j + i]);
  }
  free(Vx); free(Vxx); free(lx); free(lxx); free(lu); free(Qx); free(Qu); free(Qxx); free(Quu);
  free(Qux); free(VA); free(VB);
  return failed;
}

int main(int argc, char** argv) {
  const char* path = CHAINFD_SCENES_DIR "/arm7.xml";
  int iters = 30, T = 150;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--horizon") && i + 1 < argc) T = atoi(argv[++i]);
    else if (argv[i][0] != '-') path = argv[i];
    else {
      fprintf(stderr, "usage: ilqr_arm [MODEL] [--iters N] [--horizon T]\n");
      return 2;
    }
  }
  if (iters < 1 || T < 1) {
    fprintf(stderr, "ilqr_arm: --iters and --horizon take positive whole numbers\n");
    return 2;
  }
  char err[1024];
  mjModel* m = mj_loadXML(path, NULL, err, sizeof err);
  if (!m) {
    fprintf(stderr, "ilqr_arm: %s\n", err);
    return 1;
  }
  chainfd_deriv* dv;
  if (chainfd_deriv_create(m, CHAINFD_CPU, &dv, err, sizeof err)) {
    fprintf(stderr, "ilqr_arm: %s\n", err);
    return 1;
  }
  ilqr s = {.m = m, .d = mj_makeData(m), .nv = m->nv, .nu = m->nu, .nx = 2 * m->nv, .T = T,
            .body = m->nbody - 1};
  int nx = s.nx, nu = s.nu;
  s.x = malloc(sizeof(double) * (T + 1) * nx);
  s.xn = malloc(sizeof(double) * (T + 1) * nx);
  s.u = malloc(sizeof(double) * T * nu);
  s.un = malloc(sizeof(double) * T * nu);
  s.A = malloc(sizeof(double) * T * nx * nx);
  s.B = malloc(sizeof(double) * T * nx * nu);
  s.K = malloc(sizeof(double) * T * nu * nx);
  s.k = malloc(sizeof(double) * T * nu);
  s.u0 = malloc(sizeof(double) * nu);
  // start: the arm bent, at rest, holding that pose; target: a point in front, to the side
  double x0[64] = {0};
  for (int i = 0; i < s.nv; i++) x0[i] = 0.3 * sin(1.3 * i + 0.5);
  for (int a = 0; a < nu; a++) s.u0[a] = x0[m->jnt_qposadr[m->actuator_trnid[2 * a]]];
  s.target[0] = 0.4, s.target[1] = 0.3, s.target[2] = 0.5;
  for (int t = 0; t < T; t++) memcpy(s.u + t * nu, s.u0, sizeof(double) * nu);
  double c = rollout(&s, x0, s.u, s.x), first = c, mu = 1e-6;
  printf("ilqr_arm: %s, horizon %d steps (%.2f s), hand to (%.2f, %.2f, %.2f)\n", path, T,
         T * m->opt.timestep, s.target[0], s.target[1], s.target[2]);
  printf("iter %2d cost %.6g\n", 0, c);
  for (int it = 1; it <= iters; it++) {
    for (int t = 0; t < T; t++) {  // the step's Jacobians along the trajectory
      set_x(&s, s.x + t * nx);
      memcpy(s.d->ctrl, s.u + t * nu, sizeof(double) * nu);
      if (chainfd_transition_derivatives(dv, m, s.d, s.A + (size_t)t * nx * nx,
                                         s.B + (size_t)t * nx * nu, err, sizeof err)) {
        fprintf(stderr, "ilqr_arm: step %d: %s\n", t, err);
        return 1;
      }
    }
    while (backward(&s, dv, mu) && mu < 1e6) mu *= 10;
    double alpha = 1, cn = INFINITY;
    for (int ls = 0; ls < 10; ls++, alpha *= 0.5) {  // u + alpha k + K (x' - x)
      memcpy(s.xn, x0, sizeof(double) * nx);
      cn = 0;
      for (int t = 0; t < T; t++) {
        double* un = s.un + t * nu;
        for (int a = 0; a < nu; a++) {
          double v = s.u[t * nu + a] + alpha * s.k[t * nu + a];
          for (int j = 0; j < nx; j++) v += s.K[(size_t)t * nu * nx + nx * a + j] * (s.xn[t * nx + j] - s.x[t * nx + j]);
          un[a] = v;
        }
        cn += cost(&s, s.xn + t * nx, un, NULL, NULL, NULL);
        set_x(&s, s.xn + t * nx);
        memcpy(s.d->ctrl, un, sizeof(double) * nu);
        mj_step(m, s.d);
        get_x(&s, s.xn + (t + 1) * nx);
      }
      cn += cost(&s, s.xn + T * nx, NULL, NULL, NULL, NULL);
      if (cn < c) break;
    }
    if (cn < c) {
      double* sw = s.x; s.x = s.xn; s.xn = sw;
      sw = s.u; s.u = s.un; s.un = sw;
      mu = fmax(1e-6, mu / 10);
      c = cn;
    } else {
      mu *= 10;
    }
    printf("iter %2d cost %.6g  (step %.3g, mu %.0e)\n", it, c, cn < INFINITY && cn <= c ? alpha : 0.0, mu);
  }
  set_x(&s, s.x + T * nx);
  mj_kinematics(m, s.d);
  const double* p = s.d->xpos + 3 * s.body;
  printf("hand at (%.3f, %.3f, %.3f) after %.2f s; cost %.6g from %.6g\n", p[0], p[1], p[2],
         T * m->opt.timestep, c, first);
  double miss = sqrt((p[0] - s.target[0]) * (p[0] - s.target[0]) + (p[1] - s.target[1]) * (p[1] - s.target[1]) +
                     (p[2] - s.target[2]) * (p[2] - s.target[2]));
  int ok = c < 0.25 * first && miss < 0.05;
  if (!ok) printf("FAILED: the cost did not fall to a quarter of the first, or the hand is %.3f m off\n", miss);
  free(s.x); free(s.xn); free(s.u); free(s.un); free(s.A); free(s.B); free(s.K); free(s.k); free(s.u0);
  mj_deleteData(s.d);
  chainfd_deriv_free(dv);
  mj_deleteModel(m);
  return ok ? 0 : 1;
}
