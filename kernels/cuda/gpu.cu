// The GPU context: the chain on the device, buffers reused across calls, transfers, chunking of
// huge batches, and every CUDA failure turned into a message.
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aba_core.h"
#include "aba_tree.h"
#include "aba_world_tree.h"
#include "aba_lanes.cuh"
#include "aba_scan.h"
#include "aba_world_tau.h"
#include "cfa_blocks.h"
#include "gpu_internal.h"

#define MAX_GRID_Y 65535                    // instances per launch of the link-parallel kernels
#define WORK_BUDGET ((size_t)4 << 30)        // bytes of scratch per chunk of a huge batch

static int fail(char* err, int size, const char* what, cudaError_t e) {
  if (err && size > 0) snprintf(err, size, "%s: %s", what, cudaGetErrorString(e));
  return 1;
}

int cfd_gpu_device_count(void) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" state
    return 0;
  }
  return count;
}

int cfd_gpu_device_name(int device, char* buf, int size) {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return 1;
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  snprintf(buf, size, "%s (sm_%d%d, %.1f GiB, %d SMs, driver %d, runtime %d)", p.name, p.major,
           p.minor, p.totalGlobalMem / 1073741824.0, p.multiProcessorCount, driver, runtime);
  return 0;
}

__global__ void residual_kernel(cfd_chain c, int B, const double* __restrict__ tau,
                                const double* __restrict__ extra, const double* __restrict__ id,
                                const double* __restrict__ qacc, double* __restrict__ r) {
  long k = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= (long)B * c.n) return;
  int i = (int)(k % c.n);
  r[k] = tau[k] - id[k] - (c.armature[i] + (extra ? extra[k] : 0)) * qacc[k];
}

cudaError_t cfd_gpu_launch_residual(cfd_gpu* g, int B, const double* tau, const double* extra,
                                    const double* id, const double* qacc, double* r) {
  long total = (long)B * g->n;
  residual_kernel<<<(unsigned)((total + 255) / 256), 256, 0, g->stream>>>(g->chain, B, tau, extra, id,
                                                                           qacc, r);
  return cudaGetLastError();
}

size_t cfd_gpu_device_memory(int device) {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return p.totalGlobalMem;
}

size_t cfd_gpu_work_per_instance(cfd_gpu_algorithm alg, int n) {
  switch (alg) {
    case CFD_GPU_ABIA:  // the larger of the lean kernel's and the lanes kernel's
      return (size_t)n * (CFD_LANES_LINK_DOUBLES > CFD_ABA_LINK_DOUBLES_LEAN ? CFD_LANES_LINK_DOUBLES
                                                                          : CFD_ABA_LINK_DOUBLES_LEAN);
    case CFD_GPU_ABIA_F32: return (CFD_ABIA_F32_FLOATS(n) + 1) / 2;
    case CFD_GPU_CFA: {
      int levels = 0;
      for (int s = 1; s < n; s *= 2) levels++;
      return CFD_ID_WORK(n) + (size_t)n * (36 * 6 + 6 * 2 + 18 + 2) + (size_t)72 * n * levels;
    }
    case CFD_GPU_JSIIA: return CFD_ID_WORK(n) + (size_t)n * 37 + (size_t)n * n;
    case CFD_GPU_DCA: return cfd_gpu_dca_doubles(n, 1);  // (the most; the context's own: below)
  }
  return 0;
}

static long long monotonic_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}

// ABIA's split: the words of g->split_done per state (abia_split_kernel), then its control words
static size_t split_words(const cfd_gpu* g) { return 3 + (size_t)(g->n + 31) / 32; }
static unsigned long long* split_ctrl(const cfd_gpu* g) {
  return g->split_done + split_words(g) * g->factors_held;
}

// ABIA's resident split kernel (abia.cu) asked to leave, and gone: before anything else is queued
// on the stream, and before the buffers it reads or writes are freed.
static void split_stop(cfd_gpu* g) {
  if (!g->split_resident) return;
  unsigned long long* ctrl = split_ctrl(g);
  __atomic_store_n(ctrl + 1, 1ull, __ATOMIC_RELEASE);
  cudaStreamSynchronize(g->stream);
  cudaGetLastError();
  ctrl[1] = 0;
  g->split_resident = 0;
}

static void free_batch_buffers(cfd_gpu* g) {
  split_stop(g);  // it reads g->host
  cudaFree(g->staging); cudaFreeHost(g->host);
  cudaFree(g->bias); cudaFree(g->resid); cudaFree(g->work); cudaFree(g->ptrs); cudaFree(g->info);
  g->staging = g->host = g->bias = g->resid = g->work = NULL;
  g->ptrs = NULL;
  g->info = NULL;
  g->capacity = 0;
  g->staged = 0;
}

void cfd_gpu_free(cfd_gpu* g) {
  if (!g) return;
  cfd_gpu_fd_cancel(g);
  cudaSetDevice(g->device);
  free_batch_buffers(g);
  cfd_gpu_chain_free(&g->chain, &g->chain_jf);
  cudaFree(g->jinv); cudaFree(g->basis); cudaFree(g->sigma); cudaFree(g->solver_work);
  cudaFree(g->chain_f32); cudaFree(g->tree_plan);
  cudaFree(g->scan_starts); cudaFree(g->scan_work); cudaFree(g->marks); cudaFree(g->dca_starts);
  free(g->scan_can_end);
  cudaFreeHost(g->status);
  cudaFreeHost(g->factors);
  cudaFreeHost(g->split_done);
  if (g->solver) cusolverDnDestroy(g->solver);
  if (g->start) cudaEventDestroy(g->start);
  if (g->stop) cudaEventDestroy(g->stop);
  if (g->copied) cudaEventDestroy(g->copied);
  if (g->stream && !g->stream_borrowed) cudaStreamDestroy(g->stream);
  free(g);
}

