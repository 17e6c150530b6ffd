// The chainfd engine plugin: registration with MuJoCo, one stepper per mjData (made in init, freed in
// destroy, counters carried by copy), and chainfd_step / chainfd_forward, which find that stepper.
//
// The plugin declares no capability: MuJoCo never calls it during mj_step (which keeps MuJoCo's own
// dynamics); it exists so that the model carries the configuration and every mjData its own
// chain model and buffers.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mujoco/mjplugin.h>

#include "chainfd.h"
#include "config.h"

void cfd_set_last_error(const char* fmt, ...);

// One per mjData: the stepper, or why the configuration is invalid.
typedef struct cfd_instance {
  chainfd_stepper* stepper;  // NULL when the configuration is invalid
  char config_error[640];
} cfd_instance;

static int registered_slot = -1;

// --- the instances, by the mjData they were made for ------------------------------------------------
// d->plugin_data alone cannot be trusted: an mjData copied outside mj_copyData (unpickled in
// Python, in this process or another) holds another mjData's pointer, perhaps freed, perhaps never
// valid here. So an instance is found by (mjData, plugin instance) in this table, and plugin_data
// is never read: a hash table with linear probing, under a lock (several threads make, step and
// delete their own mjData).

typedef struct reg_slot {
  const mjData* d;  // NULL: empty; &reg_removed: removed
  int instance;
  cfd_instance* inst;
} reg_slot;

static const mjData* const reg_removed = (const mjData*)&registered_slot;  // a unique address
static reg_slot* reg_table;
static size_t reg_cap, reg_used;  // slots, and slots not empty (live or removed)
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t reg_hash(const mjData* d, int instance) {
  uint64_t x = (uint64_t)(uintptr_t)d ^ ((uint64_t)instance << 56);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;  // (a 64-bit finaliser's multiplier)
  x ^= x >> 33;
  return (size_t)x;
}

// The slot of (d, instance), or the empty slot where it would go (the table is never full).
static reg_slot* reg_find(const mjData* d, int instance) {
  size_t i = reg_hash(d, instance) & (reg_cap - 1);
  reg_slot* reuse = NULL;
  for (;; i = (i + 1) & (reg_cap - 1)) {
    reg_slot* e = reg_table + i;
    if (!e->d) return reuse ? reuse : e;
    if (e->d == reg_removed) {
      if (!reuse) reuse = e;
    } else if (e->d == d && e->instance == instance) {
      return e;
    }
  }
}

static int reg_put(const mjData* d, int instance, cfd_instance* inst) {
  pthread_mutex_lock(&reg_lock);
  if (2 * (reg_used + 1) > reg_cap) {  // grow (and drop the removed) at half full
    size_t old_cap = reg_cap, cap = reg_cap ? 2 * reg_cap : 64;
    reg_slot *old = reg_table, *table = calloc(cap, sizeof(reg_slot));
    if (!table) {
      pthread_mutex_unlock(&reg_lock);
      return -1;
    }
    reg_table = table;
    reg_cap = cap;
    reg_used = 0;
    for (size_t k = 0; k < old_cap; k++)
      if (old[k].d && old[k].d != reg_removed) {
        *reg_find(old[k].d, old[k].instance) = old[k];
        reg_used++;
      }
    free(old);
  }
  reg_slot* e = reg_find(d, instance);
  if (!e->d) reg_used++;
  e->d = d;
  e->instance = instance;
  e->inst = inst;
  pthread_mutex_unlock(&reg_lock);
  return 0;
}

// The instance of (d, instance); remove: and take it out of the table.
static cfd_instance* reg_get(const mjData* d, int instance, int remove) {
  cfd_instance* inst = NULL;
  pthread_mutex_lock(&reg_lock);
  if (reg_cap) {
    reg_slot* e = reg_find(d, instance);
    if (e->d == d) {
      inst = e->inst;
      if (remove) e->d = reg_removed, e->inst = NULL;
    }
  }
  pthread_mutex_unlock(&reg_lock);
  return inst;
}

static int plugin_nstate(const mjModel* m, int instance) {
  (void)m;
  (void)instance;
  return 0;  // no mjtNum state: the chain model and buffers live behind plugin_data
}

static const char* config_value(const mjModel* m, int instance, const char* key) {
  const char* v = mj_getPluginConfig(m, instance, key);
  return v && v[0] ? v : NULL;
}

static void instance_label(const mjModel* m, int instance, char* label, int size) {
  const char* name = mj_id2name(m, mjOBJ_PLUGIN, instance);
  if (name && name[0]) snprintf(label, size, "chainfd instance '%s'", name);
  else snprintf(label, size, "chainfd instance #%d", instance);
}

// Nonzero, with a message naming them, when m declares more than one chainfd instance: which
// config chainfd_step should follow would be a guess.
static int several_instances(const mjModel* m, char* err, int err_size) {
  int count = 0;
  for (int i = 0; i < m->nplugin; i++) count += m->plugin[i] == registered_slot;
  if (count < 2) return 0;
  int len = snprintf(err, err_size, "the model declares %d chainfd instances (", count);
  for (int i = 0, k = 0; i < m->nplugin && len < err_size; i++) {
    if (m->plugin[i] != registered_slot) continue;
    char label[96];
    instance_label(m, i, label, sizeof label);
    len += snprintf(err + len, err_size - len, "%s%s", k++ ? ", " : "", label + strlen("chainfd "));
  }
  if (len < err_size)
    snprintf(err + len, err_size - len, "); chainfd_step uses one: declare a single instance");
  return 1;
}

