/*
 * The formats of jsonformat.h, each a small hand-written parser of its
 * RFC's grammar: exact, ASCII only where the RFC is, no allocation.
 */
#include "jsonformat.h"

#include <stdint.h>
#include <string.h>

static const char *const names[] = {
    [TP_FORMAT_NONE] = "",
    [TP_FORMAT_DATE_TIME] = "date-time",
    [TP_FORMAT_DATE] = "date",
    [TP_FORMAT_TIME] = "time",
    [TP_FORMAT_DURATION] = "duration",
    [TP_FORMAT_EMAIL] = "email",
    [TP_FORMAT_HOSTNAME] = "hostname",
    [TP_FORMAT_IPV4] = "ipv4",
    [TP_FORMAT_IPV6] = "ipv6",
    [TP_FORMAT_URI] = "uri",
    [TP_FORMAT_URI_REFERENCE] = "uri-reference",
    [TP_FORMAT_UUID] = "uuid",
    [TP_FORMAT_REGEX] = "regex",
    [TP_FORMAT_JSON_POINTER] = "json-pointer",
};

tp_format_t tp_jsonformat_lookup(const char *name)
{
    for (size_t i = 1; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i]) == 0)
            return (tp_format_t)i;
    return TP_FORMAT_NONE;
}

const char *tp_jsonformat_name(tp_format_t f)
{
    return (size_t)f < sizeof names / sizeof names[0] ? names[f] : "";
}

static bool digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool hexdig(char c)
{
    return digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* n digits at s as a number, or -1. */
static int num(const char *s, size_t n)
{
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!digit(s[i]))
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/* full-date: YYYY-MM-DD with the month's days (leap years by the Gregorian rule). */
static bool full_date(const char *s, size_t n)
{
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (n != 10 || s[4] != '-' || s[7] != '-')
        return false;
    int y = num(s, 4), m = num(s + 5, 2), d = num(s + 8, 2);
    if (y < 0 || m < 1 || m > 12 || d < 1)
        return false;
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return d <= days[m - 1] + (m == 2 && leap);
}

/*
 * full-time: hh:mm:ss[.frac](Z|+hh:mm|-hh:mm). A second of 60 only where
 * the time is 23:59 in UTC once the offset is taken away.
 */
static bool full_time(const char *s, size_t n)
{
    if (n < 9 || s[2] != ':' || s[5] != ':')
        return false;
    int h = num(s, 2), mi = num(s + 3, 2), sec = num(s + 6, 2);
    if (h < 0 || h > 23 || mi < 0 || mi > 59 || sec < 0 || sec > 60)
        return false;
    size_t i = 8;
    if (i < n && s[i] == '.') {
        size_t start = ++i;
        while (i < n && digit(s[i]))
            i++;
        if (i == start)
            return false;
    }
    if (i >= n)
        return false;
    int oh = 0, om = 0;
    if ((s[i] == 'Z' || s[i] == 'z') && i + 1 == n) {
        /* UTC */
    } else if ((s[i] == '+' || s[i] == '-') && n - i == 6 && s[i + 3] == ':') {
        oh = num(s + i + 1, 2);
        om = num(s + i + 4, 2);
        if (oh < 0 || oh > 23 || om < 0 || om > 59)
            return false;
        if (s[i] == '+') {
            oh = -oh;
            om = -om;
        }
    } else {
        return false;
    }
    if (sec == 60) {
        int utc = ((h * 60 + mi + oh * 60 + om) % 1440 + 1440) % 1440;
        if (utc != 23 * 60 + 59)
            return false;
    }
    return true;
}

static bool date_time(const char *s, size_t n)
{
    return n > 11 && (s[10] == 'T' || s[10] == 't') && full_date(s, 10) && full_time(s + 11, n - 11);
}

/* RFC 3339 appendix A: P then date units in order (or weeks alone), then T and time units in order. */
static bool duration(const char *s, size_t n)
{
    if (n < 2 || s[0] != 'P')
        return false;
    size_t i = 1;
    /* the week form stands alone */
    size_t k = i;
    while (k < n && digit(s[k]))
        k++;
    if (k > i && k < n && s[k] == 'W')
        return k + 1 == n;
    static const char date_units[] = "YMD", time_units[] = "HMS";
    int last = -1; /* index of the last unit seen, to enforce order and adjacency */
    bool any = false;
    while (i < n && s[i] != 'T') {
        size_t st = i;
        while (i < n && digit(s[i]))
            i++;
        if (i == st || i >= n)
            return false;
        const char *u = memchr(date_units, s[i], 3);
        if (u == NULL || s[i] == 0)
            return false;
        int idx = (int)(u - date_units);
        /* Y then M then D, each directly after the one before: Y D has no M between */
        if (idx <= last || (last >= 0 && idx != last + 1))
            return false;
        last = idx;
        any = true;
        i++;
    }
    if (i == n)
        return any;
    i++; /* T */
    if (i == n)
        return false;
    last = -1;
    while (i < n) {
        size_t st = i;
        while (i < n && digit(s[i]))
            i++;
        if (i == st || i >= n)
            return false;
        const char *u = memchr(time_units, s[i], 3);
        if (u == NULL || s[i] == 0)
            return false;
        int idx = (int)(u - time_units);
        if (idx <= last || (last >= 0 && idx != last + 1))
            return false;
        last = idx;
        i++;
    }
    return true;
}

/* ipv4: four decimal octets 0-255, no leading zeros. */
static bool ipv4(const char *s, size_t n)
{
    size_t i = 0;
    for (int part = 0; part < 4; part++) {
        if (part > 0) {
            if (i >= n || s[i] != '.')
                return false;
            i++;
        }
        size_t st = i;
        int v = 0;
        while (i < n && digit(s[i]) && i - st < 4)
            v = v * 10 + (s[i++] - '0');
        size_t len = i - st;
        if (len == 0 || len > 3 || v > 255 || (len > 1 && s[st] == '0'))
            return false;
    }
    return i == n;
}

/* ipv6: eight groups of 1-4 hex digits, one "::" for a run of zeros, an IPv4 tail. */
static bool ipv6(const char *s, size_t n)
{
    size_t i = 0;
    int groups = 0;
    bool gap = false;
    if (n >= 2 && s[0] == ':' && s[1] == ':') {
        gap = true;
        i = 2;
        if (i == n)
            return true;
    } else if (n > 0 && s[0] == ':') {
        return false;
    }
    while (i < n) {
        size_t st = i;
        while (i < n && hexdig(s[i]) && i - st < 5)
            i++;
        if (i < n && s[i] == '.') {
            /* the IPv4 tail: counts two groups, and must end the address */
            if (!ipv4(s + st, n - st))
                return false;
            groups += 2;
            i = n;
            break;
        }
        size_t len = i - st;
        if (len == 0 || len > 4)
            return false;
        groups++;
        if (i == n)
            break;
        if (s[i] != ':')
            return false;
        i++;
        if (i < n && s[i] == ':') {
            if (gap)
                return false;
            gap = true;
            i++;
            if (i == n)
                break;
        } else if (i == n) {
            return false; /* a single trailing ':' */
        }
    }
    return gap ? groups < 8 : groups == 8;
}

/* One label of a host name: 1-63 of letters, digits, '-' not at either end. */
static bool label(const char *s, size_t n)
{
    if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!alpha(s[i]) && !digit(s[i]) && s[i] != '-')
            return false;
    return true;
}

