/*
 * config.c -- what the core owns of a node's settings (config.h).
 */
#include "config.h"

#include <stdlib.h>

void ms_config_free(struct ms_config *c)
{
    free(c->types);
    c->types = NULL;
}