cudaError_t cfd_gpu_use_stream(cfd_gpu* g, cudaStream_t s) {
  cudaError_t e = cudaSetDevice(g->device);
  if (!e) e = cudaStreamSynchronize(g->stream);
  if (!e && !g->stream_borrowed) e = cudaStreamDestroy(g->stream);
  if (e) return e;
  g->stream = s;
  g->stream_borrowed = 1;
  return cudaSuccess;
}

static cudaError_t upload(double** dst, const double* src, size_t count) {
  cudaError_t e = cudaMalloc(dst, sizeof(double) * (count ? count : 1));
  if (e == cudaSuccess && count) e = cudaMemcpy(*dst, src, sizeof(double) * count, cudaMemcpyHostToDevice);
  return e;
}

static cudaError_t upload_int(int** dst, const int* src, size_t count) {
  cudaError_t e = cudaMalloc(dst, sizeof(int) * (count ? count : 1));
  if (e == cudaSuccess && count) e = cudaMemcpy(*dst, src, sizeof(int) * count, cudaMemcpyHostToDevice);
  return e;
}

cudaError_t cfd_gpu_chain_upload(const cfd_chain* c, int joint_frames, cfd_chain* dev,
                                 cfd_chain* dev_jf) {
  size_t n = (size_t)c->n;
  *dev = *c;  // scalars; the arrays are replaced by device copies
  dev->home_R = dev->home_p = dev->screw = dev->inertia = dev->armature = dev->qpos0 = NULL;
  dev->body = dev->jnt = dev->dof = dev->qpos = NULL;
  dev->parent = dev->kind = NULL;
  *dev_jf = *dev;
  cudaError_t e = upload(&dev->home_R, c->home_R, 9 * n);
  if (!e) e = upload(&dev->home_p, c->home_p, 3 * n);
  if (!e) e = upload(&dev->screw, c->screw, 6 * n);
  if (!e) e = upload(&dev->inertia, c->inertia, 36 * n);
  if (!e) e = upload(&dev->armature, c->armature, n);
  if (!e) e = upload_int(&dev->parent, c->parent, n);
  if (!e) e = upload_int(&dev->kind, c->kind, n);
  dev_jf->armature = dev->armature;  // the same in joint frames
  dev_jf->parent = dev->parent;
  dev_jf->kind = dev->kind;
  cfd_chain jf;
  if (!e && joint_frames && cfd_chain_in_joint_frames(c, &jf) == 0) {
    e = upload(&dev_jf->home_R, jf.home_R, 9 * n);
    if (!e) e = upload(&dev_jf->home_p, jf.home_p, 3 * n);
    if (!e) e = upload(&dev_jf->screw, jf.screw, 6 * n);
    if (!e) e = upload(&dev_jf->inertia, jf.inertia, 36 * n);
    cfd_chain_free(&jf);
  }
  return e;
}

void cfd_gpu_chain_free(cfd_chain* dev, cfd_chain* dev_jf) {
  cudaFree(dev->home_R); cudaFree(dev->home_p); cudaFree(dev->screw); cudaFree(dev->inertia);
  cudaFree(dev->armature); cudaFree(dev->parent); cudaFree(dev->kind);
  cudaFree(dev_jf->home_R); cudaFree(dev_jf->home_p); cudaFree(dev_jf->screw);
  cudaFree(dev_jf->inertia);
}

