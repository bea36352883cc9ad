/* The put lines' parser of datahub/catalog/_put_rows.c, in a header of its own so that
 * bench/scale/sqlite_c_ceiling.c times the same parser (no Python: plain C only).
 *
 * It cuts a line that put_lines' regex has checked into its fields, and refuses (returns 0)
 * anything that is not exactly that shape: it relies on the regex for every check (the key's
 * and URL's patterns, the etag's characters), and checks itself only what it needs to cut
 * safely and to store what the json_each statement stores (no escapes, one-field objects,
 * sizes of at most 18 digits, no -0).
 */
#ifndef DATAHUB_PUT_ROWS_LINES_H
#define DATAHUB_PUT_ROWS_LINES_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    const char *p;
    int n;
} span;

typedef struct {
    span key, url, etag, meta, labels;
    int64_t size;
} put_row;

static int literal(const char **at, const char *end, const char *text, size_t n) {
    if ((size_t)(end - *at) < n || memcmp(*at, text, n) != 0)
        return 0;
    *at += n;
    return 1;
}
#define LITERAL(at, end, s) literal(at, end, s, sizeof(s) - 1)

/* A JSON string without escapes at *at (the regex admits no '"' or '\\' inside): its content. */
static int string(const char **at, const char *end, span *out) {
    if (*at >= end || **at != '"')
        return 0;
    const char *start = *at + 1, *close = memchr(start, '"', (size_t)(end - start));
    if (close == NULL || memchr(start, '\\', (size_t)(close - start)) != NULL || close - start > INT_MAX)
        return 0;
    out->p = start;
    out->n = (int)(close - start);
    *at = close + 1;
    return 1;
}

/* An integer of 1 to 18 digits, no sign, no leading zero (the regex's size). */
static int size_value(const char **at, const char *end, int64_t *out) {
    const char *p = *at;
    int64_t v = 0;
    int digits = 0;
    while (p < end && *p >= '0' && *p <= '9' && digits < 19) {
        v = v * 10 + (*p - '0');
        p++;
        digits++;
    }
    if (digits == 0 || digits > 18 || (digits > 1 && **at == '0'))
        return 0;
    *out = v;
    *at = p;
    return 1;
}

/* A one-field object {"name":"text"} or {"name":integer}, as the regex admits it: its text. */
static int one_field(const char **at, const char *end, span *out) {
    const char *start = *at;
    span name, text;
    if (!LITERAL(at, end, "{") || !string(at, end, &name) || !LITERAL(at, end, ":"))
        return 0;
    if (*at < end && **at == '"') {
        if (!string(at, end, &text))
            return 0;
    } else {
        const char *p = *at;
        if (p < end && *p == '-')
            p++;
        const char *digits = p;
        while (p < end && *p >= '0' && *p <= '9' && p - digits < 17)
            p++;
        if (p == digits || p - digits > 16 || (*digits == '0' && (p - digits > 1 || digits != *at)))
            return 0; /* none, too many, a leading zero, or -0 (json.loads reads it as 0) */
        *at = p;
    }
    if (!LITERAL(at, end, "}") || *at - start > INT_MAX)
        return 0;
    out->p = start;
    out->n = (int)(*at - start);
    return 1;
}

/* One line of the chunk's array: {"op":"put","record":{"key":K,"url":U,"etag":E,"size":N
 * [,"meta":{…}][,"labels":{…}]}} */
static int line(const char **at, const char *end, put_row *r) {
    memset(r, 0, sizeof *r);
    if (!LITERAL(at, end, "{\"op\":\"put\",\"record\":{\"key\":") || !string(at, end, &r->key) ||
        !LITERAL(at, end, ",\"url\":") || !string(at, end, &r->url) || !LITERAL(at, end, ",\"etag\":") ||
        !string(at, end, &r->etag) || !LITERAL(at, end, ",\"size\":") || !size_value(at, end, &r->size))
        return 0;
    if (LITERAL(at, end, ",\"meta\":") && !one_field(at, end, &r->meta))
        return 0;
    if (LITERAL(at, end, ",\"labels\":") && !one_field(at, end, &r->labels))
        return 0;
    return LITERAL(at, end, "}}");
}

#endif
