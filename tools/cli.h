/* The toolpool subcommands, one file each, dispatched from toolpool.c. */
#ifndef TP_CLI_H
#define TP_CLI_H

#include <stdio.h>

int tp_cmd_run(int argc, char **argv);
int tp_cmd_trace(int argc, char **argv);
int tp_cmd_demo(int argc, char **argv);

/* Prints every result line of in as the seed's trace. 0, or 2 on bad input. */
int tp_trace_print(FILE *in, const char *name, FILE *out);

#endif
