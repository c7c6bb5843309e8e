/* plugin.h — loading observer plugins (shared objects built against
 * include/percolator/observer.h) into an observer registry: the checks of
 * their magic, their init with the host's table of functions, rollback of
 * what a failed init registered, and unloading. */
#ifndef PC_OBSERVERS_PLUGIN_H
#define PC_OBSERVERS_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include <percolator/observer.h>
#include <percolator/percolator.h>

#include "config/config.h"
#include "observers/registry.h"

typedef struct pc_plugin pc_plugin_t;

/* What identifies a plugin's file on disk: a new build written over it
 * changes its size or modification time, one moved into its place its inode. */
typedef struct pc_plugin_file {
  uint64_t dev, ino, size;
  int64_t mtime_ns;
} pc_plugin_file_t;

/* Loads the plugin at path: copies the file into memory of its own and loads
 * that copy (dlopen with RTLD_NOW | RTLD_LOCAL), so that the file may be
 * replaced or rewritten while the plugin runs without changing what runs (a
 * path without '/' is taken relative to the working directory, never
 * searched for in the system's library directories); checks its pc_plugin_magic and calls its
 * pc_plugin_init with config_json (NULL: "{}"), which registers its
 * observers in registry. On PC_OK *handle is the loaded plugin, which the
 * caller unloads with pc_plugin_unload before freeing registry. On failure
 * *handle is NULL, every observer the init registered has been removed again
 * (state_free called), the library is closed, and err's message names path
 * and the reason:
 *   PC_INVALID  the file cannot be loaded (dlerror's text), is not a plugin
 *               (no pc_plugin_magic, a wrong magic constant, no
 *               pc_plugin_init), its pc_plugin_magic_t is too small, its ABI
 *               major differs from the host's (each naming the field and both
 *               values), or the same file is already loaded;
 *   PC_BUSY     the file kept changing while it was copied;
 *   PC_IO_ERROR the private copy could not be made;
 *   PC_NOMEM;
 *   any status  its init failed: "<path>: init failed: <the plugin's text>",
 *               with the plugin's status (PC_INTERNAL if it is not one). */
pc_status_t pc_plugin_load(pc_observer_registry_t *registry, const char *path,
                           const char *config_json, pc_plugin_t **handle, pc_error_t *err);

/* Removes the plugin's observers from its registry (calling their
 * state_free), calls its pc_plugin_teardown if it has one, closes the library
 * and releases the handle. No observer of the plugin may be running, or be
 * about to run. NULL is a no-op. */
void pc_plugin_unload(pc_plugin_t *plugin);

/* 1 when the file at the plugin's path is no longer the one it was loaded
 * from (rewritten, replaced, or removed): the process still runs the copy it
 * loaded. */
int pc_plugin_changed(const pc_plugin_t *plugin);

/* The plugin's name and version (from its magic) and the path it was loaded
 * from. Owned by the handle. */
const char *pc_plugin_name(const pc_plugin_t *plugin);
const char *pc_plugin_version(const pc_plugin_t *plugin);
const char *pc_plugin_path(const pc_plugin_t *plugin);
/* The ABI minor version the plugin was built against. */
int pc_plugin_abi_minor(const pc_plugin_t *plugin);

/* Loads cfg's workers.plugins in order into registry. On PC_OK *plugins is a
 * malloc'd array of *n handles (NULL when there are none) that the caller
 * releases with pc_plugins_unload. On failure nothing stays loaded and err's
 * message starts with the plugin's key path ("workers.plugins[1]: ..."). */
pc_status_t pc_plugins_load_config(pc_observer_registry_t *registry, const pc_config_t *cfg,
                                   pc_plugin_t ***plugins, size_t *n, pc_error_t *err);

/* Unloads plugins[0..n) in reverse order and frees the array. */
void pc_plugins_unload(pc_plugin_t **plugins, size_t n);

#endif
