// id_scan.cuh: inverse dynamics as scans ([SCAN] section III) for the threads of one block or
// one thread-block cluster that share a chain. In the world frame the recursions of cpu/id_cpu.c
// become sums:
//   T_i  = T_{i-1} f_{i-1,i}(q_i)              a scan under SE(3) composition
//   S^w_i = Ad_{T_i} S_i
//   V_i  = sum_{k<=i} S^w_k qd_k                a prefix sum
//   a_i  = -g + sum_{k<=i} (ad_{V_k} S^w_k qd_k + S^w_k qdd_k)   a prefix sum (qdd = 0: the bias)
//   F_i  = sum_{k>=i} (J^w_k a_k - ad*_{V_k} J^w_k V_k)   a suffix sum
//   tau_i = S^w_i^T F_i
// Each thread owns a run of consecutive links: it reduces its run serially, the block scans the
// runs' totals (warp shuffles, then the warps' totals through shared memory), the blocks of a
// cluster pass their totals on (block_scan.cuh), and each thread then sweeps its run again.
#ifndef CHAINFD_ID_SCAN_CUH
#define CHAINFD_ID_SCAN_CUH

#include "block_scan.cuh"
#include "chain.h"

// Shared doubles id_chain needs for T threads per block: two scan buffers (poses 12T, sums 6T)
// and the cluster totals.
#define ID_SHARED_DOUBLES(T) ((size_t)18 * (T) + 12 * CFD_MAX_CLUSTER)

