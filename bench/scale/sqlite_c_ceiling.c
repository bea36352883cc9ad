/* SQLite's own insert rate for the catalog's `records` row, with no Python in the loop
 * (issue 38 item 3; driven and compiled by bench/scale/c_ceiling.py, which see).
 *
 *   sqlite_c_ceiling DB SCHEMA_FILE LINES_FILE MODE PAGE_SIZE
 *
 * LINES_FILE holds compact put lines (bench/scale's change_lines). They are read and cut into
 * fields before the clock starts (by datahub/catalog/_put_rows_lines.h, the commit's own
 * parser), except in the `parse` modes, where cutting them is timed too. MODE:
 *   rows         today's 10-column row, one prepared INSERT OR REPLACE, one transaction
 *   parse-rows   the same, the lines cut into fields inside the timed loop
 *   packed       key columns plus one packed value (url, etag, size, meta as one JSON text)
 *   rows-nowal   `rows` with journal_mode=OFF and synchronous=OFF: the B-tree without the WAL
 * The database is made with the given page size, journal_mode=WAL, synchronous=FULL and a
 * 16 MiB page cache (the catalog's pragmas). Prints one line: rows, CPU seconds, wall seconds.
 */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "_put_rows_lines.h" /* datahub/catalog: the commit's parser (span, put_row, line) */

#define OPEN_SEQ 4611686018427387904LL /* revisions.OPEN = 2**62 */

static double now(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)size + 1);
    if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(2);
    }
    buf[size] = 0;
    fclose(f);
    *len = (size_t)size;
    return buf;
}

/* One line of the file: the module's own parser (`_put_rows_lines.h`), then its newline. */
static const char *parse(const char *at, const char *end, put_row *r) {
    if (!line(&at, end, r) || at == end || *at != '\n')
        return NULL;
    return at + 1;
}

static void check(int rc, sqlite3 *db, const char *what) {
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
        fprintf(stderr, "%s: %s\n", what, sqlite3_errmsg(db));
        exit(1);
    }
}

static void exec(sqlite3 *db, const char *sql) { check(sqlite3_exec(db, sql, NULL, NULL, NULL), db, sql); }

static void bind_text(sqlite3_stmt *st, int i, span s) {
    if (s.p)
        sqlite3_bind_text(st, i, s.p, s.n, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, i);
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s DB SCHEMA_FILE LINES_FILE MODE PAGE_SIZE\n", argv[0]);
        return 2;
    }
    const char *mode = argv[4];
    int packed = strcmp(mode, "packed") == 0, timed_parse = strcmp(mode, "parse-rows") == 0;
    int no_wal = strcmp(mode, "rows-nowal") == 0;
    if (!packed && !timed_parse && !no_wal && strcmp(mode, "rows") != 0) {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    size_t len, schema_len;
    char *text = slurp(argv[3], &len);
    char *schema = slurp(argv[2], &schema_len);
    size_t lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    put_row *rows = calloc(lines, sizeof(put_row));
    if (!timed_parse) {
        const char *at = text;
        for (size_t i = 0; i < lines; i++)
            if (!(at = parse(at, text + len, &rows[i]))) {
                fprintf(stderr, "line %zu is not a plain put\n", i + 1);
                return 1;
            }
    }
    sqlite3 *db;
    check(sqlite3_open(argv[1], &db), db, "open");
    char pragma[64];
    snprintf(pragma, sizeof pragma, "PRAGMA page_size = %d", atoi(argv[5]));
    exec(db, pragma);
    exec(db, no_wal ? "PRAGMA journal_mode = OFF" : "PRAGMA journal_mode = WAL");
    exec(db, no_wal ? "PRAGMA synchronous = OFF" : "PRAGMA synchronous = FULL");
    exec(db, "PRAGMA cache_size = -16384");
    exec(db, schema);
    const char *sql = packed ? "INSERT OR REPLACE INTO records (dataset_id, key, from_seq, to_seq, v)"
                               " VALUES (1, ?, 1, 4611686018427387904, ?)"
                             : "INSERT OR REPLACE INTO records (dataset_id, from_seq, to_seq, key, url, etag,"
                               " size, checksum, meta, labels)"
                               " VALUES (1, 1, 4611686018427387904, ?, ?, ?, ?, NULL, ?, ?)";
    sqlite3_stmt *st;
    check(sqlite3_prepare_v2(db, sql, -1, &st, NULL), db, sql);
    char *value = malloc(len / (lines ? lines : 1) + 4096);
    double cpu = now(CLOCK_PROCESS_CPUTIME_ID), wall = now(CLOCK_MONOTONIC);
    exec(db, "BEGIN IMMEDIATE");
    const char *at = text;
    for (size_t i = 0; i < lines; i++) {
        put_row *r = &rows[i];
        if (timed_parse && !(at = parse(at, text + len, r))) {
            fprintf(stderr, "line %zu is not a plain put\n", i + 1);
            return 1;
        }
        sqlite3_bind_text(st, 1, r->key.p, r->key.n, SQLITE_STATIC);
        if (packed) { /* ["url","etag",size,meta] */
            int n = sprintf(value, "[\"%.*s\",\"%.*s\",%lld,%.*s]", r->url.n, r->url.p, r->etag.n, r->etag.p,
                            (long long)r->size, r->meta.p ? r->meta.n : 4, r->meta.p ? r->meta.p : "null");
            sqlite3_bind_text(st, 2, value, n, SQLITE_STATIC);
        } else {
            sqlite3_bind_text(st, 2, r->url.p, r->url.n, SQLITE_STATIC);
            sqlite3_bind_text(st, 3, r->etag.p, r->etag.n, SQLITE_STATIC);
            sqlite3_bind_int64(st, 4, r->size);
            bind_text(st, 5, r->meta);
            bind_text(st, 6, r->labels);
        }
        check(sqlite3_step(st), db, "insert");
        sqlite3_reset(st);
    }
    exec(db, "COMMIT");
    cpu = now(CLOCK_PROCESS_CPUTIME_ID) - cpu;
    wall = now(CLOCK_MONOTONIC) - wall;
    sqlite3_finalize(st);
    sqlite3_close(db);
    printf("%zu %.6f %.6f\n", lines, cpu, wall);
    free(value);
    free(rows);
    free(text);
    free(schema);
    return 0;
}