int cfd_gpu_create(const cfd_chain* c, int device, cfd_gpu_algorithm alg, cfd_gpu** out, char* err,
                   int err_size) {
  *out = NULL;
  int count = cfd_gpu_device_count();
  if (count == 0) {
    snprintf(err, err_size, "no CUDA device is available (%s needs a GPU)", cfd_gpu_algorithm_name(alg));
    return 1;
  }
  if (device < 0 || device >= count) {
    snprintf(err, err_size, "CUDA device %d does not exist (devices: 0..%d)", device, count - 1);
    return 1;
  }
  if (c->n < 1) {
    snprintf(err, err_size, "empty chain");
    return 1;
  }
  int n = c->n, tree = !cfd_chain_is_serial(c);
  if (tree && alg != CFD_GPU_ABIA && !(alg == CFD_GPU_DCA && cfd_chain_shape(c) != CFD_SHAPE_TREE)) {
    snprintf(err, err_size, "%s takes %s; on trees%s cuda.abia runs", cfd_gpu_algorithm_name(alg),
             alg == CFD_GPU_DCA ? "unbranched chains (hinges, slides, balls)"
                                : "serial chains of hinges and slides",
             alg == CFD_GPU_DCA ? "" : " (and on ball or free joints cuda.dca too)");
    return 1;
  }
  if (alg == CFD_GPU_CFA && n > CFD_GPU_CFA_MAX_N) {
    snprintf(err, err_size,
             "cuda.cfa: chains past %d links are refused (this one has %d): there its world-frame "
             "residual's rounding can bias the answer beyond 1e-8 unseen (kernels/gpu.h); "
             "cpu.cfa, cuda.abia or cuda.jsiia take them", CFD_GPU_CFA_MAX_N, n);
    return 1;
  }
  double* jinv = NULL;
  double* basis = NULL;
  double* sigma = NULL;
  if (alg == CFD_GPU_CFA) {  // constant per link in link frames: once, on the host
    jinv = (double*)malloc(sizeof(double) * 36 * n);
    basis = (double*)malloc(sizeof(double) * 36 * n);
    sigma = (double*)malloc(sizeof(double) * n);
    if (!jinv || !basis || !sigma) {
      free(jinv); free(basis); free(sigma);
      snprintf(err, err_size, "out of host memory");
      return 1;
    }
    for (int i = 0; i < n; i++) {
      if (cfd_inertia_inverse(c->inertia + 36 * i, jinv + 36 * i)) {
        free(jinv); free(basis); free(sigma);
        snprintf(err, err_size, "cuda.cfa: link %d has a singular spatial inertia", i);
        return 1;
      }
      cfd_cfa_basis(c->screw + 6 * i, basis + 36 * i);
      sigma[i] = cfd_cfa_sigma(c->screw + 6 * i);
    }
  }
  cfd_gpu* g = (cfd_gpu*)calloc(1, sizeof(cfd_gpu));
  if (!g) {
    free(jinv); free(basis); free(sigma);
    snprintf(err, err_size, "out of host memory");
    return 1;
  }
  g->device = device;
  g->alg = alg;
  g->n = n;
  g->tree = tree;
  g->one_chain = cfd_chain_shape(c) != CFD_SHAPE_TREE;
  cudaError_t e = cudaSetDevice(device);
  if (!e) e = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking);
  if (!e) e = cudaEventCreate(&g->start);
  if (!e) e = cudaEventCreate(&g->stop);
  if (!e) e = cudaEventCreateWithFlags(&g->copied, cudaEventDisableTiming);
  if (!e) e = cudaMallocHost((void**)&g->status, sizeof(int));
  int uva = 0, maps = 0;
  if (!e) e = cudaDeviceGetAttribute(&uva, cudaDevAttrUnifiedAddressing, device);
  if (!e) e = cudaDeviceGetAttribute(&maps, cudaDevAttrCanMapHostMemory, device);
  g->maps_host = uva && maps;  // page-locked memory then has one address on both sides
  if (!e) e = cfd_gpu_chain_upload(c, alg == CFD_GPU_ABIA, &g->chain, &g->chain_jf);
  if (!e && tree) {  // the world tree kernel's plan (aba_world_tree.h), once per chain
    int* plan = (int*)malloc(sizeof(int) * (n + 1));
    if (!plan) e = cudaErrorMemoryAllocation;
    else {
      g->tree_slots = cfd_wtree_plan(c, plan);
      e = upload_int(&g->tree_plan, plan, (size_t)n + 1);
      free(plan);
    }
  }
  if (!e && alg == CFD_GPU_CFA) {
    e = upload(&g->jinv, jinv, 36 * (size_t)n);
    if (!e) e = upload(&g->basis, basis, 36 * (size_t)n);
    if (!e) e = upload(&g->sigma, sigma, (size_t)n);
  }
  free(jinv); free(basis); free(sigma);
  if (!e && (alg == CFD_GPU_ABIA || alg == CFD_GPU_DCA)) {  // the scan kernel's and DCA's
    g->scan_can_end = (unsigned char*)malloc((size_t)n);  // partitions are made from these
    if (!g->scan_can_end) e = cudaErrorMemoryAllocation;
    else
      for (int i = 0; i < n; i++) g->scan_can_end[i] = (unsigned char)cfd_abs_can_end(c, i);
    if (!e && alg == CFD_GPU_ABIA)
      e = cudaMalloc(&g->scan_starts, sizeof(int) * CFD_SCAN_PARTITIONS * (n + 1));
    if (!e && alg == CFD_GPU_DCA) e = cudaMalloc(&g->dca_starts, sizeof(int) * (n + 1));
  }
  if (!e && alg == CFD_GPU_ABIA_F32) {  // R 9n, p 3n, S 6n, J 36n, armature n
    size_t count = (size_t)55 * n;
    float* f = (float*)malloc(sizeof(float) * count);
    if (!f) e = cudaErrorMemoryAllocation;
    else {
      const double* parts[5] = {c->home_R, c->home_p, c->screw, c->inertia, c->armature};
      const int widths[5] = {9, 3, 6, 36, 1};
      size_t o = 0;
      for (int k = 0; k < 5; k++)
        for (size_t j = 0; j < (size_t)widths[k] * n; j++) f[o++] = (float)parts[k][j];
      e = cudaMalloc(&g->chain_f32, sizeof(float) * count);
      if (!e) e = cudaMemcpy(g->chain_f32, f, sizeof(float) * count, cudaMemcpyHostToDevice);
      free(f);
    }
  }
  if (e) {
    fail(err, err_size, "uploading the chain model", e);
    cfd_gpu_free(g);
    return 1;
  }
  if (alg == CFD_GPU_JSIIA) {
    if (cusolverDnCreate(&g->solver) != CUSOLVER_STATUS_SUCCESS ||
        cusolverDnSetStream(g->solver, g->stream) != CUSOLVER_STATUS_SUCCESS ||
        cusolverDnDpotrf_bufferSize(g->solver, CUBLAS_FILL_MODE_LOWER, n, NULL, n,
                                    &g->solver_lwork) != CUSOLVER_STATUS_SUCCESS) {
      snprintf(err, err_size, "cuSOLVER could not be initialised on device %d", device);
      cfd_gpu_free(g);
      return 1;
    }
    e = cudaMalloc(&g->solver_work, sizeof(double) * (g->solver_lwork + 1));
    if (e) {
      fail(err, err_size, "allocating cuSOLVER workspace", e);
      cfd_gpu_free(g);
      return 1;
    }
  }
  *out = g;
  return 0;
}

