// spatial.h: dense spatial-algebra steps shared by the reference algorithms (CPU and CUDA).
#ifndef CHAINFD_SPATIAL_H
#define CHAINFD_SPATIAL_H

#include "cfd_math.h"

// out = G^T I G for G = Ad_{T^-1}, T = (R, p) the child's pose in its parent: moves a child-frame
// (articulated or composite) inertia into the parent frame.
CFD_HD void cfd_inertia_to_parent(const double R[9], const double p[3], const double I[36],
                                  double out[36]) {
  double G[36], IG[36];
  cfd_ad_inv_mat(R, p, G);
  cfd_mat6_mul(I, 0, G, 0, IG);
  cfd_mat6_mul(G, 1, IG, 0, out);
}

#endif  // CHAINFD_SPATIAL_H
