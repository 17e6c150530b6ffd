// peers_cpu.cpp: chainfd's fast CPU path against Pinocchio's ABA and MuJoCo's mj_forward, one
// state at a time, one core, double precision, in one process (no Python in any timed loop).
//
// For each model (an MJCF path or a "chain:..." spec of adapters/chain_gen.h):
//   1. MuJoCo compiles it; the problem is made the same for every engine: contacts and the
//      constraint solver off, actuation, springs and dampers off (mjDSBL_*), so MuJoCo's qacc is
//      (M(q) + diag(armature))^-1 (qfrc_applied - bias(q, qd)), which is what chainfd's
//      cfd_fd_fast_prepared(extra_diag = NULL) and Pinocchio's aba(q, v, tau) compute.
//   2. chainfd's chain from cfd_chain_from_model; cfd_fast_prepare once.
//   3. Pinocchio's model from MJCF: the compiled mjModel written back as MJCF (body frames at
//      qpos0, principal inertias, joint axes and anchors, armature), so Pinocchio's q is
//      qpos - qpos0, exactly chainfd's q, and parsed by pinocchio::mjcf::buildModel. (mjSpec-built
//      models have no XML for mj_saveLastXML, so every model takes this path, arm7 too.) With
//      --pin-build=manual, or when the parser throws, the model is built with the C++ API
//      from the same mjModel arrays instead; the line says which (pin_model=mjcf|manual).
//      Armature and gravity are then set from the mjModel, after checking what the parser read.
//   4. K seeded random states: q in [-pi, pi] (slides [-0.5, 0.5]), qd in [-2, 2], tau in
//      [-1, 1]; MuJoCo gets qpos = qpos0 + q, qvel = qd, qfrc_applied = tau.
//   5. Check: the three qacc on every state against each other and against cfd_fd_reference
//      (long-double refinement): max over states of |a - b|_inf / |b|_inf.
//   6. Timing: rounds of calls cycling over the K states, the engines interleaved in each round,
//      per-call time of each round, the median over rounds.
//
// Output: one line per (peer, model)
//   peer=NAME model=M n=N peer_us=X chainfd_us=Y ratio=Z
// with NAME pinocchio_aba and mujoco_forward (the must-show lines), then labelled extra lines
// (pinocchio_aba_world: aba with Convention::WORLD; mujoco_smooth: MuJoCo's dynamics alone, see
// time_mj_smooth) and one "check ..." line per model.

#include <pinocchio/algorithm/aba-derivatives.hpp>
#include <pinocchio/algorithm/aba.hpp>
#include <pinocchio/multibody.hpp>
#include <pinocchio/serialization.hpp>

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <mujoco/mujoco.h>

extern "C" {
#include "chain.h"
#include "chain_gen.h"
#include "chainfd_deriv.h"  // the public API, from the plugin's shared library
#include "mj_chain.h"
}
#include "mj_random.h"  // static inline splitmix64 (cfd_rng), C and C++ alike

namespace {

double now_s() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t k = v.size();
  return k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
}

// Median us per call of each engine fs[e] that runs[e]: calls per round from one calibration each
// (at least 5 ms or 3 calls), then `rounds` rounds with the engines interleaved in each; the call
// k of a round takes state k % K (through *sidx). Engines that do not run get NAN.
std::vector<double> time_interleaved(const std::vector<std::function<void()>>& fs, const std::vector<bool>& runs,
                                     int K, double round_s, int rounds, int* sidx) {
  const int E = (int)fs.size();
  std::vector<int> calls(E);
  for (int e = 0; e < E; e++) {
    if (!runs[e]) continue;
    double t0 = now_s();
    int k = 0;
    do {
      *sidx = k % K;
      fs[e]();
      k++;
    } while (now_s() - t0 < 5e-3 || k < 3);
    calls[e] = std::max(1, (int)(round_s / ((now_s() - t0) / k)));
  }
  std::vector<std::vector<double>> us(E);
  for (int r = 0; r < rounds; r++)
    for (int e = 0; e < E; e++) {
      if (!runs[e]) continue;
      double t0 = now_s();
      for (int k = 0; k < calls[e]; k++) {
        *sidx = k % K;
        fs[e]();
      }
      us[e].push_back(1e6 * (now_s() - t0) / calls[e]);
    }
  std::vector<double> med(E, NAN);
  for (int e = 0; e < E; e++)
    if (runs[e]) med[e] = median(us[e]);
  return med;
}

