/*
 * step_info.h - a plan's steps described for observers, profilers and the
 * memory timeline (memgrad_observe.h).
 */
#ifndef MG_STEP_INFO_H
#define MG_STEP_INFO_H

#include "memgrad_observe.h"
#include "schedule.h"

mg_phase mgi_plan_step_phase(const mg_plan *p, int32_t step);
/* Everything but the bytes in use, which only a run (or the timeline's
 * simulation) knows. */
void mgi_plan_step_info(const mg_plan *p, int32_t step, mg_step_info *info);

#endif
