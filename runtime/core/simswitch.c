/*
 * simswitch.c -- the switches of simswitch.h; compiled into the
 * simulator's copy of the core only (CMakeLists.txt: ms_core_sim).
 */
#include "simswitch.h"

#ifdef MS_SIM_SWITCHES
int ms_sim_break_two_owners;
int ms_sim_break_skip_fence;
int ms_sim_break_no_rollback;
ms_ask_cb ms_sim_break_reply_twice;
#endif