// g's scratch per instance: its algorithm's, or on a tree the larger of the tree kernels'
static size_t work_per_instance(const cfd_gpu* g) {
  if (g->alg == CFD_GPU_DCA) return cfd_gpu_dca_doubles(g->n, cfd_gpu_dca_links(g));
  if (!g->tree || g->alg != CFD_GPU_ABIA) return cfd_gpu_work_per_instance(g->alg, g->n);
  size_t link = (size_t)g->n * CFD_ABA_TREE_LINK_DOUBLES;
  size_t world = (size_t)g->n * CFD_WTREE_LINK_DOUBLES + (size_t)g->tree_slots * CFD_WTREE_SLOT_DOUBLES;
  return link > world ? link : world;
}

// Instances per launch for B: bounded by the grid, and by the scratch budget for huge batches.
static int chunk_of(const cfd_gpu* g, int B) {
  size_t per = work_per_instance(g) * sizeof(double);
  size_t fit = WORK_BUDGET / (per ? per : 1);
  size_t chunk = B;
  if (chunk > fit) chunk = fit ? fit : 1;
  if (g->alg != CFD_GPU_ABIA && g->alg != CFD_GPU_ABIA_F32 && chunk > MAX_GRID_Y) chunk = MAX_GRID_Y;
  return (int)chunk;
}

static int ensure_buffers(cfd_gpu* g, int B, int chunk, int stage, char* err, int err_size) {
  if (chunk <= g->capacity && (!stage || B <= g->staged)) return 0;
  int n = g->n;
  g->flag_clear = 0;  // a new flag
  int cap = chunk > g->capacity ? chunk : g->capacity;
  int staged = stage && B > g->staged ? B : g->staged;
  free_batch_buffers(g);
  size_t vec = sizeof(double) * (size_t)staged * n;
  cudaError_t e = cudaSuccess;
  if (staged) {  // one block each side, so that a call moves its inputs and its qacc in one copy
    e = cudaMalloc(&g->staging, 5 * vec);
    if (!e) e = cudaMallocHost(&g->host, 5 * vec + sizeof(double));  // + status
  }
  if (!e) e = cudaMalloc(&g->bias, sizeof(double) * (size_t)cap * n);
  if (!e) e = cudaMalloc(&g->resid, sizeof(double) * (size_t)cap * n);
  // + CFD_LANES instances: the slots of the ABIA lanes kernel's idle groups
  if (!e) e = cudaMalloc(&g->work, sizeof(double) * work_per_instance(g) * (cap + CFD_LANES));
  if (!e) e = cudaMalloc(&g->ptrs, sizeof(double*) * 4 * (size_t)cap);  // or CFA's 4 norms
  if (!e) e = cudaMalloc(&g->info, sizeof(int) * ((size_t)cap + 2));
  if (e) {
    free_batch_buffers(g);
    cudaGetLastError();
    snprintf(err, err_size,
             "out of device memory for a batch of %d states of %d links (%s): %s", B, n,
             cfd_gpu_algorithm_name(g->alg), cudaGetErrorString(e));
    return 1;
  }
  g->capacity = cap;
  g->staged = staged;
  return 0;
}

// The kernels' error flag zeroed before a batch, unless it already is: a store where it is host
// memory (after the stream's work: a batch that failed to launch may have left kernels running),
// else a reset in stream order
static cudaError_t clear_flag(cfd_gpu* g) {
  if (g->flag_clear) return cudaSuccess;
  if (g->maps_host) {
    cudaError_t e = cudaStreamSynchronize(g->stream);
    *(volatile int*)g->status = 0;
    return e;
  }
  return cudaMemsetAsync(g->info + g->capacity, 0, sizeof(int), g->stream);
}

// A call's start event, where its kernels are timed (cfd_gpu_time_kernels: the events cost a
// small call a few us, so only when asked); finish_batch records the stop where this recorded.
static cudaError_t start_timing(cfd_gpu* g) {
  g->timed = g->time_kernels;
  return g->timed ? cudaEventRecord(g->start, g->stream) : cudaSuccess;
}

// The launches for B states already on the device (q, qd, tau, extra, qacc device arrays), chunk
// by chunk, after clearing the kernels' error flag and starting the timing event.
static int launch_batch(cfd_gpu* g, int B, int chunk, const double* dq, const double* dqd,
                        const double* dtau, const double* dextra, double* dqacc, char* err,
                        int err_size) {
  int n = g->n;
  cudaError_t e = clear_flag(g);
  g->flag_clear = 0;  // until this batch's finish clears it (or queues its reset)
  if (!e) e = start_timing(g);
  if (e) return fail(err, err_size, "starting the batch", e);
  for (int b0 = 0; b0 < B; b0 += chunk) {
    int nb = B - b0 < chunk ? B - b0 : chunk;
    size_t o = (size_t)b0 * n;
    const double* ex = dextra ? dextra + o : NULL;
    if (g->alg == CFD_GPU_ABIA) {
      e = cfd_gpu_launch_abia(g, nb, dq + o, dqd + o, dtau + o, ex, dqacc + o);
    } else if (g->alg == CFD_GPU_ABIA_F32) {
      e = cfd_launch_abia_f32(g->chain_f32, n, g->chain.gravity, nb, dq + o, dqd + o, dtau + o, ex,
                              dqacc + o, (float*)g->work, cfd_gpu_error_flag(g), g->stream);
    } else if (g->alg == CFD_GPU_CFA) {
      e = cfd_gpu_launch_cfa(g, nb, dq + o, dqd + o, dtau + o, ex, dqacc + o, CFA_WHOLE);
    } else if (g->alg == CFD_GPU_DCA) {
      e = cfd_gpu_launch_dca(g, nb, dq + o, dqd + o, dtau + o, ex, dqacc + o);
    } else {
      const char* what = "";
      if (cfd_gpu_launch_jsiia(g, nb, dq + o, dqd + o, dtau + o, ex, dqacc + o, &what)) {
        e = cudaGetLastError();
        snprintf(err, err_size, "cuda.jsiia: %s failed%s%s", what, e ? ": " : "",
                 e ? cudaGetErrorString(e) : "");
        cudaStreamSynchronize(g->stream);
        return 1;
      }
    }
    if (e) return fail(err, err_size, cfd_gpu_algorithm_name(g->alg), e);
    if (g->alg == CFD_GPU_JSIIA && n > 16) {  // cuSOLVER reports a failed factorisation in info
      int* info = (int*)malloc(sizeof(int) * (nb == 1 ? 1 : nb));
      if (!info) {
        snprintf(err, err_size, "cuda.jsiia: out of host memory");
        cudaStreamSynchronize(g->stream);
        return 1;
      }
      e = cudaMemcpyAsync(info, g->info, sizeof(int) * (nb == 1 ? 1 : nb), cudaMemcpyDeviceToHost, g->stream);
      if (!e) e = cudaStreamSynchronize(g->stream);
      int bad = 0;
      for (int k = 0; !e && k < (nb == 1 ? 1 : nb); k++) bad |= info[k] != 0;
      free(info);
      if (e) return fail(err, err_size, "cuda.jsiia", e);
      if (bad) {
        snprintf(err, err_size, "cuda.jsiia: %s", cfd_status_str(CFD_ERR_SINGULAR));
        return 1;
      }
    }
  }
  return 0;
}

