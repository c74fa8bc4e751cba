/*
 * torch_error.c: the plug-in's error text for the calling thread (hbm_torch_error() returns it): what the helper's
 * calls, the plug-in's entry points and the pools that sleep (torch_sleep.c) say when they fail. Below both.
 */
#include <stdarg.h>
#include <stdio.h>

#include "torch_plugin.h"

__thread char hbm_torch__helper_error[1600];

void hbm_torch__set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(hbm_torch__helper_error, sizeof hbm_torch__helper_error, fmt, ap);
    va_end(ap);
}