static bool hostname(const char *s, size_t n)
{
    if (n == 0 || n > 253)
        return false;
    size_t st = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || s[i] == '.') {
            if (!label(s + st, i - st))
                return false;
            st = i + 1;
        }
    }
    return true;
}

/* RFC 5322 atext: letters, digits and !#$%&'*+-/=?^_`{|}~ */
static bool atext(char c)
{
    return alpha(c) || digit(c) || (c && strchr("!#$%&'*+-/=?^_`{|}~", c) != NULL);
}

static bool email(const char *s, size_t n)
{
    const char *at = NULL;
    size_t i = 0;
    if (n > 0 && s[0] == '"') {
        /* quoted-string: printable ASCII, \\ escapes */
        for (i = 1; i < n && s[i] != '"'; i++) {
            if (s[i] == '\\')
                i++;
            else if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
                return false;
        }
        if (i >= n || i == 1)
            return false;
        i++;
    } else {
        bool dot_ok = false;
        for (; i < n && s[i] != '@'; i++) {
            if (s[i] == '.') {
                if (!dot_ok)
                    return false;
                dot_ok = false;
            } else if (atext(s[i])) {
                dot_ok = true;
            } else {
                return false;
            }
        }
        if (!dot_ok)
            return false; /* empty, or ends with a dot */
    }
    if (i >= n || s[i] != '@')
        return false;
    at = s + i + 1;
    size_t dn = n - i - 1;
    if (dn >= 2 && at[0] == '[' && at[dn - 1] == ']') {
        if (dn > 7 && strncmp(at + 1, "IPv6:", 5) == 0)
            return ipv6(at + 6, dn - 7);
        return ipv4(at + 1, dn - 2);
    }
    return hostname(at, dn);
}

static bool uuid(const char *s, size_t n)
{
    if (n != 36)
        return false;
    for (size_t i = 0; i < 36; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? s[i] != '-' : !hexdig(s[i]))
            return false;
    }
    return true;
}