// The status (and, for host arrays, qacc) down in one synchronisation; qacc reaches the caller's
// array only when the kernels succeeded.
static int finish_batch(cfd_gpu* g, int B, int host, const double* dqacc, double* qacc, char* err,
                        int err_size) {
  size_t bn = (size_t)B * g->n, vec = sizeof(double) * bn;
  int mapped = g->maps_host;  // the flag is host memory: read after the event, no copy down
  int* status = mapped ? g->status : host ? (int*)(g->host + 5 * bn) : g->status;
  cudaError_t e = g->timed ? cudaEventRecord(g->stop, g->stream) : cudaSuccess;
  if (!e && !mapped)
    e = cudaMemcpyAsync(status, g->info + g->capacity, sizeof(int), cudaMemcpyDeviceToHost, g->stream);
  if (!e && host)
    e = cudaMemcpyAsync(g->host + 4 * bn, dqacc, vec, cudaMemcpyDeviceToHost, g->stream);
  // a device flag's reset for the next batch goes after what this call waits for, so that it is
  // off the call's path (a launch saved per call: a tenth of a 7-dof batch of 65,536); with the
  // flag in host memory the call waits for the whole stream, one call fewer than an event
  if (!e && !mapped) {
    e = cudaEventRecord(g->copied, g->stream);
    if (!e) e = cudaMemsetAsync(g->info + g->capacity, 0, sizeof(int), g->stream);
    if (!e) e = cudaEventSynchronize(g->copied);
  } else if (!e) {
    e = cudaStreamSynchronize(g->stream);
  }
  if (e) return fail(err, err_size, cfd_gpu_algorithm_name(g->alg), e);
  int st = *(volatile int*)status;
  if (mapped) *(volatile int*)status = 0;  // the batch's kernels are done with it
  g->flag_clear = 1;
  if (st) {
    snprintf(err, err_size, "%s: %s", cfd_gpu_algorithm_name(g->alg), cfd_status_str(st));
    return 1;
  }
  if (!g->timed || cudaEventElapsedTime(&g->last_ms, g->start, g->stop)) g->last_ms = 0;
  if (host) memcpy(qacc, g->host + 4 * bn, vec);
  return 0;
}

int cfd_gpu_fd(cfd_gpu* g, int B, const double* q, const double* qd, const double* tau,
               const double* extra_diag, double* qacc, cfd_memory where, char* err, int err_size) {
  if (B < 1) {
    snprintf(err, err_size, "batch size must be positive (got %d)", B);
    return 1;
  }
  if (g->pending) {
    snprintf(err, err_size, "%s: a split call is under way (cfd_gpu_fd_begin without finish)",
             cfd_gpu_algorithm_name(g->alg));
    return 1;
  }
  cudaError_t e = cudaSetDevice(g->device);
  if (e) return fail(err, err_size, "selecting the device", e);
  int n = g->n, chunk = chunk_of(g, B), host = where == CFD_HOST;
  split_stop(g);  // the stream is this call's
  if (ensure_buffers(g, B, chunk, host, err, err_size)) return 1;
  const double *dq = q, *dqd = qd, *dtau = tau, *dextra = extra_diag;
  double* dqacc = qacc;
  size_t bn = (size_t)B * n, vec = sizeof(double) * bn;
  if (host) {  // packed into page-locked memory, then one copy up: [q qd tau extra]
    int nin = extra_diag ? 4 : 3;
    memcpy(g->host, q, vec);
    memcpy(g->host + bn, qd, vec);
    memcpy(g->host + 2 * bn, tau, vec);
    if (extra_diag) memcpy(g->host + 3 * bn, extra_diag, vec);
    e = cudaMemcpyAsync(g->staging, g->host, nin * vec, cudaMemcpyHostToDevice, g->stream);
    if (e) return fail(err, err_size, "copying the states to the device", e);
    dq = g->staging; dqd = dq + bn; dtau = dqd + bn; dextra = extra_diag ? dtau + bn : NULL;
    dqacc = g->staging + 4 * bn;
  }
  if (launch_batch(g, B, chunk, dq, dqd, dtau, dextra, dqacc, err, err_size)) return 1;
  return finish_batch(g, B, host, dqacc, qacc, err, err_size);
}

