// chain_gen: procedural serial chains through mjSpec (see chain_gen.h).

#include "chain_gen.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PI 3.14159265358979323846

// regular chain: 0.1 m links of 0.1 kg, drawn as capsules of this radius
#define REG_LEN 0.1
#define REG_MASS 0.1
#define REG_RADIUS 0.015

//------------------------------------------------------------------------------------------------
// errors

static void set_err(char* err, int err_size, const char* fmt, ...) {
  if (!err || err_size <= 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, (size_t)err_size, fmt, ap);
  va_end(ap);
}

//------------------------------------------------------------------------------------------------
// splitmix64: tiny, seedable, and identical on every platform, unlike rand()

typedef struct rng {
  uint64_t s;
} rng;

static uint64_t rng_next(rng* r) {
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// One stream per property group, so that e.g. changing slide= does not reshuffle the geometry.
enum { STREAM_GEOM = 1, STREAM_INERTIA, STREAM_JOINT, STREAM_SLIDE, STREAM_ACT, STREAM_BALL,
       STREAM_BRANCH };

static rng rng_stream(unsigned seed, unsigned tag) {
  rng r = {((uint64_t)seed << 32) ^ ((uint64_t)tag * 0xD1B54A32D192ED03ull)};
  rng_next(&r);
  return r;
}

// uniform in [0,1)
static double rng_u01(rng* r) {
  return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

static double rng_uni(rng* r, double lo, double hi) {
  return lo + (hi - lo) * rng_u01(r);
}

static void rng_unit3(rng* r, double v[3]) {
  double n2;
  do {
    for (int k = 0; k < 3; k++) v[k] = rng_uni(r, -1, 1);
    n2 = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
  } while (n2 > 1 || n2 < 1e-4);
  double s = 1 / sqrt(n2);
  for (int k = 0; k < 3; k++) v[k] *= s;
}

// uniformly distributed rotation (Shoemake)
static void rng_quat(rng* r, double q[4]) {
  double u1 = rng_u01(r), u2 = 2 * PI * rng_u01(r), u3 = 2 * PI * rng_u01(r);
  double a = sqrt(1 - u1), b = sqrt(u1);
  q[0] = a * sin(u2);
  q[1] = a * cos(u2);
  q[2] = b * sin(u3);
  q[3] = b * cos(u3);
}

// Joint axis mix: a quarter exactly aligned, a quarter slightly skewed off a principal
// axis, the rest fully random, so kernels see both the easy and the general case.
static void rng_axis(rng* r, double a[3]) {
  double kind = rng_u01(r);
  if (kind < 0.5) {
    int i = (int)(rng_u01(r) * 3);
    double sign = rng_u01(r) < 0.5 ? -1 : 1;
    a[0] = a[1] = a[2] = 0;
    a[i] = sign;
    if (kind >= 0.25) {
      for (int k = 0; k < 3; k++) a[k] += rng_uni(r, -0.15, 0.15);
      mju_normalize3(a);
    }
  } else {
    rng_unit3(r, a);
  }
}

//------------------------------------------------------------------------------------------------
// defaults and parsing

void cfd_chain_gen_defaults(cfd_chain_gen* g, int n) {
  memset(g, 0, sizeof(*g));
  g->n = n;
  g->gravity = 1;
}

// parse [s, e) completely as a number
static int parse_double(const char* s, const char* e, double* out) {
  char* end;
  errno = 0;
  double v = strtod(s, &end);
  if (end != e || s == e || errno || !isfinite(v)) return 1;
  *out = v;
  return 0;
}

static int parse_long(const char* s, const char* e, long lo, long hi, long* out) {
  char* end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end != e || s == e || errno || v < lo || v > hi) return 1;
  *out = v;
  return 0;
}

static int parse_ulong(const char* s, const char* e, unsigned long hi, unsigned long* out) {
  char* end;
  errno = 0;
  if (s == e || *s < '0' || *s > '9') return 1;  // strtoul would silently negate "-1"
  unsigned long v = strtoul(s, &end, 10);
  if (end != e || errno || v > hi) return 1;
  *out = v;
  return 0;
}

int cfd_chain_gen_parse(const char* spec, cfd_chain_gen* g, char* err, int err_size) {
  if (!spec || !g) {
    set_err(err, err_size, "chain spec: null argument");
    return 1;
  }
  if (strncmp(spec, "chain:", 6) != 0) {
    set_err(err, err_size, "chain spec '%s': must start with 'chain:'", spec);
    return 1;
  }

  const char* p = spec + 6;
  const char* e = p + strcspn(p, ",");
  long n;
  if (parse_long(p, e, 1, CFD_CHAIN_MAX_LINKS, &n)) {
    set_err(err, err_size, "chain spec '%s': link count must be an integer in 1..%d", spec,
            CFD_CHAIN_MAX_LINKS);
    return 1;
  }

  // fill a local copy so that *g is untouched on failure
  cfd_chain_gen t;
  cfd_chain_gen_defaults(&t, (int)n);

  while (*e == ',') {
    const char* key = e + 1;
    e = key + strcspn(key, ",");
    const char* eq = memchr(key, '=', (size_t)(e - key));
    if (!eq) {
      set_err(err, err_size, "chain spec '%s': expected key=value at '%.*s'", spec,
              (int)(e - key), key);
      return 1;
    }
    size_t klen = (size_t)(eq - key);
    const char* val = eq + 1;
    long l = 0;
    double d = 0;
    int bad;

#define KEY_IS(name) (klen == sizeof(name) - 1 && strncmp(key, name, klen) == 0)
    if (KEY_IS("seed")) {
      unsigned long u = 0;
      bad = parse_ulong(val, e, UINT_MAX, &u);
      t.seed = (unsigned)u;
    } else if (KEY_IS("random")) {
      bad = parse_long(val, e, 0, 1, &l);
      t.randomize = (int)l;
    } else if (KEY_IS("slide")) {
      bad = parse_double(val, e, &d) || d < 0 || d > 1;
      t.slide_fraction = d;
    } else if (KEY_IS("damping")) {
      bad = parse_double(val, e, &d) || d < 0;
      t.damping = d;
    } else if (KEY_IS("armature")) {
      bad = parse_double(val, e, &d) || d < 0;
      t.armature = d;
    } else if (KEY_IS("stiffness")) {
      bad = parse_double(val, e, &d) || d < 0;
      t.stiffness = d;
    } else if (KEY_IS("actuators")) {
      bad = parse_long(val, e, 0, 2, &l);
      t.actuators = (int)l;
    } else if (KEY_IS("gravity")) {
      bad = parse_long(val, e, 0, 1, &l);
      t.gravity = (int)l;
    } else if (KEY_IS("timestep")) {
      bad = parse_double(val, e, &d) || d < 0;
      t.timestep = d;
    } else if (KEY_IS("multijoint")) {
      bad = parse_long(val, e, 0, 1, &l);
      t.multi_joint = (int)l;
    } else if (KEY_IS("ball")) {
      bad = parse_double(val, e, &d) || !(d >= 0 && d <= 1);
      t.ball_fraction = d;
    } else if (KEY_IS("branch")) {
      bad = parse_double(val, e, &d) || !(d >= 0 && d <= 1);
      t.branch = d;
    } else if (KEY_IS("free")) {
      bad = parse_long(val, e, 0, 1, &l);
      t.free_base = (int)l;
    } else if (KEY_IS("floor")) {
      bad = parse_double(val, e, &d) || d < 0;
      t.floor = d;
    } else if (KEY_IS("limit")) {
      bad = parse_double(val, e, &d) || d < 0;
      t.limit = d;
    } else if (KEY_IS("frictionloss")) {
      bad = parse_double(val, e, &d) || d < 0;
      t.frictionloss = d;
    } else {
      set_err(err, err_size,
              "chain spec '%s': unknown key '%.*s' (seed, random, slide, damping, armature, "
              "stiffness, actuators, gravity, timestep, multijoint, ball, branch, free, floor, "
              "limit, frictionloss)",
              spec, (int)klen, key);
      return 1;
    }
#undef KEY_IS

    if (bad) {
      set_err(err, err_size, "chain spec '%s': bad value for '%.*s'", spec, (int)klen, key);
      return 1;
    }
  }
  *g = t;
  return 0;
}

//------------------------------------------------------------------------------------------------
// generator

static int check_gen(const cfd_chain_gen* g, char* err, int err_size) {
  if (g->n < 1 || g->n > CFD_CHAIN_MAX_LINKS) {
    set_err(err, err_size, "chain: n = %d out of range 1..%d", g->n, CFD_CHAIN_MAX_LINKS);
    return 1;
  }
  if (g->n > CFD_CHAIN_MAX_MJ_LINKS) {
    // the compiler would run for minutes to hours (O(n^3)) and only then throw this
    set_err(err, err_size,
            "chain: n = %d exceeds %d, the deepest body tree MuJoCo %s compiles "
            "(\"depth limit exceeded in signature computation\")",
            g->n, CFD_CHAIN_MAX_MJ_LINKS, mj_versionString());
    return 1;
  }
  if (!(g->slide_fraction >= 0 && g->slide_fraction <= 1)) {
    set_err(err, err_size, "chain: slide_fraction must be in [0,1]");
    return 1;
  }
  if (!(g->damping >= 0 && g->armature >= 0 && g->stiffness >= 0 && g->timestep >= 0) ||
      !isfinite(g->damping) || !isfinite(g->armature) || !isfinite(g->stiffness) ||
      !isfinite(g->timestep)) {
    set_err(err, err_size, "chain: damping, armature, stiffness and timestep must be >= 0");
    return 1;
  }
  if (!(g->ball_fraction >= 0 && g->ball_fraction <= 1) || !(g->branch >= 0 && g->branch <= 1)) {
    set_err(err, err_size, "chain: ball and branch must be in [0,1]");
    return 1;
  }
  if (g->actuators < 0 || g->actuators > 2) {
    set_err(err, err_size, "chain: actuators must be 0, 1 or 2");
    return 1;
  }
  return 0;
}

static int has_two_joints(const cfd_chain_gen* g, int i) {
  return g->multi_joint && i % 5 == 4;
}

// Full inertia of a box-like link (dimensions derived from its length) in a random frame.
// Box moments satisfy the triangle inequality by construction, so the compiler accepts them.
static void random_fullinertia(rng* r, double mass, double len, double full[6],
                               double I[9]) {
  double wx = rng_uni(r, 0.02, 0.06), wy = rng_uni(r, 0.02, 0.06);
  double wz = len * rng_uni(r, 0.8, 1.2);
  double d[3] = {mass / 12 * (wy * wy + wz * wz), mass / 12 * (wx * wx + wz * wz),
                 mass / 12 * (wx * wx + wy * wy)};
  double q[4], R[9];
  rng_quat(r, q);
  mju_quat2Mat(R, q);

  // I = R diag(d) R^T
  for (int a = 0; a < 3; a++) {
    for (int b = 0; b < 3; b++) {
      I[3 * a + b] = 0;
      for (int k = 0; k < 3; k++) I[3 * a + b] += R[3 * a + k] * d[k] * R[3 * b + k];
    }
  }
  full[0] = I[0];
  full[1] = I[4];
  full[2] = I[8];
  full[3] = I[1];
  full[4] = I[2];
  full[5] = I[5];
}

// Inertia a joint moves on its own link: about the axis through the anchor for a hinge, the mass
// for a slide, plus armature. Actuator gains are multiples of it, because explicit (Euler)
// velocity feedback kv is stable only while kv*dt/inertia < 2, and random links can be light.
static double joint_inertia(const mjsJoint* j, double mass, const double ipos[3],
                            const double icom[9]) {
  if (j->type == mjJNT_SLIDE) return mass + j->armature;
  const double* a = j->axis;
  double r[3] = {ipos[0] - j->pos[0], ipos[1] - j->pos[1], ipos[2] - j->pos[2]};
  double c[3] = {a[1] * r[2] - a[2] * r[1], a[2] * r[0] - a[0] * r[2], a[0] * r[1] - a[1] * r[0]};
  double aIa = 0;
  for (int p = 0; p < 3; p++) {
    for (int q = 0; q < 3; q++) aIa += a[p] * icom[3 * p + q] * a[q];
  }
  return aIa + mass * (c[0] * c[0] + c[1] * c[1] + c[2] * c[2]) + j->armature;
}

// kind cycles motor, position, velocity, affine general, then (actuators=2) filter, integrator.
// k: the joint's own inertia (see above); scale: per-actuator variation.
static int set_actuator(mjsActuator* a, int kind, double k, double scale, char* err,
                        int err_size) {
  const char* msg = NULL;
  switch (kind) {
    case 0:
      msg = mjs_setToMotor(a);
      a->gainprm[0] = 10 * k * scale;
      break;
    case 1:
      msg = mjs_setToPosition(a, 20 * k * scale, NULL, NULL, NULL, 0);
      break;
    case 2:
      msg = mjs_setToVelocity(a, 2 * k * scale);
      break;
    case 3:  // general, affine in both gain and bias: force depends on q and qdot through both
      a->gaintype = mjGAIN_AFFINE;
      a->gainprm[0] = 10 * k * scale;
      a->gainprm[1] = 2 * k;
      a->gainprm[2] = -0.5 * k;
      a->biastype = mjBIAS_AFFINE;
      a->biasprm[0] = 1 * k;
      a->biasprm[1] = -20 * k * scale;
      a->biasprm[2] = -2 * k * scale;
      break;
    case 4:  // first-order filter on the control
      a->dyntype = mjDYN_FILTER;
      a->dynprm[0] = 0.05;
      a->gaintype = mjGAIN_FIXED;
      a->gainprm[0] = 10 * k * scale;
      break;
    case 5:  // integrator: activation is the integral of the control
      a->dyntype = mjDYN_INTEGRATOR;
      a->gaintype = mjGAIN_FIXED;
      a->gainprm[0] = 10 * k * scale;
      break;
  }
  if (msg && msg[0]) {
    set_err(err, err_size, "chain: actuator setup failed: %s", msg);
    return 1;
  }
  // no clamping anywhere: keeps the dynamics smooth in ctrl and act
  a->ctrllimited = mjLIMITED_FALSE;
  a->forcelimited = mjLIMITED_FALSE;
  a->actlimited = mjLIMITED_FALSE;
  return 0;
}

// The chain as an mjSpec (not compiled); NULL with a message in err on failure
static mjSpec* chain_spec(const cfd_chain_gen* g, char* err, int err_size) {
  if (!g) {
    set_err(err, err_size, "chain: null generator");
    return NULL;
  }
  if (check_gen(g, err, err_size)) return NULL;

  const int n = g->n;
  const int rnd = g->randomize != 0;
  int njnt = 0;
  for (int i = 0; i < n; i++) njnt += 1 + has_two_joints(g, i);
  int nslide_left = (int)floor(g->slide_fraction * njnt + 0.5);

  // Link geometry first: each capsule runs from the body origin to its child's origin, so
  // the offsets (n+1 of them; the last one only ends the last capsule) are needed up front.
  double* off = malloc(sizeof(double) * 3 * (size_t)(n + 1));
  double* quat = malloc(sizeof(double) * 4 * (size_t)n);
  if (!off || !quat) {
    free(off);
    free(quat);
    set_err(err, err_size, "chain: out of memory");
    return NULL;
  }
  rng rg = rng_stream(g->seed, STREAM_GEOM);
  double total_len = 0;
  for (int i = 0; i <= n; i++) {
    double* o = off + 3 * i;
    if (rnd) {
      o[0] = rng_uni(&rg, -0.03, 0.03);
      o[1] = rng_uni(&rg, -0.03, 0.03);
      o[2] = -rng_uni(&rg, 0.06, 0.16);
    } else {
      o[0] = o[1] = 0;
      o[2] = -REG_LEN;
    }
    if (i > 0) total_len += sqrt(o[0] * o[0] + o[1] * o[1] + o[2] * o[2]);
  }
  for (int i = 0; i < n; i++) {
    double* q = quat + 4 * i;
    q[0] = 1;
    q[1] = q[2] = q[3] = 0;
    if (rnd) {  // moderate bends keep the random chain spread out enough to look at
      double ax[3];
      rng_unit3(&rg, ax);
      mju_axisAngle2Quat(q, ax, rng_uni(&rg, -PI / 3, PI / 3));
    }
  }
  // Root: links point along local -z; turn link0 by -90 deg about y so the chain starts
  // horizontal along +x and swings down under gravity, from a height it cannot reach.
  {
    double tilt[4] = {sqrt(0.5), 0, -sqrt(0.5), 0}, q0[4];
    mju_mulQuat(q0, tilt, quat);
    mju_normalize4(q0);
    memcpy(quat, q0, sizeof(q0));
    off[0] = 0;
    off[1] = 0;
    off[2] = total_len + 0.1;
  }

  mjSpec* spec = mj_makeSpec();
  if (!spec) {
    free(off);
    free(quat);
    set_err(err, err_size, "chain: mj_makeSpec failed");
    return NULL;
  }
  mjs_setString(spec->modelname, "chain");
  // inertials are written explicitly below; geoms are only visuals
  spec->compiler.inertiafromgeom = mjINERTIAFROMGEOM_FALSE;
  // angles in radians: a hinge's range (limit=R) and springref as written (mjSpec's default
  // compiler reads them in degrees)
  spec->compiler.degree = 0;
  if (!g->gravity) spec->option.gravity[0] = spec->option.gravity[1] = spec->option.gravity[2] = 0;
  if (g->timestep > 0) spec->option.timestep = g->timestep;
  if (g->floor > 0) {  // the floor takes contacts (conaffinity), the links make them (contype)
    spec->option.cone = mjCONE_PYRAMIDAL;
    // MuJoCo's arena for up to 2 contacts of 4 pyramid rows a link, each row dense over the
    // chain (efc_J, its solver's copies and the dense Hessian): its default is far smaller
    double dofs = 3.0 * n + 6, bytes = 8.0 * n * dofs * 8 * 6 + 64e6;
    spec->memory = (mjtSize)bytes;
    mjsGeom* plane = mjs_addGeom(mjs_findBody(spec, "world"), NULL);
    mjs_setName(plane->element, "floor");
    plane->type = mjGEOM_PLANE;
    plane->size[0] = plane->size[1] = total_len + 10;
    plane->size[2] = 0.1;
    plane->pos[2] = off[2] - g->floor;
    plane->contype = 0;
    plane->conaffinity = 1;
  }

  rng ri = rng_stream(g->seed, STREAM_INERTIA);
  rng rj = rng_stream(g->seed, STREAM_JOINT);
  rng rs = rng_stream(g->seed, STREAM_SLIDE);
  rng ra = rng_stream(g->seed, STREAM_ACT);
  rng rb = rng_stream(g->seed, STREAM_BALL);
  rng rt = rng_stream(g->seed, STREAM_BRANCH);
  mjsBody** bodies = malloc(sizeof(mjsBody*) * (size_t)n);
  if (!bodies) {
    free(off);
    free(quat);
    mj_deleteSpec(spec);
    set_err(err, err_size, "chain: out of memory");
    return NULL;
  }
  const int act_cycle = g->actuators == 2 ? 6 : 4;
  char name[32];
  int jid = 0;
  int fail = 0;

  mjsBody* parent = mjs_findBody(spec, "world");
  for (int i = 0; i < n && !fail; i++) {
    const double* o = off + 3 * i;
    const double* child = off + 3 * (i + 1);
    if (i > 0 && g->branch > 0 && rng_u01(&rt) < g->branch)  // a side branch: any earlier body
      parent = bodies[(int)(rng_u01(&rt) * i) % i];
    mjsBody* b = bodies[i] = mjs_addBody(parent, NULL);
    snprintf(name, sizeof(name), "link%d", i);
    mjs_setName(b->element, name);
    memcpy(b->pos, o, sizeof(double) * 3);
    memcpy(b->quat, quat + 4 * i, sizeof(double) * 4);

    // inertial (ipos must be set, else the compiler treats the inertial frame as unspecified)
    b->explicitinertial = 1;
    double icom[9];  // inertia about the com, body frame: sizes the actuator gains
    if (rnd) {
      double len = sqrt(child[0] * child[0] + child[1] * child[1] + child[2] * child[2]);
      b->mass = rng_uni(&ri, 0.05, 2.0);
      for (int k = 0; k < 3; k++) b->ipos[k] = 0.5 * child[k] + rng_uni(&ri, -0.01, 0.01);
      random_fullinertia(&ri, b->mass, len, b->fullinertia, icom);
    } else {
      // solid rod with the capsule's radius, about its centre
      b->mass = REG_MASS;
      b->ipos[0] = b->ipos[1] = 0;
      b->ipos[2] = -0.5 * REG_LEN;
      b->inertia[0] = b->inertia[1] =
          REG_MASS * (REG_LEN * REG_LEN / 12 + REG_RADIUS * REG_RADIUS / 4);
      b->inertia[2] = REG_MASS * REG_RADIUS * REG_RADIUS / 2;
      memset(icom, 0, sizeof(icom));
      for (int k = 0; k < 3; k++) icom[4 * k] = b->inertia[k];
    }

    // visual capsule, excluded from collisions
    mjsGeom* geom = mjs_addGeom(b, NULL);
    geom->type = mjGEOM_CAPSULE;
    geom->fromto[0] = geom->fromto[1] = geom->fromto[2] = 0;
    memcpy(geom->fromto + 3, child, sizeof(double) * 3);
    geom->size[0] = rnd ? 0.012 : REG_RADIUS;
    geom->contype = g->floor > 0;
    geom->conaffinity = 0;
    float rgba[2][4] = {{0.85f, 0.45f, 0.2f, 1}, {0.3f, 0.5f, 0.8f, 1}};
    memcpy(geom->rgba, rgba[i & 1], sizeof(rgba[0]));

    int nj = 1 + has_two_joints(g, i);
    double first_axis[3] = {0, 0, 0};
    if (i == 0 && g->free_base) {  // a floating base in place of the root's joints
      mjsJoint* j = mjs_addJoint(b, NULL);
      mjs_setName(j->element, "root");
      j->type = mjJNT_FREE;
      j->damping[0] = g->damping;
      j->armature = g->armature;
      jid += nj;
      nj = 0;
    }
    for (int k = 0; k < nj; k++, jid++) {
      mjsJoint* j = mjs_addJoint(b, NULL);
      snprintf(name, sizeof(name), "j%d", jid);
      mjs_setName(j->element, name);

      // selection sampling: exactly round(fraction * njnt) slides, spread by the seed
      int slide = rng_u01(&rs) * (njnt - jid) < nslide_left;
      if (slide) nslide_left--;
      int ball = !slide && nj == 1 && g->ball_fraction > 0 && rng_u01(&rb) < g->ball_fraction;
      j->type = slide ? mjJNT_SLIDE : ball ? mjJNT_BALL : mjJNT_HINGE;

      if (rnd) {
        if (k == 0) {
          rng_axis(&rj, j->axis);
          memcpy(first_axis, j->axis, sizeof(first_axis));
        } else {
          // second joint of a body: far from parallel, so the two dofs stay independent
          double dot;
          do {
            rng_axis(&rj, j->axis);
            dot = j->axis[0] * first_axis[0] + j->axis[1] * first_axis[1] +
                  j->axis[2] * first_axis[2];
          } while (fabs(dot) > 0.9);
        }
        for (int c = 0; c < 3; c++) j->pos[c] = rng_uni(&rj, -0.02, 0.02);
      } else {
        j->axis[0] = jid & 1 ? 1 : 0;
        j->axis[1] = jid & 1 ? 0 : 1;
        j->axis[2] = 0;
      }
      double fd = rnd ? rng_uni(&rj, 0.5, 1.5) : 1;
      double fa = rnd ? rng_uni(&rj, 0.5, 1.5) : 1;
      double sref = rnd ? rng_uni(&rj, -0.5, 0.5) : 0;
      j->limited = g->limit > 0 && !ball ? mjLIMITED_TRUE : mjLIMITED_FALSE;
      j->range[0] = -g->limit;
      j->range[1] = g->limit;
      j->frictionloss = ball ? 0 : g->frictionloss;
      j->damping[0] = g->damping * fd;
      j->armature = g->armature * fa;
      j->stiffness[0] = g->stiffness;
      j->springref = g->stiffness > 0 ? sref : 0;

      if (g->actuators) {
        mjsActuator* a = mjs_addActuator(spec, NULL);
        snprintf(name, sizeof(name), "a%d", jid);
        mjs_setName(a->element, name);
        a->trntype = mjTRN_JOINT;
        snprintf(name, sizeof(name), "j%d", jid);
        mjs_setString(a->target, name);
        double scale = rnd ? rng_uni(&ra, 0.5, 1.5) : 1;
        double kin = joint_inertia(j, b->mass, b->ipos, icom);
        if (ball) {  // a motor about a random axis of the ball: gear's three torque components
          double ax[3];
          rng_unit3(&ra, ax);
          const char* msg = mjs_setToMotor(a);
          if (msg && msg[0]) {
            set_err(err, err_size, "chain: actuator setup failed: %s", msg);
            fail = 1;
            break;
          }
          for (int c = 0; c < 3; c++) a->gear[c] = ax[c] * 10 * kin * scale;
          a->ctrllimited = a->forcelimited = a->actlimited = mjLIMITED_FALSE;
        } else if (set_actuator(a, jid % act_cycle, kin, scale, err, err_size)) {
          fail = 1;
          break;
        }
      }
    }
    parent = b;
  }
  free(off);
  free(quat);
  free(bodies);
  if (fail) {
    mj_deleteSpec(spec);
    return NULL;
  }
  return spec;
}

static mjModel* compile_spec(mjSpec* spec, char* err, int err_size) {
  mjModel* m = mj_compile(spec, NULL);
  if (!m) {
    const char* msg = mjs_getError(spec);
    set_err(err, err_size, "chain: compile failed: %s", msg && msg[0] ? msg : "(no message)");
  }
  return m;
}

mjModel* cfd_chain_generate(const cfd_chain_gen* g, char* err, int err_size) {
  mjSpec* spec = chain_spec(g, err, err_size);
  if (!spec) return NULL;
  mjModel* m = compile_spec(spec, err, err_size);
  mj_deleteSpec(spec);
  return m;
}

int cfd_chain_save_xml(const cfd_chain_gen* g, const char* path, char* err, int err_size) {
  mjSpec* spec = chain_spec(g, err, err_size);
  if (!spec) return 1;
  mjModel* m = compile_spec(spec, err, err_size);  // (the spec is saved as compiled)
  int st = !m;
  if (m) {
    char buf[1024] = "";
    st = !mj_saveXML(spec, path, buf, sizeof buf) ? 0 : 1;
    if (st) set_err(err, err_size, "chain: writing '%s': %s", path, buf[0] ? buf : "unknown error");
    mj_deleteModel(m);
  }
  mj_deleteSpec(spec);
  return st;
}

//------------------------------------------------------------------------------------------------
// loader

mjModel* cfd_load_model(const char* path_or_spec, char* err, int err_size) {
  if (!path_or_spec || !path_or_spec[0]) {
    set_err(err, err_size, "load: empty model path");
    return NULL;
  }
  if (strncmp(path_or_spec, "chain:", 6) == 0) {
    cfd_chain_gen g;
    if (cfd_chain_gen_parse(path_or_spec, &g, err, err_size)) return NULL;
    return cfd_chain_generate(&g, err, err_size);
  }

  size_t len = strlen(path_or_spec);
  if (len > 4 && !strcmp(path_or_spec + len - 4, ".mjb")) {  // MuJoCo's binary model
    FILE* f = fopen(path_or_spec, "rb");
    if (!f) {
      set_err(err, err_size, "load '%s': cannot open it", path_or_spec);
      return NULL;
    }
    fclose(f);
    mjModel* m = mj_loadModel(path_or_spec, NULL);
    if (!m) set_err(err, err_size, "load '%s': not a binary model of MuJoCo %s", path_or_spec, mj_versionString());
    return m;
  }
  char buf[1024] = "";
  mjModel* m = mj_loadXML(path_or_spec, NULL, buf, sizeof(buf));
  if (!m) {
    set_err(err, err_size, "load '%s': %s", path_or_spec, buf[0] ? buf : "unknown error");
  }
  return m;
}

int cfd_plugin_instance(const mjModel* m, const char* name) {
  for (int i = 0; i < m->nplugin; i++) {
    const mjpPlugin* p = mjp_getPluginAtSlot(m->plugin[i]);
    if (p && p->name && !strcmp(p->name, name)) return i;
  }
  return -1;
}

const char* cfd_plugin_config(const mjModel* m, int instance, const char* key) {
  if (instance < 0) return NULL;
  const char* v = mj_getPluginConfig(m, instance, key);
  return v && v[0] ? v : NULL;
}
