// config.h: the plugin's config keys, checked and resolved to one back end.
#ifndef CHAINFD_CONFIG_H
#define CHAINFD_CONFIG_H

#include "chainfd.h"

#ifdef __cplusplus
extern "C" {
#endif

// The keys MuJoCo's compiler accepts in <config> (anything else is rejected at load time).
#define CFD_CONFIG_NKEY 4
const char* const* cfd_config_keys(void);  // the CFD_CONFIG_NKEY keys, in order

typedef struct cfd_resolved_config {
  char backend[32];     // a name in the back-end table, e.g. "cpu.fast"
  int device;           // -1: CPU; >= 0: CUDA device index
  int use_float;        // precision=float
  int fallback_error;   // fallback=error
  int is_auto;          // backend=auto: the stepper picks per model from the measured table
} cfd_resolved_config;

// Checks every value and picks the back end. 0, or nonzero with a message naming the key, the value
// and what is accepted. label prefixes the one-time notice of backend=auto falling back to the CPU.
int cfd_config_resolve(const chainfd_config* cfg, const char* label, cfd_resolved_config* out,
                       char* err, int err_size);

#ifdef __cplusplus
}
#endif

#endif  // CHAINFD_CONFIG_H