static int plugin_init(const mjModel* m, mjData* d, int instance) {
  cfd_instance* inst = calloc(1, sizeof(*inst));
  if (!inst) return -1;
  char label[96];
  instance_label(m, instance, label, sizeof label);
  chainfd_config cfg = {config_value(m, instance, "backend"), config_value(m, instance, "precision"),
                        config_value(m, instance, "device"), config_value(m, instance, "fallback")};
  // an invalid configuration (or a second instance) must not fail mj_makeData (MuJoCo would abort
  // the process): it is kept and reported by every chainfd_step / chainfd_forward
  if (!several_instances(m, inst->config_error, sizeof inst->config_error))
    inst->stepper = chainfd_stepper_create(m, &cfg, label, inst->config_error,
                                           sizeof inst->config_error);
  if (reg_put(d, instance, inst)) {
    chainfd_stepper_free(inst->stepper);
    free(inst);
    return -1;
  }
  d->plugin_data[instance] = (uintptr_t)inst;  // (for MuJoCo's bookkeeping; never read here)
  return 0;
}

static void plugin_destroy(mjData* d, int instance) {
  cfd_instance* inst = reg_get(d, instance, 1);
  d->plugin_data[instance] = 0;
  if (!inst) return;
  chainfd_stepper_free(inst->stepper);
  free(inst);
}

static void plugin_copy(mjData* dest, const mjModel* m, const mjData* src, int instance) {
  (void)m;
  cfd_instance* to = reg_get(dest, instance, 0);
  const cfd_instance* from = reg_get(src, instance, 0);
  if (to && from && to->stepper && from->stepper) chainfd_stepper_copy_stats(to->stepper, from->stepper);
}

// Nothing to reset: the stepper holds no simulation state, only the model's chain and scratch.
static void plugin_reset(const mjModel* m, mjtNum* plugin_state, void* plugin_data, int instance) {
  (void)m;
  (void)plugin_state;
  (void)plugin_data;
  (void)instance;
}

// Never called (no capability); MuJoCo requires the pointer.
static void plugin_compute(const mjModel* m, mjData* d, int instance, int capability_bit) {
  (void)m;
  (void)d;
  (void)instance;
  (void)capability_bit;
}

mjPLUGIN_LIB_INIT(chainfd) {
  mjpPlugin plugin;
  mjp_defaultPlugin(&plugin);
  plugin.name = CHAINFD_PLUGIN_NAME;
  plugin.nattribute = CFD_CONFIG_NKEY;
  plugin.attributes = cfd_config_keys();
  plugin.capabilityflags = 0;
  plugin.nstate = plugin_nstate;
  plugin.init = plugin_init;
  plugin.destroy = plugin_destroy;
  plugin.copy = plugin_copy;
  plugin.reset = plugin_reset;
  plugin.compute = plugin_compute;
  registered_slot = mjp_registerPlugin(&plugin);
}

// The chainfd instance of (m, d): that of the first plugin instance of m that is chainfd, where d
// was made with one there (an mjData made from another model has none).
static cfd_instance* find_instance(const mjModel* m, const mjData* d) {
  for (int i = 0; i < m->nplugin; i++)
    if (m->plugin[i] == registered_slot)
      return i < d->nplugin && d->plugin[i] == registered_slot ? reg_get(d, i, 0) : NULL;
  return NULL;
}

static int lookup(const mjModel* m, const mjData* d, cfd_instance** out) {
  cfd_instance* inst = find_instance(m, d);
  if (inst && inst->stepper) {  // the common case first
    *out = inst;
    return CHAINFD_OK;
  }
  int declared = 0;
  for (int i = 0; i < m->nplugin; i++) declared |= m->plugin[i] == registered_slot;
  if (!inst && declared) {
    cfd_set_last_error("this mjData was not made from this model (mj_makeData(m) makes one with "
                       "chainfd's state)");
    return CHAINFD_ERR_NO_INSTANCE;
  }
  if (!inst) {
    cfd_set_last_error("the model declares no chainfd plugin instance: add <extension><plugin "
                       "plugin=\"%s\"><instance name=\"...\"/></plugin></extension>",
                       CHAINFD_PLUGIN_NAME);
    return CHAINFD_ERR_NO_INSTANCE;
  }
  if (!inst->stepper) {
    cfd_set_last_error("%s", inst->config_error);
    return CHAINFD_ERR_CONFIG;
  }
  *out = inst;
  return CHAINFD_OK;
}

int chainfd_forward(const mjModel* m, mjData* d) {
  cfd_instance* inst;
  int status = lookup(m, d, &inst);
  return status ? status : chainfd_stepper_forward(inst->stepper, m, d);
}

int chainfd_step(const mjModel* m, mjData* d) {
  cfd_instance* inst;
  int status = lookup(m, d, &inst);
  return status ? status : chainfd_stepper_step(inst->stepper, m, d);
}

int chainfd_get_stats(const mjModel* m, const mjData* d, chainfd_stats* stats) {
  cfd_instance* inst = find_instance(m, d);
  if (!inst) return CHAINFD_ERR_NO_INSTANCE;
  if (!stats) return CHAINFD_ERR_CONFIG;
  if (inst->stepper) {
    chainfd_stepper_stats(inst->stepper, stats);
  } else {
    memset(stats, 0, sizeof(*stats));
    stats->backend = "";
    stats->last_fallback = inst->config_error;
  }
  return CHAINFD_OK;
}