// max_s |a_s - b_s|_inf / |b_s|_inf
double rel_diff(const std::vector<double>& a, const std::vector<double>& b, int n, int K) {
  double worst = 0;
  for (int s = 0; s < K; s++) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
      num = std::max(num, std::fabs(a[s * n + i] - b[s * n + i]));
      den = std::max(den, std::fabs(b[s * n + i]));
    }
    worst = std::max(worst, num / (den > 0 ? den : 1));
  }
  return worst;
}

// The compiled model back as MJCF for Pinocchio: frames at qpos0, so no joint ref is written.
// Joint names are "jid<MuJoCo joint id>" so that Pinocchio's joints map back by name.
void write_mjcf(const mjModel* m, const std::string& path) {
  std::vector<std::vector<int>> kids(m->nbody);
  for (int b = 1; b < m->nbody; b++) kids[m->body_parentid[b]].push_back(b);
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "peers_cpu: cannot write %s\n", path.c_str());
    std::exit(2);
  }
  std::fprintf(f, "<mujoco model=\"peer\">\n  <compiler angle=\"radian\" inertiafromgeom=\"false\"/>\n");
  std::fprintf(f, "  <option gravity=\"%.17g %.17g %.17g\"/>\n  <worldbody>\n", m->opt.gravity[0],
               m->opt.gravity[1], m->opt.gravity[2]);
  std::function<void(int, int)> body = [&](int b, int depth) {
    std::string ind(depth < 4 ? 2 * depth + 4 : 12, ' ');  // bounded: deep chains
    const double* p = m->body_pos + 3 * b;
    const double* qt = m->body_quat + 4 * b;
    std::fprintf(f, "%s<body name=\"b%d\" pos=\"%.17g %.17g %.17g\" quat=\"%.17g %.17g %.17g %.17g\">\n",
                 ind.c_str(), b, p[0], p[1], p[2], qt[0], qt[1], qt[2], qt[3]);
    const double* ip = m->body_ipos + 3 * b;
    const double* iq = m->body_iquat + 4 * b;
    const double* in = m->body_inertia + 3 * b;
    std::fprintf(f,
                 "%s  <inertial pos=\"%.17g %.17g %.17g\" quat=\"%.17g %.17g %.17g %.17g\" "
                 "mass=\"%.17g\" diaginertia=\"%.17g %.17g %.17g\"/>\n",
                 ind.c_str(), ip[0], ip[1], ip[2], iq[0], iq[1], iq[2], iq[3], m->body_mass[b], in[0],
                 in[1], in[2]);
    for (int j = m->body_jntadr[b]; j >= 0 && j < m->body_jntadr[b] + m->body_jntnum[b]; j++) {
      const char* type = m->jnt_type[j] == mjJNT_HINGE ? "hinge" : "slide";
      const double* a = m->jnt_axis + 3 * j;
      const double* jp = m->jnt_pos + 3 * j;
      std::fprintf(f,
                   "%s  <joint name=\"jid%d\" type=\"%s\" axis=\"%.17g %.17g %.17g\" "
                   "pos=\"%.17g %.17g %.17g\" armature=\"%.17g\" limited=\"false\"/>\n",
                   ind.c_str(), j, type, a[0], a[1], a[2], jp[0], jp[1], jp[2],
                   m->dof_armature[m->jnt_dofadr[j]]);
    }
    for (int k : kids[b]) body(k, depth + 1);
    std::fprintf(f, "%s</body>\n", ind.c_str());
  };
  for (int k : kids[0]) body(k, 0);
  std::fprintf(f, "  </worldbody>\n</mujoco>\n");
  std::fclose(f);
}

