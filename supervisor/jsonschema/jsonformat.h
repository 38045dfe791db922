/*
 * JSON Schema "format", asserted (supervisor/jsonschema/compile.c and validate.c call these when a
 * tool's or the registry's "formats" is "assert"): exact checks for the
 * formats tools' parameters use, by the RFCs the JSON Schema spec names.
 *
 *   date-time, date, time  RFC 3339 section 5.6 (time needs its offset; a
 *                          leap second only at 23:59:60 UTC; T and Z in
 *                          either case)
 *   duration               RFC 3339 appendix A (whole numbers, P..T..)
 *   email                  RFC 5321 Mailbox: dot-atom or quoted local part,
 *                          a host name or an [IPv4] / [IPv6:...] literal
 *   hostname               RFC 1123: labels of letters, digits and inner
 *                          hyphens, 63 bytes each, 253 in all (A-labels,
 *                          "xn--...", are checked as plain labels: their
 *                          Punycode is not decoded)
 *   ipv4, ipv6             RFC 2673 dotted quad (no leading zeros), RFC 4291
 *                          text forms (no zone, no prefix length)
 *   uri, uri-reference     RFC 3986 URI and URI-reference, ASCII only
 *   uuid                   RFC 4122 8-4-4-4-12 hex digits
 *   json-pointer           RFC 6901
 * "regex" is checked by validate.c (it compiles the pattern). Other
 * format names are annotations even when asserting.
 */
#ifndef TP_JSONFORMAT_H
#define TP_JSONFORMAT_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    TP_FORMAT_NONE = 0, /* not a format checked here */
    TP_FORMAT_DATE_TIME,
    TP_FORMAT_DATE,
    TP_FORMAT_TIME,
    TP_FORMAT_DURATION,
    TP_FORMAT_EMAIL,
    TP_FORMAT_HOSTNAME,
    TP_FORMAT_IPV4,
    TP_FORMAT_IPV6,
    TP_FORMAT_URI,
    TP_FORMAT_URI_REFERENCE,
    TP_FORMAT_UUID,
    TP_FORMAT_REGEX,
    TP_FORMAT_JSON_POINTER,
} tp_format_t;

/* The format a "format" value names, or TP_FORMAT_NONE. */
tp_format_t tp_jsonformat_lookup(const char *name);

/* Its name, as a schema writes it. */
const char *tp_jsonformat_name(tp_format_t f);

/* Is s (n bytes, UTF-8) valid in format f? TP_FORMAT_REGEX and NONE: always true here. */
bool tp_jsonformat_check(tp_format_t f, const char *s, size_t n);

#endif
