// Config keys of the chainfd plugin: checked, then resolved to one entry of the back-end table.
#include <ctype.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "config.h"
#include "gpu.h"

static const char* const config_keys[CFD_CONFIG_NKEY] = {"backend", "precision", "device", "fallback"};

const char* const* cfd_config_keys(void) { return config_keys; }

static int is_set(const char* s) { return s && s[0]; }

static int is_gpu_backend(const cfd_backend* b) { return strncmp(b->name, "cpu.", 4) != 0; }

// GPU back ends that can run here: none without a CUDA device
static int gpu_backend_count(void) {
  if (cfd_gpu_device_count() == 0) return 0;
  int n = 0;
  for (int i = 0; i < cfd_backend_count(); i++) n += is_gpu_backend(cfd_backend_get(i));
  return n;
}

// "0", "12": a device index; anything else (signs, spaces, letters) is not.
static int parse_device_index(const char* s, int* index) {
  if (!s[0] || strlen(s) > 4) return 1;
  for (const char* p = s; *p; p++)
    if (!isdigit((unsigned char)*p)) return 1;
  *index = atoi(s);
  return 0;
}

// backend=auto with a GPU device but no GPU back end runs on the CPU; said once per process.
static atomic_int said_auto_on_cpu;

int cfd_config_resolve(const chainfd_config* cfg, const char* label, cfd_resolved_config* out,
                       char* err, int err_size) {
  static const chainfd_config defaults = {0};
  if (!cfg) cfg = &defaults;
  memset(out, 0, sizeof(*out));
  if (!label) label = "chainfd";

  // fallback
  const char* fallback = is_set(cfg->fallback) ? cfg->fallback : "mujoco";
  if (!strcmp(fallback, "mujoco")) out->fallback_error = 0;
  else if (!strcmp(fallback, "error")) out->fallback_error = 1;
  else {
    snprintf(err, err_size, "%s: config fallback='%s' is not one of: mujoco, error", label, fallback);
    return 1;
  }

  // precision
  const char* precision = is_set(cfg->precision) ? cfg->precision : "double";
  if (!strcmp(precision, "double")) out->use_float = 0;
  else if (!strcmp(precision, "float")) {
    // accepted by the schema (the config), not computed yet: refused rather than ignored
    snprintf(err, err_size, "%s: config precision='float' is not available: every chainfd back end "
                            "computes in double (set precision=double)", label);
    return 1;
  } else {
    snprintf(err, err_size, "%s: config precision='%s' is not one of: double, float", label,
             precision);
    return 1;
  }

  // device: -2 auto, -1 cpu, >= 0 an index
  const char* device = is_set(cfg->device) ? cfg->device : "auto";
  int dev;
  if (!strcmp(device, "auto")) dev = -2;
  else if (!strcmp(device, "cpu")) dev = -1;
  else if (parse_device_index(device, &dev)) {
    snprintf(err, err_size,
             "%s: config device='%s' is not one of: cpu, auto, or a CUDA device index (0, 1, ...)",
             label, device);
    return 1;
  }

  // backend: the short names of the issue map onto the table; full table names are accepted too
  const char* backend = is_set(cfg->backend) ? cfg->backend : "auto";
  static const struct { const char* key; const char* algorithm; } short_names[] = {
      {"auto", NULL}, {"cfa", "cfa"}, {"abia", "abia"}, {"jsiia", "jsiia"}, {"cpu", NULL},
      {"dca", "dca"}};
  int short_index = -1;
  for (int i = 0; i < (int)(sizeof(short_names) / sizeof(short_names[0])); i++)
    if (!strcmp(backend, short_names[i].key)) short_index = i;
  const cfd_backend* exact = short_index < 0 ? cfd_backend_find(backend) : NULL;
  if (short_index < 0 && !exact) {
    int len = snprintf(err, err_size, "%s: config backend='%s' is not one of: auto, cfa, abia, jsiia, cpu, dca",
                       label, backend);
    for (int i = 0; i < cfd_backend_count() && len < err_size; i++)
      len += snprintf(err + len, err_size - len, ", %s", cfd_backend_get(i)->name);
    return 1;
  }
  int is_auto = short_index == 0, is_cpu_key = short_index == 4;
  int has_gpu = gpu_backend_count() > 0;

  if (exact && is_gpu_backend(exact) && dev == -1) {
    snprintf(err, err_size, "%s: config backend='%s' runs on a GPU, but device='cpu'", label, backend);
    return 1;
  }
  // a GPU back end named exactly needs a device whatever device says (auto would otherwise hand
  // every step to MuJoCo)
  if (exact && is_gpu_backend(exact) && !has_gpu) {
    snprintf(err, err_size, "%s: config backend='%s' runs on a GPU, but there is no CUDA device "
                            "here (set backend=auto, or a cpu.* back end)", label, backend);
    return 1;
  }

  // where it runs
  int on_gpu;
  if (dev == -1 || is_cpu_key || (exact && !is_gpu_backend(exact))) on_gpu = 0;
  else if (dev == -2) on_gpu = has_gpu && !is_cpu_key;
  else on_gpu = 1;  // a device index, or a GPU back end named exactly

  if (on_gpu && !has_gpu) {
    if (is_auto) {
      if (!atomic_exchange(&said_auto_on_cpu, 1))
        fprintf(stderr, "%s: device=%s asks for a GPU, but there is no CUDA device here; "
                        "backend=auto runs on the CPU\n", label, device);
      on_gpu = 0;
      dev = -1;
    } else {
      snprintf(err, err_size, "%s: config device='%s' asks for a GPU, but there is no CUDA device "
                              "here (backend='%s'; set device=cpu, or backend=auto)", label, device,
               backend);
      return 1;
    }
  }
  if (on_gpu && dev >= cfd_gpu_device_count()) {
    snprintf(err, err_size, "%s: config device='%s': CUDA device %d does not exist (this machine "
                            "has %d)", label, device, dev, cfd_gpu_device_count());
    return 1;
  }
  if (!on_gpu && dev >= 0 && (is_cpu_key || exact)) {
    snprintf(err, err_size, "%s: config backend='%s' runs on the CPU, but device='%s' asks for a "
                            "GPU: set device=cpu", label, backend, device);
    return 1;
  }

  // which table entry
  const cfd_backend* chosen = exact;
  if (!chosen) {
    char name[32];
    const char* alg = short_names[short_index].algorithm;
    if (on_gpu) {
      // GPU back ends are named cuda.<algorithm>; auto is decided per model (out->is_auto)
      snprintf(name, sizeof name, "cuda.%s", alg ? alg : "abia");
    } else {
      snprintf(name, sizeof name, "cpu.%s", alg ? alg : "fast");
    }
    chosen = cfd_backend_find(name);
    if (!chosen) {
      snprintf(err, err_size, "%s: config backend='%s': this build has no back end '%s'", label,
               backend, name);
      return 1;
    }
  }
  snprintf(out->backend, sizeof out->backend, "%s", chosen->name);
  out->device = on_gpu ? (dev < 0 ? 0 : dev) : -1;
  out->is_auto = is_auto;
  return 0;
}