// ABIA's split (aba_world_tau.h): the states, where cfd_gpu_fd_begin packed them (g->host,
// page-locked), are read by a kernel that stays resident from one call to the next
// (abia_split_kernel): begin writes the call's number where the kernel waits for it, the kernel
// runs the sweep out and the inertias' part of the sweep in, and writes the factors, each state's
// status and a done flag into page-locked memory itself; finish waits for the flags and does the
// rest on the host. No launch (after the first), copy, event or graph in between: for chains of a
// few hundred links their host calls and latency were a large share of a call.
// Falls back to holding the states (pending 1) when the page-locked memory cannot be had.
static int abia_begin(cfd_gpu* g, int B, char* err, int err_size) {
  int n = g->n;
  if (B > g->factors_held) {
    split_stop(g);  // it writes into the old buffers
    cudaFreeHost(g->factors);
    cudaFreeHost(g->split_done);
    g->factors = NULL;
    g->split_done = NULL;
    g->factors_held = 0;
    size_t words = split_words(g) * B + 4;
    if (cudaMallocHost(&g->factors, sizeof(double) * (cfd_awt_doubles(n) + n) * (B + 1)) ||  // + u / d
        cudaMallocHost(&g->split_done, sizeof(unsigned long long) * words)) {
      cudaGetLastError();
      cudaFreeHost(g->factors);
      g->factors = NULL;
      return 0;  // the plain path at finish
    }
    memset(g->split_done, 0, sizeof(unsigned long long) * words);
    g->factors_held = B;
    split_ctrl(g)[0] = 2 * g->split_seq;  // no call yet for the kernel launched below
  }
  unsigned long long* ctrl = split_ctrl(g);
  // Its blocks leave after 2 ms without a call, each on its own clock: past half of that it is
  // asked to leave now and launched again, rather than risk a call that some of its blocks would
  // no longer see (finish would notice only once the others had left too, 2 ms on).
  long long now_ns = monotonic_ns();
  if (g->split_resident && (g->split_resident != B || g->tune.split_relaunch ||
                            now_ns - g->split_last_ns > 1000000 ||
                            __atomic_load_n(ctrl + 2, __ATOMIC_ACQUIRE)))
    split_stop(g);  // another batch size, idle for long, or it has left (or is about to)
  if (!g->split_resident) {
    ctrl[2] = 0;
    cudaError_t e = cfd_gpu_launch_abia_split(g, B, g->host, g->factors, g->split_done, ctrl,
                                              g->split_seq);
    if (e) {
      cudaGetLastError();
      g->pending = 0;
      cudaStreamSynchronize(g->stream);
      return fail(err, err_size, "starting a split batch", e);
    }
    g->split_resident = B;
  }
  __atomic_store_n(ctrl, 2 * ++g->split_seq + g->pending_extra, __ATOMIC_RELEASE);  // after the states
  g->pending = 3;
  return 0;
}

// Until *flag holds this call's number. The stream is asked now and then: a kernel that failed
// is an error, and one that left before it saw the call (its idle time ran out as the call came)
// is launched again, once (*relaunched; *gone set when it left a second time without the flags).
static cudaError_t split_wait(cfd_gpu* g, const unsigned long long* flag, int* relaunched, int* gone) {
  const unsigned long long seq = g->split_seq;
  for (unsigned spin = 1; __atomic_load_n(flag, __ATOMIC_ACQUIRE) != seq; spin++) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (spin % 1024) continue;
    cudaError_t e = cudaStreamQuery(g->stream);
    if (e == cudaErrorNotReady) continue;
    if (e) return e;
    if (__atomic_load_n(flag, __ATOMIC_ACQUIRE) == seq) break;
    if ((*relaunched)++) {  // gone twice without the call's flags
      *gone = 1;
      return cudaSuccess;
    }
    unsigned long long* ctrl = split_ctrl(g);
    ctrl[2] = 0;
    e = cfd_gpu_launch_abia_split(g, g->pending_B, g->host, g->factors, g->split_done, ctrl, seq - 1);
    if (e) return e;
  }
  return cudaSuccess;
}

