/* Monotonic time in microseconds: every duration and deadline uses it. */
#ifndef TP_CLOCK_H
#define TP_CLOCK_H

#include <stdint.h>

uint64_t tp_now_us(void);

#endif