// The same model with Pinocchio's C++ API, from the mjModel arrays (the fallback).
void build_manual(const mjModel* m, pinocchio::Model& pm) {
  using pinocchio::SE3;
  pm = pinocchio::Model();
  auto quat = [](const double* q) {
    Eigen::Quaterniond e(q[0], q[1], q[2], q[3]);
    return e.normalized().toRotationMatrix();
  };
  // for each MuJoCo body: the Pinocchio joint it moves with, and its frame in that joint's frame
  std::vector<pinocchio::JointIndex> jof(m->nbody, 0);
  std::vector<SE3> in_joint(m->nbody, SE3::Identity());
  for (int b = 1; b < m->nbody; b++) {
    int par = m->body_parentid[b];
    SE3 local(quat(m->body_quat + 4 * b), Eigen::Vector3d(m->body_pos + 3 * b));
    SE3 T = in_joint[par] * local;  // body frame in the parent's joint frame
    pinocchio::JointIndex cur = jof[par];
    for (int j = m->body_jntadr[b]; j >= 0 && j < m->body_jntadr[b] + m->body_jntnum[b]; j++) {
      Eigen::Vector3d axis(m->jnt_axis + 3 * j), jp(m->jnt_pos + 3 * j);
      SE3 place = T * SE3(Eigen::Matrix3d::Identity(), jp);
      std::string name = "jid" + std::to_string(j);
      if (m->jnt_type[j] == mjJNT_HINGE)
        cur = pm.addJoint(cur, pinocchio::JointModelRevoluteUnaligned(axis), place, name);
      else
        cur = pm.addJoint(cur, pinocchio::JointModelPrismaticUnaligned(axis), place, name);
      T = SE3(Eigen::Matrix3d::Identity(), -jp);  // body frame in this joint's frame
    }
    jof[b] = cur;
    in_joint[b] = T;
    Eigen::Matrix3d R = quat(m->body_iquat + 4 * b);
    Eigen::Matrix3d Ic = R * Eigen::Vector3d(m->body_inertia + 3 * b).asDiagonal() * R.transpose();
    pinocchio::Inertia Y(m->body_mass[b], Eigen::Vector3d(m->body_ipos + 3 * b), pinocchio::Symmetric3(Ic));
    pm.appendBodyToJoint(cur, T.act(Y), SE3::Identity());
  }
}

struct Args {
  int K = 32;          // states
  int rounds = 21;     // timing rounds (median over them)
  double round_s = 0.02;  // target time per engine per round
  bool manual = false;
  std::string xml_dir = ".";
  std::string helper = "pin_mjcf2bin";
  long mem_gb = 0;  // address-space limit (0: 3/4 of physical memory)
  std::vector<std::string> models;
};

}  // namespace