// finish for pending 3: each state's qacc from its factors and tau. The sweep in takes each block
// as the kernel flags it (while the kernel turns the blocks below, when finish comes first); the
// sweep out, which writes qacc, only once every state's status is known.
static int abia_finish(cfd_gpu* g, const double* tau, double* qacc, char* err, int err_size) {
  int n = g->n, B = g->pending_B, nb = (n + 31) / 32, relaunched = 0, gone = 0;
  size_t per = cfd_awt_doubles(n), words = split_words(g);
  double* su = g->factors + per * g->factors_held;  // u / d of B + 1 states
  cudaError_t e = cudaSuccess;
  for (int b = 0; b < B && !e; b += 2) {  // two states at a time (the last with itself when B is odd)
    int b1 = b + 1 < B ? b + 1 : b;
    const double* f[2] = {g->factors + per * b, g->factors + per * b1};
    const double* t[2] = {tau + (size_t)b * n, tau + (size_t)b1 * n};
    double* s2[2] = {su + (size_t)b * n, su + (size_t)(b1 > b ? b1 : B) * n};
    double W[2][6] = {{0}};
    for (int k = nb - 1; k >= 0 && !e && !gone; k--) {
      e = split_wait(g, g->split_done + words * b + (k ? 3 + k : 0), &relaunched, &gone);
      if (!e && !gone)
        e = split_wait(g, g->split_done + words * b1 + (k ? 3 + k : 0), &relaunched, &gone);
      if (!e && !gone) cfd_awt_in_block(n, k, f, t, W, s2);
    }
  }
  if (e || gone) {
    cudaGetLastError();
    cudaStreamSynchronize(g->stream);
    g->split_resident = 0;
    if (!e) {
      snprintf(err, err_size, "%s: the split kernel ended without its factors", cfd_gpu_algorithm_name(g->alg));
      return 1;
    }
    return fail(err, err_size, cfd_gpu_algorithm_name(g->alg), e);
  }
  g->split_last_ns = monotonic_ns();
  for (int b = 0; b < B; b++) {
    int st = cfd_awt_status(n, g->factors + per * b);
    if (st) {
      snprintf(err, err_size, "%s: %s", cfd_gpu_algorithm_name(g->alg), cfd_status_str(st));
      return 1;
    }
  }
  unsigned long long t0 = ~0ull, t1 = 0;  // the kernel's time: its first start to its last end
  for (int b = 0; b < B; b++) {
    if (g->split_done[words * b + 1] < t0) t0 = g->split_done[words * b + 1];
    if (g->split_done[words * b + 2] > t1) t1 = g->split_done[words * b + 2];
  }
  g->last_ms = t1 > t0 ? (float)((t1 - t0) * 1e-6) : 0;
  for (int b = 0; b < B; b += 2) {
    int b1 = b + 1 < B ? b + 1 : b;
    const double* f[2] = {g->factors + per * b, g->factors + per * b1};
    const double* s2[2] = {su + (size_t)b * n, su + (size_t)(b1 > b ? b1 : B) * n};
    double* out[2] = {qacc + (size_t)b * n, b1 > b ? qacc + (size_t)b1 * n : su + (size_t)B * n};
    cfd_awt_out(n, f, g->chain.gravity, s2, out);
  }
  return 0;
}

int cfd_gpu_fd_begin(cfd_gpu* g, int B, const double* q, const double* qd,
                     const double* extra_diag, char* err, int err_size) {
  if (B < 1) {
    snprintf(err, err_size, "batch size must be positive (got %d)", B);
    return 1;
  }
  if (g->pending) {
    snprintf(err, err_size, "%s: a split call is already under way", cfd_gpu_algorithm_name(g->alg));
    return 1;
  }
  cudaError_t e = cudaSetDevice(g->device);
  if (e) return fail(err, err_size, "selecting the device", e);
  int n = g->n, chunk = chunk_of(g, B);
  if (ensure_buffers(g, B, chunk, 1, err, err_size)) return 1;
  size_t bn = (size_t)B * n, vec = sizeof(double) * bn;
  memcpy(g->host, q, vec);
  memcpy(g->host + bn, qd, vec);
  if (extra_diag) memcpy(g->host + 3 * bn, extra_diag, vec);
  g->pending_B = B;
  g->pending_extra = extra_diag != NULL;
  g->pending = 1;  // held on the host until finish
  if (g->alg == CFD_GPU_ABIA && chunk == B && cfd_gpu_abia_splits(g, B))
    return abia_begin(g, B, err, err_size);
  split_stop(g);  // this call's work goes on the stream
  int scans = g->alg == CFD_GPU_ABIA && cfd_gpu_abia_scan_splits(g, B);
  if ((g->alg != CFD_GPU_CFA && !scans) || chunk < B) return 0;
  // CFA and ABIA's scans: up now, and a first launch does what needs no tau (finish launches the
  // rest); the device is never left waiting on the host, so the caller may use it in between
  e = cudaMemcpyAsync(g->staging, g->host, 2 * vec, cudaMemcpyHostToDevice, g->stream);  // q, qd
  if (!e && extra_diag)
    e = cudaMemcpyAsync(g->staging + 3 * bn, g->host + 3 * bn, vec, cudaMemcpyHostToDevice, g->stream);
  if (!e) e = clear_flag(g);
  g->flag_clear = 0;  // the kernel below may set it
  if (!e) e = start_timing(g);
  const double* dq = g->staging;
  if (!e && scans)
    e = cfd_gpu_launch_abia_scan(g, B, dq, dq + bn, dq + 2 * bn, extra_diag ? dq + 3 * bn : NULL,
                                 g->staging + 4 * bn, cfd_gpu_error_flag(g), ABS_BEGIN);
  else if (!e)
    e = cfd_gpu_launch_cfa(g, B, dq, dq + bn, dq + 2 * bn, extra_diag ? dq + 3 * bn : NULL,
                           g->staging + 4 * bn, CFA_BEGIN);
  if (e) {
    g->pending = 0;
    cudaStreamSynchronize(g->stream);
    return fail(err, err_size, "starting a split batch", e);
  }
  g->pending = 2;  // begun on the device
  return 0;
}

