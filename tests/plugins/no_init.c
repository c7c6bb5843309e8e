/* no_init.c — a test plugin with a valid description but no pc_plugin_init. */
#include <percolator/observer.h>

PC_PLUGIN_DECLARE("no_init", "1.0");
