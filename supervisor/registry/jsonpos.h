/*
 * Finds where in a JSON text a value lives, by JSON Pointer.
 *
 * jansson keeps no positions for the values it builds; the registry uses
 * this to name the line of a key it rejects. The text must be valid JSON
 * (jansson has already said so).
 */
#ifndef TP_JSONPOS_H
#define TP_JSONPOS_H

#include <stddef.h>

/*
 * The 1-based line where the value at pointer (RFC 6901, "" = the whole
 * text; "/tools/2/timeout") starts, or, for an object member, where its key
 * starts. 0 when the pointer names nothing.
 */
int tp_json_line(const char *text, size_t len, const char *pointer);

/*
 * The lines of the first n elements of the array at pointer, into lines,
 * in one walk. Returns how many were found (0 when pointer names no array).
 */
size_t tp_json_element_lines(const char *text, size_t len, const char *pointer, int *lines, size_t n);

#endif