static bool json_pointer(const char *s, size_t n)
{
    if (n > 0 && s[0] != '/')
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '~' && (i + 1 >= n || (s[i + 1] != '0' && s[i + 1] != '1')))
            return false;
    return true;
}

/* RFC 3986 character classes. */
static bool unreserved(char c)
{
    return alpha(c) || digit(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

static bool sub_delim(char c)
{
    return c && strchr("!$&'()*+,;=", c) != NULL;
}

/* s[0..n) is made of unreserved, pct-encoded, sub-delims and the bytes in extra. */
static bool uri_chars(const char *s, size_t n, const char *extra)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%') {
            if (i + 2 >= n)
                return false;
            if (!hexdig(s[i + 1]) || !hexdig(s[i + 2]))
                return false;
            i += 2;
        } else if (!unreserved(c) && !sub_delim(c) && !(c && strchr(extra, c))) {
            return false;
        }
    }
    return true;
}

/* authority = [ userinfo "@" ] host [ ":" port ] */
static bool authority(const char *s, size_t n)
{
    const char *at = memchr(s, '@', n);
    if (at != NULL) {
        if (!uri_chars(s, (size_t)(at - s), ":"))
            return false;
        n -= (size_t)(at - s) + 1;
        s = at + 1;
    }
    size_t hn = n;
    if (n > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (close == NULL)
            return false;
        size_t in = (size_t)(close - s) - 1;
        if (!(in > 0 && (s[1] == 'v' || s[1] == 'V' ? uri_chars(s + 1, in, ":") : ipv6(s + 1, in))))
            return false;
        hn = (size_t)(close - s) + 1;
    } else {
        const char *colon = memchr(s, ':', n);
        hn = colon ? (size_t)(colon - s) : n;
        if (!uri_chars(s, hn, ""))
            return false;
    }
    if (hn < n) {
        if (s[hn] != ':')
            return false;
        for (size_t i = hn + 1; i < n; i++)
            if (!digit(s[i]))
                return false;
    }
    return true;
}

/* A URI (absolute: a scheme) or, when relative_ok, any URI-reference. */
static bool uri(const char *s, size_t n, bool relative_ok)
{
    size_t i = 0;
    if (n > 0 && alpha(s[0])) {
        size_t k = 1;
        while (k < n && (alpha(s[k]) || digit(s[k]) || s[k] == '+' || s[k] == '-' || s[k] == '.'))
            k++;
        if (k < n && s[k] == ':')
            i = k + 1;
    }
    if (i == 0 && !relative_ok)
        return false;
    if (i == 0) {
        /* a relative-ref's first segment may not hold ':' */
        size_t k = 0;
        while (k < n && s[k] != '/' && s[k] != '?' && s[k] != '#')
            if (s[k++] == ':')
                return false;
    }
    size_t end = n;
    const char *hash = memchr(s + i, '#', n - i);
    if (hash != NULL) {
        end = (size_t)(hash - s);
        if (!uri_chars(hash + 1, n - end - 1, ":@/?"))
            return false;
    }
    const char *q = memchr(s + i, '?', end - i);
    size_t pend = q ? (size_t)(q - s) : end;
    if (q != NULL && !uri_chars(q + 1, end - pend - 1, ":@/?"))
        return false;
    if (pend - i >= 2 && s[i] == '/' && s[i + 1] == '/') {
        size_t a = i + 2, b = a;
        while (b < pend && s[b] != '/')
            b++;
        if (!authority(s + a, b - a))
            return false;
        i = b;
    }
    return uri_chars(s + i, pend - i, ":@/");
}

bool tp_jsonformat_check(tp_format_t f, const char *s, size_t n)
{
    switch (f) {
    case TP_FORMAT_DATE_TIME:
        return date_time(s, n);
    case TP_FORMAT_DATE:
        return full_date(s, n);
    case TP_FORMAT_TIME:
        return full_time(s, n);
    case TP_FORMAT_DURATION:
        return duration(s, n);
    case TP_FORMAT_EMAIL:
        return email(s, n);
    case TP_FORMAT_HOSTNAME:
        return hostname(s, n);
    case TP_FORMAT_IPV4:
        return ipv4(s, n);
    case TP_FORMAT_IPV6:
        return ipv6(s, n);
    case TP_FORMAT_URI:
        return uri(s, n, false);
    case TP_FORMAT_URI_REFERENCE:
        return uri(s, n, true);
    case TP_FORMAT_UUID:
        return uuid(s, n);
    case TP_FORMAT_JSON_POINTER:
        return json_pointer(s, n);
    default:
        return true;
    }
}
