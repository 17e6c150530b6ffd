// gpu_tuning.h: the GPU kernels' variant knobs, for the benchmark (which measures the
// alternatives side by side) and the tests (which check every variant). Not part of the API: the
// defaults are the measured winners, and the knobs are process-wide, read at each launch.
#ifndef CHAINFD_GPU_TUNING_H
#define CHAINFD_GPU_TUNING_H

#ifdef __cplusplus
extern "C" {
#endif

// CFA's launch layout for one chain (threads per block, blocks per cluster); 0: chosen by n.
extern int cfd_gpu_cfa_threads;
extern int cfd_gpu_cfa_cluster;
// With cfd_gpu_cfa_profile set, each CFA launch records the end time of each of its phases for
// its first instance; cfd_gpu_cfa_phases gives the last launch's durations (us).
extern int cfd_gpu_cfa_profile;
int cfd_gpu_cfa_phases(double* us, int max);
// ABIA's batch kernel: 0 chosen by (n, B); 1 global lean scratch; 2 local lean; 3 local full;
// 4 a group of 8 lanes per instance; 5 world coordinates, local scratch (up to 32 links, else 6);
// 6 world coordinates, global scratch; 7 world coordinates, a group of lanes per instance, a link
// per lane (chains up to 32 links in joint frames, else 4); 8 world coordinates, a warp per
// instance, blocks of 32 links (chains in joint frames, else 4); 9 the same with a warp per block
// (chains in joint frames up to 256 links; longer ones 8, without joint frames 4); 10 scans over
// blocks of links, a cluster of up to 16 thread blocks per instance (abia_scan.cu). The choice
// (0) takes 10 where it would take 9 for more than 128 links. A split call keeps 9's resident
// kernel where 9 runs (up to 256 links); past that it runs 10 in two launches
// (cfd_gpu_abia_split_kind). A variant forced where it cannot run (a chain too long or without
// joint frames) is replaced as above; cfd_gpu_abia_ran says which kernel the last batch launch ran.
extern int cfd_gpu_abia_variant;
extern int cfd_gpu_abia_ran;
// The scan kernel's links per block (0: 2 for one instance, about n / 128 (2 to 8) from 2, n / 32
// (8 to 32) from 32; raised so that there are at most 256 blocks, 512 past 4096 links).
// cfd_gpu_abia_scan_chosen: the last launch's.
extern int cfd_gpu_abia_scan_links;
extern int cfd_gpu_abia_scan_chosen;
// The scan kernel's groups of 8 lanes (blocks of links) per thread block: 0 = 16 (32 past 4096
// links), else rounded down to a multiple of 4, from 4 to 32; raised where a thread block would have
// fewer groups than its cluster has thread blocks.
extern int cfd_gpu_abia_scan_groups;
// With cfd_gpu_abia_scan_profile set, the scan kernel records its phases' end times for its first
// instance; cfd_gpu_abia_scan_phases gives the last launch's durations (us): maps, velocity and
// Riccati scans, inertias, bias scan, bias, acceleration scan, accelerations. A split call's
// launches record their own stages only: the first maps and the two scans, the second inertias
// to accelerations.
extern int cfd_gpu_abia_scan_profile;
int cfd_gpu_abia_scan_phases(double* us, int max);
// How cuda.abia's split call (cfd_gpu_fd_begin) runs B states: 0 held on the host until finish,
// 1 the world warps' resident kernel (tau's share on the host), 2 the scan kernel's two launches.
int cfd_gpu_abia_split_kind(const struct cfd_gpu* g, int B);
// Rollouts by a group of lanes per instance (1, the default: chains up to 8 links at any batch, up
// to 32 links while B x group width <= 2^18, longer ones in batches up to 4096) or one thread per
// instance (0).
extern int cfd_gpu_rollout_lanes;
// Rollouts by lanes on chains up to 32 links: the ABA in world coordinates, a link per lane (1, the
// default: aba_world_lanes.cuh), and on chains of 33 to 256 links a warp per instance in blocks of
// 32 links (aba_world_blocks.cuh, B up to 4096); or in link frames (0: aba_lanes.cuh, with the
// link-frame lanes' own limits: state in shared memory up to 16 links and B = 8192, in global
// memory up to B = 4096).
extern int cfd_gpu_rollout_world;
// Rollouts of chains past 256 links in batches up to 1024: each step's dynamics by the scan kernel
// (1, the default: abia_scan.cu, two launches a step) or by the lanes (0); the steps so far taken
// that way (process-wide, for the tests).
extern int cfd_gpu_rollout_scan;
extern long cfd_gpu_rollout_scan_steps;
// The lanes kernels' backward sweep (aba_lanes.cuh): rows exchanged through shared memory (1, the
// default) or by warp shuffles (0).
extern int cfd_gpu_lanes_xch;
// ABIA's split call (cfd_gpu_fd_begin): its kernel stays resident between calls (1, the default)
// or leaves after each and is launched again at the next (0, for the benchmark's comparison);
// cfd_gpu_split_launches: how often a context has launched it.
extern int cfd_gpu_split_resident;
int cfd_gpu_split_launches(const struct cfd_gpu* g);

#ifdef __cplusplus
}
#endif

#endif  // CHAINFD_GPU_TUNING_H