// tau_out = ID(q, qd, qdd) for one chain (qdd NULL: the bias torques). gt: this thread's index
// among the GT threads of its cluster (rank * blockDim + threadIdx). w: the instance's ID scratch
// (CFD_ID_WORK doubles): local poses 12n, world poses 12n, world screws 6n, velocities 6n,
// accelerations 6n, which later steps (CFA's blocks) read. Every thread of the cluster must call.
// reuse: q and qd are those of the previous call on w, whose poses, world screws and velocities
// still hold (CFA's refinement: only qdd changes), so only the acceleration and force scans run.
// solo: one block of a cluster runs it alone (gt = threadIdx.x, GT = blockDim.x), with no
// cluster barriers (cuda/cfa.cu, for chains short enough for one block).
static __device__ void id_chain(const cfd_chain& c, const double* __restrict__ qb,
                                const double* __restrict__ qdb, const double* qddb,
                                double* tau_out, double* w, double* shared, int gt, int GT,
                                bool reuse = false, bool solo = false) {
  int n = c.n, t = threadIdx.x, T = blockDim.x;
  int L = (n + GT - 1) / GT, i0 = min(n, gt * L), i1 = min(n, i0 + L);
  double* shA = shared;  // the scans alternate buffers (block_scan.cuh); only A holds poses
  double* shB = shared + 12 * T;
  double* tot = shared + 18 * T;
  double* lp = w;             // local poses
  double* wp = lp + 12 * n;   // world poses
  double* Sw = wp + 12 * n;   // world screws
  double* V = Sw + 6 * n;     // world velocities
  double* A = V + 6 * n;      // world accelerations

  __syncthreads();  // the last call's readers of the scan buffers are done
  double Vr[6] = {0, 0, 0, 0, 0, 0};
  if (!reuse) {  // poses, world screws and the velocity scan
    // poses: local ones, the run's composition, then the scan
    double agg[12];
    pose_identity(agg);
    for (int i = i0; i < i1; i++) {
      double Re[9], pe[3], Rl[9], pl[3];
      cfd_screw_exp(c.screw + 6 * i, qb[i], Re, pe);
      cfd_se3_mul(c.home_R + 9 * i, c.home_p + 3 * i, Re, pe, Rl, pl);
      for (int k = 0; k < 9; k++) lp[12 * i + k] = Rl[k];
      for (int k = 0; k < 3; k++) lp[12 * i + 9 + k] = pl[k];
      double tmp[12];
      pose_compose(agg, lp + 12 * i, tmp);
      for (int k = 0; k < 12; k++) agg[k] = tmp[k];
    }
    for (int k = 0; k < 12; k++) shA[12 * t + k] = agg[k];
    __syncthreads();
    block_scan_poses(shA);
    double Wt[12];
    if (solo) pose_identity(Wt);
    else cluster_pose_prefix(shA, tot, Wt);
    if (t > 0) {
      double tmp[12];
      pose_compose(Wt, shA + 12 * (t - 1), tmp);
      for (int k = 0; k < 12; k++) Wt[k] = tmp[k];
    }

    // world poses and screws; velocity contributions S^w qd
    double vsum[6] = {0, 0, 0, 0, 0, 0};
    for (int i = i0; i < i1; i++) {
      double tmp[12];
      pose_compose(Wt, lp + 12 * i, tmp);
      for (int k = 0; k < 12; k++) Wt[k] = wp[12 * i + k] = tmp[k];
      const double* S = c.screw + 6 * i;
      double s[6], pxw[3];
      cfd_rot(Wt, S, s);          // Ad_T S = [R w; R v + p x R w]
      cfd_rot(Wt, S + 3, s + 3);
      cfd_cross(Wt + 9, s, pxw);
      for (int k = 0; k < 3; k++) s[3 + k] += pxw[k];
      for (int k = 0; k < 6; k++) {
        Sw[6 * i + k] = s[k];
        vsum[k] += s[k] * qdb[i];
      }
    }
    for (int k = 0; k < 6; k++) shB[6 * t + k] = vsum[k];
    __syncthreads();
    block_scan_sum(shB, 6, false);
    if (!solo) cluster_sum_prefix(shB, tot, 6, false, Vr);
    if (t > 0) for (int k = 0; k < 6; k++) Vr[k] += shB[6 * (t - 1) + k];
    for (int i = i0; i < i1; i++)  // velocities
      for (int k = 0; k < 6; k++) V[6 * i + k] = Vr[k] += Sw[6 * i + k] * qdb[i];
  }
  // acceleration contributions ad_V S^w qd (+ S^w qdd)
  double asum[6] = {0, 0, 0, 0, 0, 0};
  for (int i = i0; i < i1; i++) {
    double sq[6], ca[6];
    for (int k = 0; k < 6; k++) sq[k] = Sw[6 * i + k] * qdb[i];
    cfd_ad(V + 6 * i, sq, ca);
    if (qddb)
      for (int k = 0; k < 6; k++) ca[k] += Sw[6 * i + k] * qddb[i];
    for (int k = 0; k < 6; k++) {
      A[6 * i + k] = ca[k];
      asum[k] += ca[k];
    }
  }
  for (int k = 0; k < 6; k++) shA[6 * t + k] = asum[k];
  __syncthreads();
  block_scan_sum(shA, 6, false);
  double Ar[6];
  if (solo) for (int k = 0; k < 6; k++) Ar[k] = 0;
  else cluster_sum_prefix(shA, tot, 6, false, Ar);
  for (int k = 0; k < 3; k++) Ar[3 + k] -= c.gravity[k];
  if (t > 0) for (int k = 0; k < 6; k++) Ar[k] += shA[6 * (t - 1) + k];

  // accelerations; each link's own wrench, summed from the tip
  double fsum[6] = {0, 0, 0, 0, 0, 0};
  for (int i = i0; i < i1; i++) {
    for (int k = 0; k < 6; k++) {
      Ar[k] += A[6 * i + k];
      A[6 * i + k] = Ar[k];
    }
    // J^w x = Ad_{T^-1}^T J Ad_{T^-1} x
    const double* Ti = wp + 12 * i;
    const double* Vi = V + 6 * i;
    double xl[6], Jx[6], JVw[6], Jaw[6], gyro[6];
    cfd_twist_to_child(Ti, Ti + 9, Vi, xl);
    cfd_mat6_vec(c.inertia + 36 * i, xl, Jx);
    cfd_wrench_to_parent(Ti, Ti + 9, Jx, JVw);
    cfd_twist_to_child(Ti, Ti + 9, Ar, xl);
    cfd_mat6_vec(c.inertia + 36 * i, xl, Jx);
    cfd_wrench_to_parent(Ti, Ti + 9, Jx, Jaw);
    cfd_neg_adstar(Vi, JVw, gyro);
    for (int k = 0; k < 6; k++) {
      double f = Jaw[k] + gyro[k];
      A[6 * i + k] = f;  // A now holds the link's own wrench
      fsum[k] += f;
    }
  }
  for (int k = 0; k < 6; k++) shB[6 * t + k] = fsum[k];
  __syncthreads();
  block_scan_sum(shB, 6, true);
  double Fr[6];
  if (solo) for (int k = 0; k < 6; k++) Fr[k] = 0;
  else cluster_sum_prefix(shB, tot, 6, true, Fr);
  if (t + 1 < T) for (int k = 0; k < 6; k++) Fr[k] += shB[6 * (t + 1) + k];
  for (int i = i1 - 1; i >= i0; i--) {
    for (int k = 0; k < 6; k++) Fr[k] += A[6 * i + k];
    tau_out[i] = cfd_dot6(Sw + 6 * i, Fr);
  }
}

#endif  // CHAINFD_ID_SCAN_CUH