int cfd_gpu_fd_finish(cfd_gpu* g, const double* tau, double* qacc, char* err, int err_size) {
  if (!g->pending) {
    snprintf(err, err_size, "%s: cfd_gpu_fd_finish without cfd_gpu_fd_begin", cfd_gpu_algorithm_name(g->alg));
    return 1;
  }
  int B = g->pending_B, n = g->n, begun = g->pending == 2;
  size_t bn = (size_t)B * n, vec = sizeof(double) * bn;
  if (g->pending == 3) {
    g->pending = 0;
    cudaError_t e = cudaSetDevice(g->device);
    if (e) {
      cudaStreamSynchronize(g->stream);
      return fail(err, err_size, "selecting the device", e);
    }
    return abia_finish(g, tau, qacc, err, err_size);
  }
  g->pending = 0;
  cudaError_t e = cudaSetDevice(g->device);
  if (e) {
    if (begun) cudaStreamSynchronize(g->stream);
    return fail(err, err_size, "selecting the device", e);
  }
  memcpy(g->host + 2 * bn, tau, vec);
  const double* dq = g->staging;
  if (begun) {  // tau up, then the second launch
    e = cudaMemcpyAsync(g->staging + 2 * bn, g->host + 2 * bn, vec, cudaMemcpyHostToDevice, g->stream);
    const double* dex = g->pending_extra ? dq + 3 * bn : NULL;
    if (!e && g->alg == CFD_GPU_ABIA)
      e = cfd_gpu_launch_abia_scan(g, B, dq, dq + bn, dq + 2 * bn, dex, g->staging + 4 * bn,
                                   cfd_gpu_error_flag(g), ABS_FINISH);
    else if (!e)
      e = cfd_gpu_launch_cfa(g, B, dq, dq + bn, dq + 2 * bn, dex, g->staging + 4 * bn, CFA_FINISH);
    if (e) {
      cudaStreamSynchronize(g->stream);
      return fail(err, err_size, cfd_gpu_algorithm_name(g->alg), e);
    }
    return finish_batch(g, B, 1, g->staging + 4 * bn, qacc, err, err_size);
  }
  e = cudaMemcpyAsync(g->staging, g->host, (g->pending_extra ? 4 : 3) * vec, cudaMemcpyHostToDevice, g->stream);
  if (e) return fail(err, err_size, "copying the states to the device", e);
  if (launch_batch(g, B, chunk_of(g, B), dq, dq + bn, dq + 2 * bn,
                   g->pending_extra ? dq + 3 * bn : NULL, g->staging + 4 * bn, err, err_size))
    return 1;
  return finish_batch(g, B, 1, g->staging + 4 * bn, qacc, err, err_size);
}

int cfd_gpu_fd_splits(const cfd_gpu* g, int B) {
  if (B < 1 || chunk_of(g, B) < B) return 0;
  return g->alg == CFD_GPU_CFA ||
         (g->alg == CFD_GPU_ABIA && (cfd_gpu_abia_splits(g, B) || cfd_gpu_abia_scan_splits(g, B)));
}

void cfd_gpu_fd_cancel(cfd_gpu* g) {
  if (g->pending >= 2 || g->split_resident) {  // the first launch runs to its end on its own
    cudaSetDevice(g->device);
    split_stop(g);
    cudaStreamSynchronize(g->stream);
    cudaGetLastError();
  }
  g->pending = 0;
}

double cfd_gpu_last_kernel_ms(const cfd_gpu* g) { return g->last_ms; }

int cfd_gpu_time_kernels(cfd_gpu* g, int on) {
  int was = g->time_kernels;
  g->time_kernels = on != 0;
  return was;
}

int cfd_gpu_split_launches(const cfd_gpu* g) { return g->split_launches; }

int cfd_gpu_set_tuning(cfd_gpu* g, const cfd_gpu_tuning* t, char* err, int err_size) {
  static const cfd_gpu_tuning defaults = {};
  int dca_links = cfd_gpu_dca_links(g);
  cfd_gpu_tuning old = g->tune;
  g->tune = t ? *t : defaults;
  if (cfd_gpu_dca_links(g) != dca_links) {  // DCA's scratch per instance changes with it
    if (g->pending) {  // (a split call's states sit in the buffers this would free)
      g->tune = old;
      snprintf(err, err_size, "%s: a split call is under way: finish or cancel it before changing "
               "the links per subsystem", cfd_gpu_algorithm_name(g->alg));
      return 1;
    }
    cudaSetDevice(g->device);
    free_batch_buffers(g);
    g->capacity = g->staged = 0;
  }
  if (g->tune.profile && !g->marks) {
    cudaSetDevice(g->device);
    cudaError_t e = cudaMalloc(&g->marks, 64 * sizeof(unsigned long long));
    if (!e) e = cudaMemset(g->marks, 0, 64 * sizeof(unsigned long long));
    if (e) {
      cudaFree(g->marks);
      g->marks = NULL;
      g->tune.profile = 0;
      snprintf(err, err_size, "GPU: the profile's marks: %s", cudaGetErrorString(e));
      cudaGetLastError();
      return 1;
    }
  }
  return 0;
}

int cfd_gpu_abia_ran(const cfd_gpu* g) { return g->abia_ran; }
int cfd_gpu_scan_links_ran(const cfd_gpu* g) { return g->scan_links_ran; }

// Phase times (us) from a profiled kernel's 64 globaltimer marks, one per phase end: the
// differences up to the first mark not written in order.
int cfd_gpu_phases(const cfd_gpu* g, double* us, int max) {
  unsigned long long t[64];
  if (!g->marks) return 0;
  cudaSetDevice(g->device);
  if (cudaStreamSynchronize(g->stream) || cudaMemcpy(t, g->marks, sizeof t, cudaMemcpyDeviceToHost)) {
    cudaGetLastError();
    return 0;
  }
  int k = 0;
  for (; k + 1 < max && k < 63 && t[k + 1] >= t[k] && t[k + 1] - t[k] < 1000000000ull; k++)
    us[k] = (t[k + 1] - t[k]) * 1e-3;
  return k;
}

void* cfd_gpu_host_alloc(size_t bytes) {
  void* p = NULL;
  if (cfd_gpu_device_count() > 0 && cudaMallocHost(&p, bytes ? bytes : 1) == cudaSuccess) return p;
  cudaGetLastError();
  return malloc(bytes ? bytes : 1);
}

void cfd_gpu_host_free(void* p) {
  if (!p) return;
  cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeHost) {
    cudaFreeHost(p);
    return;
  }
  cudaGetLastError();
  free(p);
}