int main(int argc, char** argv) {
  Args A;
  for (int i = 1; i < argc; i++) {
    std::string s = argv[i];
    if (s.rfind("--states=", 0) == 0) A.K = std::atoi(s.c_str() + 9);
    else if (s.rfind("--rounds=", 0) == 0) A.rounds = std::atoi(s.c_str() + 9);
    else if (s.rfind("--round-ms=", 0) == 0) A.round_s = 1e-3 * std::atof(s.c_str() + 11);
    else if (s == "--pin-build=manual") A.manual = true;
    else if (s.rfind("--xml-dir=", 0) == 0) A.xml_dir = s.substr(10);
    else if (s.rfind("--mjcf-helper=", 0) == 0) A.helper = s.substr(14);
    else if (s.rfind("--mem-gb=", 0) == 0) A.mem_gb = std::atol(s.c_str() + 9);
    else A.models.push_back(s);
  }
  if (A.models.empty()) {
    std::fprintf(stderr, "usage: peers_cpu [--states=K] [--rounds=R] [--round-ms=T] "
                         "[--pin-build=manual] [--xml-dir=D] [--mjcf-helper=PATH] MODEL...\n");
    return 2;
  }
  // one core: the last CPU (the timing loop is single-threaded anyway; this keeps it from moving)
  {
    cpu_set_t set;
    CPU_ZERO(&set);
    int last = 0;
    cpu_set_t cur;
    if (sched_getaffinity(0, sizeof cur, &cur) == 0)
      for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &cur)) last = c;
    CPU_SET(last, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) std::perror("sched_setaffinity");
  }
  if (A.mem_gb <= 0) A.mem_gb = std::max(1L, (long)(0.75 * sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE) / 1e9));
  {
    rlimit rl;
    rl.rlim_cur = rl.rlim_max = (rlim_t)A.mem_gb * 1000000000ull;
    if (setrlimit(RLIMIT_AS, &rl) != 0) std::perror("setrlimit");
  }
  int failures = 0;
  for (const std::string& spec : A.models) {
    char err[1024] = "";
    mjModel* m = cfd_load_model(spec.c_str(), err, sizeof err);
    std::string label = spec;
    if (spec.rfind("chain:", 0) == 0) {
      label = "chain" + spec.substr(6, spec.find(',') == std::string::npos ? std::string::npos : spec.find(',') - 6);
    } else {
      size_t sl = spec.find_last_of('/');
      label = spec.substr(sl == std::string::npos ? 0 : sl + 1);
      if (label.size() > 4 && label.substr(label.size() - 4) == ".xml") label.resize(label.size() - 4);
    }
    if (!m) {
      std::printf("error model=%s: MuJoCo could not load it: %s\n", label.c_str(), err);
      failures++;
      continue;
    }
    m->opt.disableflags |= mjDSBL_CONSTRAINT | mjDSBL_CONTACT | mjDSBL_ACTUATION | mjDSBL_SPRING |
                           mjDSBL_DAMPER;
    mjData* d = mj_makeData(m);
    cfd_chain c;
    if (cfd_chain_from_model(m, &c, err, sizeof err)) {
      std::printf("error model=%s: chainfd refused it: %s\n", label.c_str(), err);
      failures++;
      mj_deleteData(d);
      mj_deleteModel(m);
      continue;
    }
    const int n = c.n, K = A.K;

    // ---- Pinocchio's model
    pinocchio::Model pm;
    std::string how = "mjcf";
    std::string xml = A.xml_dir + "/" + label + ".pin.xml";
    write_mjcf(m, xml);
    if (A.manual) {
      how = "manual";
      build_manual(m, pm);
    } else {
      // the parse runs in pin_mjcf2bin (see there why), the model comes back serialized
      std::string bin = A.xml_dir + "/" + label + ".pin.bin";
      // (under a 4 GB address-space limit: on deep chains the parser's memory explodes, and it
      // should fail with its own message rather than bring the machine's OOM killer)
      std::string log = A.xml_dir + "/" + label + ".pin.log";
      std::string cmd = "(ulimit -v 4000000; '" + A.helper + "' '" + xml + "' '" + bin + "') >'" + log + "' 2>&1";
      std::remove(bin.c_str());
      int rc = std::system(cmd.c_str());
      bool ok = rc == 0;
      std::string why;
      if (!ok) {
        std::ifstream in(log);
        for (std::string line; std::getline(in, line);)
          if (!line.empty()) why = line;
      }
      if (ok) {
        try {
          pinocchio::serialization::loadFromBinary(pm, bin);
        } catch (const std::exception& e) {
          ok = false;
          why = std::string("loadFromBinary: ") + e.what();
        }
      }
      if (!ok) {
        std::printf("note model=%s: pinocchio::mjcf::buildModel failed (exit %d: %s); Pinocchio's model "
                    "is built with its C++ API from the same mjModel arrays instead (pin_model=manual)\n",
                    label.c_str(), rc, why.c_str());
        how = "manual";
        build_manual(m, pm);
      }
    }
    if (pm.nq != n || pm.nv != n) {
      std::printf("error model=%s: Pinocchio's model has nq=%d nv=%d, the chain n=%d\n", label.c_str(),
                  (int)pm.nq, (int)pm.nv, n);
      failures++;
      continue;
    }
    // Pinocchio's dof of each chain link, by joint name
    std::vector<int> pin_v(n, -1);
    for (int i = 0; i < n; i++) {
      std::string nm = "jid" + std::to_string(c.jnt[i]);
      if (!pm.existJointName(nm)) break;
      pin_v[i] = pm.joints[pm.getJointId(nm)].idx_v();
    }
    if (std::count(pin_v.begin(), pin_v.end(), -1)) {
      std::printf("error model=%s: Pinocchio's joints do not map onto the chain's by name\n", label.c_str());
      failures++;
      continue;
    }
    // what the parser read, then the identical values
    double arm_diff = 0;
    for (int i = 0; i < n; i++) arm_diff = std::max(arm_diff, std::fabs(pm.armature[pin_v[i]] - c.armature[i]));
    Eigen::Vector3d g(m->opt.gravity);
    double grav_diff = (pm.gravity.linear() - g).cwiseAbs().maxCoeff();
    for (int i = 0; i < n; i++) pm.armature[pin_v[i]] = c.armature[i];
    pm.gravity.linear(g);
    pm.gravity.angular().setZero();
    // Pinocchio 4.1's Data grows like n^3 in memory on a serial chain (measured here: 0.28 GB at
    // n = 200, 2.1 GB at n = 400): under the address-space limit set in main, a Data too large
    // for this machine is a bad_alloc, reported, instead of the OOM killer.
    std::unique_ptr<pinocchio::Data> pdp;
    std::string pin_why;
    try {
      pdp.reset(new pinocchio::Data(pm));
    } catch (const std::bad_alloc&) {
      pin_why = "pinocchio::Data(model) could not be allocated (std::bad_alloc under the "
                "address-space limit of " + std::to_string(A.mem_gb) + " GB)";
    }
    const bool pin_ok = (bool)pdp;
    if (!pin_ok) std::printf("error model=%s: Pinocchio cannot run it: %s\n", label.c_str(), pin_why.c_str());
    pinocchio::Data dummy_data;
    pinocchio::Data& pd = pin_ok ? *pdp : dummy_data;

    // ---- states
    cfd_rng rng{0x5eed0000ull + 1};
    std::vector<double> q(K * n), qd(K * n), tau(K * n);
    for (int s = 0; s < K; s++)
      for (int i = 0; i < n; i++) {
        int jt = m->jnt_type[c.jnt[i]];
        q[s * n + i] = jt == mjJNT_SLIDE ? cfd_rng_uniform(&rng, -0.5, 0.5) : cfd_rng_uniform(&rng, -M_PI, M_PI);
        qd[s * n + i] = cfd_rng_uniform(&rng, -2, 2);
        tau[s * n + i] = cfd_rng_uniform(&rng, -1, 1);
      }
    // Pinocchio's vectors in its own dof order
    std::vector<Eigen::VectorXd> pq(K, Eigen::VectorXd(n)), pv(K, Eigen::VectorXd(n)), pt(K, Eigen::VectorXd(n));
    for (int s = 0; s < K; s++)
      for (int i = 0; i < n; i++) {
        pq[s][pm.joints[pm.getJointId("jid" + std::to_string(c.jnt[i]))].idx_q()] = q[s * n + i];
        pv[s][pin_v[i]] = qd[s * n + i];
        pt[s][pin_v[i]] = tau[s * n + i];
      }
    // MuJoCo's qpos, qvel, qfrc_applied per state
    std::vector<double> mq(K * m->nq), mv(K * m->nv, 0.0), mt(K * m->nv, 0.0);
    for (int s = 0; s < K; s++) {
      std::memcpy(&mq[s * m->nq], m->qpos0, sizeof(double) * m->nq);
      for (int i = 0; i < n; i++) {
        mq[s * m->nq + c.qpos[i]] = c.qpos0[i] + q[s * n + i];
        mv[s * m->nv + c.dof[i]] = qd[s * n + i];
        mt[s * m->nv + c.dof[i]] = tau[s * n + i];
      }
    }
    auto mj_set = [&](int s) {
      std::memcpy(d->qpos, &mq[s * m->nq], sizeof(double) * m->nq);
      std::memcpy(d->qvel, &mv[s * m->nv], sizeof(double) * m->nv);
      std::memcpy(d->qfrc_applied, &mt[s * m->nv], sizeof(double) * m->nv);
    };
    // MuJoCo's dynamics alone: kinematics, com frames, M (CRB + armature), its factor, velocities,
    // the bias by RNE, and the solve. No collision, tendons, transmission, sensors, energy,
    // passive or actuation stages, which mj_forward runs (or checks and skips) as well.
    std::vector<double> rhs(m->nv);
    auto mj_smooth = [&]() {
      mj_kinematics(m, d);
      mj_comPos(m, d);
      mj_makeM(m, d);
      mj_factorM(m, d);
      mj_comVel(m, d);
      mj_rne(m, d, 0, d->qfrc_bias);
      for (int i = 0; i < m->nv; i++) rhs[i] = d->qfrc_applied[i] - d->qfrc_bias[i];
      mj_solveM(m, d, d->qacc, rhs.data(), 1);
    };

    // ---- chainfd
    std::vector<double> work(cfd_fast_work_size(n) + 16);
    int prep = cfd_fast_prepare(&c, work.data());

    // ---- correctness
    std::vector<double> a_cfd(K * n), a_pin(K * n), a_pinw(K * n), a_mj(K * n), a_mjs(K * n), a_ref(K * n);
    int st = 0;
    for (int s = 0; s < K; s++) {
      st |= cfd_fd_fast_prepared(&c, &q[s * n], &qd[s * n], &tau[s * n], NULL, &a_cfd[s * n], work.data());
      cfd_fd_reference(&c, &q[s * n], &qd[s * n], &tau[s * n], NULL, &a_ref[s * n]);
      if (pin_ok) {
        pinocchio::aba(pm, pd, pq[s], pv[s], pt[s]);
        for (int i = 0; i < n; i++) a_pin[s * n + i] = pd.ddq[pin_v[i]];
        pinocchio::aba(pm, pd, pq[s], pv[s], pt[s], pinocchio::Convention::WORLD);
        for (int i = 0; i < n; i++) a_pinw[s * n + i] = pd.ddq[pin_v[i]];
      } else {
        for (int i = 0; i < n; i++) a_pin[s * n + i] = a_pinw[s * n + i] = NAN;
      }
      mj_set(s);
      mj_forward(m, d);
      for (int i = 0; i < n; i++) a_mj[s * n + i] = d->qacc[c.dof[i]];
      mj_smooth();
      for (int i = 0; i < n; i++) a_mjs[s * n + i] = d->qacc[c.dof[i]];
    }
    double d_pin_cfd = rel_diff(a_pin, a_cfd, n, K), d_pin_mj = rel_diff(a_pin, a_mj, n, K),
           d_cfd_mj = rel_diff(a_cfd, a_mj, n, K), d_pinw = rel_diff(a_pinw, a_pin, n, K),
           d_mjs = rel_diff(a_mjs, a_mj, n, K), r_pin = rel_diff(a_pin, a_ref, n, K),
           r_cfd = rel_diff(a_cfd, a_ref, n, K), r_mj = rel_diff(a_mj, a_ref, n, K);
    if (!pin_ok) d_pin_cfd = d_pin_mj = d_pinw = r_pin = NAN;
    const double tol = 1e-9;
    // OK: every pair within tol. ROUNDING: a pair beyond tol but within 1e-6, the engine off the
    // long-double reference named (a dense factor's rounding on an ill-conditioned long chain, not
    // another problem: a wrong frame, armature or gravity shows at 1e-3 and above). DISAGREE: beyond
    // 1e-6, a failure (exit 1).
    double worst = std::max(d_cfd_mj, pin_ok ? std::max(d_pin_cfd, d_pin_mj) : 0.0);
    std::string off;
    if (r_cfd > tol) off += "chainfd,";
    if (pin_ok && r_pin > tol) off += "pinocchio,";
    if (r_mj > tol) off += "mujoco,";
    if (!off.empty()) off.pop_back();
    bool agree = st == 0 && worst <= 1e-6;
    std::string verdict = st != 0 ? "DISAGREE(chainfd status " + std::to_string(st) + ")"
                          : worst <= tol ? "OK"
                          : worst <= 1e-6 ? "ROUNDING(off the reference by more than tol: " + off + ")"
                                          : "DISAGREE";
    std::printf("check model=%s n=%d pin_model=%s pin_vs_chainfd=%.2e pin_vs_mujoco=%.2e "
                "chainfd_vs_mujoco=%.2e vs_reference: pin=%.2e chainfd=%.2e mujoco=%.2e "
                "(pin_world_vs_local=%.2e mj_smooth_vs_forward=%.2e) parser_armature_diff=%.1e "
                "parser_gravity_diff=%.1e prepare=%d tol=%.0e %s\n",
                label.c_str(), n, how.c_str(), d_pin_cfd, d_pin_mj, d_cfd_mj, r_pin, r_cfd, r_mj, d_pinw,
                d_mjs, how == "mjcf" ? arm_diff : NAN, how == "mjcf" ? grav_diff : NAN, prep, tol, verdict.c_str());
    std::fflush(stdout);
    if (!agree) failures++;

    // ---- timing: calls per round from one calibration call each, engines interleaved per round
    volatile double sink = 0;
    int sidx = 0;
    auto f_cfd = [&]() {
      int s = sidx;
      cfd_fd_fast_prepared(&c, &q[s * n], &qd[s * n], &tau[s * n], NULL, &a_cfd[s * n], work.data());
      sink = sink + a_cfd[s * n];
    };
    auto f_pin = [&]() {
      pinocchio::aba(pm, pd, pq[sidx], pv[sidx], pt[sidx]);
      sink = sink + pd.ddq[0];
    };
    auto f_pinw = [&]() {
      pinocchio::aba(pm, pd, pq[sidx], pv[sidx], pt[sidx], pinocchio::Convention::WORLD);
      sink = sink + pd.ddq[0];
    };
    auto f_mj = [&]() {
      mj_set(sidx);
      mj_forward(m, d);
      sink = sink + d->qacc[0];
    };
    auto f_mjs = [&]() {
      mj_set(sidx);
      mj_smooth();
      sink = sink + d->qacc[0];
    };
    std::vector<std::function<void()>> fs = {f_cfd, f_pin, f_pinw, f_mj, f_mjs};
    std::vector<bool> runs = {true, pin_ok, pin_ok, true, true};
    const char* names[] = {"chainfd_fast", "pinocchio_aba", "pinocchio_aba_world", "mujoco_forward",
                           "mujoco_smooth"};
    const int E = (int)fs.size();
    std::vector<double> med = time_interleaved(fs, runs, K, A.round_s, A.rounds, &sidx);
    double t_cfd = med[0];
    for (int e = 1; e < E; e++) {
      if (!runs[e]) {
        std::printf("peer=%s model=%s n=%d peer_us=NA chainfd_us=%.4g ratio=NA\n", names[e], label.c_str(), n,
                    t_cfd);
        continue;
      }
      double t = med[e];
      std::printf("peer=%s model=%s n=%d peer_us=%.4g chainfd_us=%.4g ratio=%.3g\n", names[e], label.c_str(), n,
                  t, t_cfd, t / t_cfd);
    }
    std::fflush(stdout);

    // ---- derivatives: d qacc / d(q, qvel) at tau = 0, chainfd_deriv_qacc (its CPU path, from
    // mjData's qpos and qvel) against Pinocchio's computeABADerivatives. Only where the two
    // differentiate the same function: no actuators, springs or damping (chainfd's derivatives
    // take those forces' own derivatives; Pinocchio's take tau as given)
    bool passive = m->nu > 0;
    for (int i = 0; i < m->nv; i++) passive = passive || m->dof_damping[i] != 0;
    for (int j = 0; j < m->njnt; j++) passive = passive || m->jnt_stiffness[j] != 0;
    chainfd_deriv* dv = nullptr;
    if (passive || !pin_ok) {
      std::printf("note model=%s: derivatives not compared (%s)\n", label.c_str(),
                  !pin_ok ? "no Pinocchio Data" : "actuators, springs or damping: not the same function");
    } else if (chainfd_deriv_create(m, CHAINFD_CPU, &dv, err, sizeof err)) {
      std::printf("error model=%s: chainfd_deriv_create: %s\n", label.c_str(), err);
      failures++;
    } else {
      const int nv = m->nv;
      std::vector<double> dq(nv * nv), dqv(nv * nv), qa(nv);
      Eigen::VectorXd zero = Eigen::VectorXd::Zero(n);
      double worst_q = 0, worst_v = 0;
      int dst = 0;
      for (int s = 0; s < K; s++) {
        mj_set(s);
        mju_zero(d->qfrc_applied, nv);
        dst |= chainfd_deriv_qacc(dv, m, d, qa.data(), dq.data(), dqv.data(), NULL, err, sizeof err);
        pinocchio::computeABADerivatives(pm, pd, pq[s], pv[s], zero);
        double nq = 0, nvv = 0, eq = 0, ev = 0;
        for (int i = 0; i < n; i++)
          for (int j = 0; j < n; j++) {
            double a = dq[c.dof[i] * nv + c.dof[j]], b = pd.ddq_dq(pin_v[i], pin_v[j]);
            double av = dqv[c.dof[i] * nv + c.dof[j]], bv = pd.ddq_dv(pin_v[i], pin_v[j]);
            eq = std::max(eq, std::fabs(a - b)), nq = std::max(nq, std::fabs(b));
            ev = std::max(ev, std::fabs(av - bv)), nvv = std::max(nvv, std::fabs(bv));
          }
        worst_q = std::max(worst_q, eq / nq), worst_v = std::max(worst_v, ev / nvv);
      }
      bool ok = dst == 0 && worst_q <= 1e-6 && worst_v <= 1e-6;
      std::printf("deriv_check model=%s n=%d dq_rel=%.2e dqvel_rel=%.2e %s\n", label.c_str(), n, worst_q,
                  worst_v, ok ? "OK" : (dst ? ("chainfd: " + std::string(err)).c_str() : "DISAGREE"));
      if (!ok) failures++;
      auto g_cfd = [&]() {
        mj_set(sidx);
        mju_zero(d->qfrc_applied, nv);
        chainfd_deriv_qacc(dv, m, d, qa.data(), dq.data(), dqv.data(), NULL, err, sizeof err);
        sink = sink + dq[0];
      };
      auto g_pin = [&]() {
        pinocchio::computeABADerivatives(pm, pd, pq[sidx], pv[sidx], zero);
        sink = sink + pd.ddq_dq(0, 0);
      };
      std::vector<double> gmed = time_interleaved({g_cfd, g_pin}, {true, true}, K, A.round_s, A.rounds, &sidx);
      double tc = gmed[0], tp = gmed[1];
      std::printf("peer=pinocchio_aba_derivatives model=%s n=%d peer_us=%.4g chainfd_us=%.4g ratio=%.3g "
                  "(d qacc / d(q, qvel); chainfd_deriv_qacc, its qacc included)\n",
                  label.c_str(), n, tp, tc, tp / tc);
      std::fflush(stdout);
      chainfd_deriv_free(dv);
    }
    (void)sink;
    cfd_chain_free(&c);
    mj_deleteData(d);
    mj_deleteModel(m);
  }
  return failures ? 1 : 0;
}
