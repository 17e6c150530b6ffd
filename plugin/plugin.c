// The chainfd engine plugin: registration with MuJoCo, one stepper per mjData (made in init, freed in
// destroy, counters carried by copy), and chainfd_step / chainfd_forward, which find that stepper.
//
// The plugin declares no capability: MuJoCo never calls it during mj_step (which keeps MuJoCo's own
// dynamics); it exists so that the model carries the configuration and every mjData its own
// chain model and buffers.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mujoco/mjplugin.h>

#include "chainfd.h"
#include "config.h"

void cfd_set_last_error(const char* fmt, ...);

// One per mjData: the stepper, or why the configuration is invalid. owner: the mjData it was made
// for. A copy of plugin_data made outside mj_copyData (an unpickled mjData holds its original's
// pointer) names another owner: that mjData has no usable instance, and its destroy frees none.
typedef struct cfd_instance {
  chainfd_stepper* stepper;  // NULL when the configuration is invalid
  const mjData* owner;
  char config_error[640];
} cfd_instance;

static int registered_slot = -1;

static int plugin_nstate(const mjModel* m, int instance) {
  (void)m;
  (void)instance;
  return 0;  // no mjtNum state: the chain model and buffers live behind plugin_data
}

static const char* config_value(const mjModel* m, int instance, const char* key) {
  const char* v = mj_getPluginConfig(m, instance, key);
  return v && v[0] ? v : NULL;
}

static int plugin_init(const mjModel* m, mjData* d, int instance) {
  cfd_instance* inst = calloc(1, sizeof(*inst));
  if (!inst) return -1;
  char label[96];
  const char* name = mj_id2name(m, mjOBJ_PLUGIN, instance);
  if (name && name[0]) snprintf(label, sizeof label, "chainfd instance '%s'", name);
  else snprintf(label, sizeof label, "chainfd instance #%d", instance);
  chainfd_config cfg = {config_value(m, instance, "backend"), config_value(m, instance, "precision"),
                        config_value(m, instance, "device"), config_value(m, instance, "fallback")};
  // an invalid configuration must not fail mj_makeData (MuJoCo would abort the process): it is
  // kept and reported by every chainfd_step / chainfd_forward
  inst->stepper = chainfd_stepper_create(m, &cfg, label, inst->config_error,
                                         sizeof inst->config_error);
  inst->owner = d;
  d->plugin_data[instance] = (uintptr_t)inst;
  return 0;
}

static void plugin_destroy(mjData* d, int instance) {
  cfd_instance* inst = (cfd_instance*)d->plugin_data[instance];
  d->plugin_data[instance] = 0;
  if (!inst || inst->owner != d) return;  // another mjData's (see cfd_instance)
  chainfd_stepper_free(inst->stepper);
  free(inst);
}

static void plugin_copy(mjData* dest, const mjModel* m, const mjData* src, int instance) {
  (void)m;
  cfd_instance* to = (cfd_instance*)dest->plugin_data[instance];
  const cfd_instance* from = (const cfd_instance*)src->plugin_data[instance];
  if (to && from && to->owner == dest && from->owner == src && to->stepper && from->stepper)
    chainfd_stepper_copy_stats(to->stepper, from->stepper);
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
  plugin.attributes = cfd_config_keys;
  plugin.capabilityflags = 0;
  plugin.nstate = plugin_nstate;
  plugin.init = plugin_init;
  plugin.destroy = plugin_destroy;
  plugin.copy = plugin_copy;
  plugin.reset = plugin_reset;
  plugin.compute = plugin_compute;
  registered_slot = mjp_registerPlugin(&plugin);
}

// The chainfd instance of (m, d): the first plugin instance of m that is chainfd, where d holds a
// chainfd instance too (d made from another model holds something else there); *foreign: d holds
// another mjData's instance (see cfd_instance).
static cfd_instance* find_instance(const mjModel* m, const mjData* d, int* foreign) {
  *foreign = 0;
  for (int i = 0; i < m->nplugin; i++)
    if (m->plugin[i] == registered_slot && i < d->nplugin && d->plugin[i] == registered_slot) {
      cfd_instance* inst = (cfd_instance*)d->plugin_data[i];
      if (inst && inst->owner != d) {
        *foreign = 1;
        return NULL;
      }
      return inst;
    }
  return NULL;
}

static int lookup(const mjModel* m, const mjData* d, cfd_instance** out) {
  int foreign;
  cfd_instance* inst = find_instance(m, d, &foreign);
  if (foreign) {
    cfd_set_last_error("this mjData holds another mjData's chainfd state (copied outside "
                       "mj_copyData, e.g. unpickled): make it with mj_makeData or mj_copyData");
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
  int foreign;
  cfd_instance* inst = find_instance(m, d, &foreign);
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
