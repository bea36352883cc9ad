/* datahub.catalog._put_rows: a chunk of checked put lines inserted into `records` by C, through
 * the commit's own Python sqlite3 connection, inside its transaction (issue 38 item 3).
 *
 * Why: SQLite inserts the catalog's 10-column row at ~450,000-540,000 per CPU-second when C
 * binds it (bench/scale/c_ceiling.py), but at ~100,000-240,000 when the row comes through
 * Python's executemany or through `INSERT ... SELECT json_extract(...) FROM json_each(?)`,
 * which parses every line's JSON several times. The commit's writer thread was the bound.
 *
 * What it trusts: the text is a `PutLines.text` (datahub/catalog/put_lines.py), whose every line
 * the put_lines regex has checked; this parser only cuts those lines into fields, and refuses
 * (returns None, nothing inserted) any text that is not exactly of that shape, so the caller
 * falls back to the json_each statement. Each row is the one the json_each statement writes,
 * type for type (tests/catalog/test_put_rows.py).
 *
 * The sqlite3 handle: CPython does not export the `sqlite3 *` of a `sqlite3.Connection`. In
 * CPython 3.11 (Modules/_sqlite/connection.h) it is the first field after the object header;
 * this module is built for 3.11 only, and `verify` checks the handle it finds against what
 * Python and SQLite know of the connection (its file name, its transaction state, the library
 * version) before the caller uses `insert` (datahub/catalog/put_rows.py refuses otherwise).
 * Both use the one libsqlite3.so.0 of the process (Python's _sqlite3 links the same soname).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sqlite3.h>
#include <stdint.h>
#include <string.h>

#include "_put_rows_lines.h" /* the parser: span, put_row, line() */

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030C0000
#error "the sqlite3.Connection layout used here is CPython 3.11's"
#endif

typedef struct {
    PyObject_HEAD sqlite3 *db; /* CPython 3.11: pysqlite_Connection's first field */
} connection_head;

static PyObject *connection_type; /* sqlite3.Connection */
static PyObject *py_sqlite3;

static sqlite3 *handle_of(PyObject *conn) {
    if (!PyObject_TypeCheck(conn, (PyTypeObject *)connection_type)) {
        PyErr_SetString(PyExc_TypeError, "expected a sqlite3.Connection");
        return NULL;
    }
    sqlite3 *db = ((connection_head *)conn)->db;
    if (db == NULL)
        PyErr_SetString(PyExc_ValueError, "the sqlite3.Connection is closed");
    return db;
}

/* --- the lines (each one cut by _put_rows_lines.h) ------------------------------------------- */

/* The chunk `[line,line,…]`: its rows, or -1 when it is not exactly that shape. */
static Py_ssize_t parse(const char *text, Py_ssize_t len, put_row *rows, Py_ssize_t cap) {
    const char *at = text, *end = text + len;
    Py_ssize_t n = 0;
    if (!LITERAL(&at, end, "["))
        return -1;
    for (;;) {
        if (n == cap || !line(&at, end, &rows[n]))
            return -1;
        n++;
        if (LITERAL(&at, end, "]"))
            return at == end ? n : -1;
        if (!LITERAL(&at, end, ","))
            return -1;
    }
}

/* --- errors, as Python's sqlite3 raises them ------------------------------------------------- */

static void raise_sqlite(int code, const char *message) {
    const char *name;
    switch (code & 0xFF) {
    case SQLITE_NOMEM:
        PyErr_NoMemory();
        return;
    case SQLITE_INTERNAL:
    case SQLITE_NOTFOUND:
        name = "InternalError";
        break;
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
        name = "IntegrityError";
        break;
    case SQLITE_TOOBIG:
        name = "DataError";
        break;
    case SQLITE_MISUSE:
    case SQLITE_RANGE:
        name = "InterfaceError";
        break;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        name = "DatabaseError";
        break;
    default:
        name = "OperationalError";
    }
    PyObject *kind = PyObject_GetAttrString(py_sqlite3, name);
    if (kind == NULL)
        return;
    PyObject *exc = PyObject_CallFunction(kind, "s", message);
    Py_DECREF(kind);
    if (exc == NULL)
        return;
    PyObject *number = PyLong_FromLong(code);
    if (number == NULL || PyObject_SetAttrString(exc, "sqlite_errorcode", number) < 0) {
        Py_XDECREF(number);
        Py_DECREF(exc);
        return;
    }
    Py_DECREF(number);
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
}

/* --- the module's functions ------------------------------------------------------------------ */

static const char INSERT_SQL[] = "INSERT OR REPLACE INTO records"
                                 " (dataset_id, from_seq, to_seq, key, url, etag, size, checksum, meta, labels)"
                                 " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, ?8, ?9)";

static void bind_span(sqlite3_stmt *st, int i, span s) {
    if (s.p != NULL)
        sqlite3_bind_text(st, i, s.p, s.n, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, i);
}

PyDoc_STRVAR(insert_doc, "insert(conn, dataset_id, from_seq, to_seq, text) -> int | None\n\n"
                         "Insert the put lines of a PutLines text as revisions [from_seq, to_seq) of the dataset,\n"
                         "inside conn's open transaction, with the GIL released. Returns the rows inserted, or\n"
                         "None (nothing inserted) when the text is not exactly checked put lines.");

static PyObject *insert(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *conn, *text_obj;
    long long dataset_id, from_seq, to_seq;
    if (!PyArg_ParseTuple(args, "OLLLU", &conn, &dataset_id, &from_seq, &to_seq, &text_obj))
        return NULL;
    sqlite3 *db = handle_of(conn);
    if (db == NULL)
        return NULL;
    if (sqlite3_get_autocommit(db)) {
        PyErr_SetString(PyExc_ValueError, "insert runs inside the commit's transaction, and none is open");
        return NULL;
    }
    if (!PyUnicode_IS_ASCII(text_obj))
        Py_RETURN_NONE; /* checked lines are ASCII */
    Py_ssize_t len;
    const char *text = PyUnicode_AsUTF8AndSize(text_obj, &len);
    if (text == NULL)
        return NULL;
    Py_ssize_t cap = 1; /* at most one row per line: lines are separated by "},{" */
    for (const char *p = text; (p = strstr(p, "}},{")) != NULL; p += 4)
        cap++;
    put_row *rows = PyMem_RawMalloc((size_t)cap * sizeof(put_row));
    if (rows == NULL)
        return PyErr_NoMemory();
    Py_ssize_t n, done = 0;
    int rc = SQLITE_OK;
    char *message = NULL;
    Py_BEGIN_ALLOW_THREADS;
    n = parse(text, len, rows, cap);
    if (n > 0) {
        sqlite3_stmt *st = NULL;
        rc = sqlite3_prepare_v2(db, INSERT_SQL, (int)sizeof INSERT_SQL - 1, &st, NULL);
        if (rc == SQLITE_OK) {
            sqlite3_bind_int64(st, 1, dataset_id);
            sqlite3_bind_int64(st, 2, from_seq);
            sqlite3_bind_int64(st, 3, to_seq);
            for (; done < n; done++) {
                put_row *r = &rows[done];
                bind_span(st, 4, r->key);
                bind_span(st, 5, r->url);
                bind_span(st, 6, r->etag);
                sqlite3_bind_int64(st, 7, r->size);
                bind_span(st, 8, r->meta);
                bind_span(st, 9, r->labels);
                rc = sqlite3_step(st);
                if (rc != SQLITE_DONE)
                    break;
                rc = sqlite3_reset(st);
                if (rc != SQLITE_OK)
                    break;
            }
            if (rc == SQLITE_DONE)
                rc = SQLITE_OK;
        }
        if (rc != SQLITE_OK) { /* the extended code where the connection has one (a misuse may not) */
            int extended = sqlite3_extended_errcode(db);
            if ((extended & 0xFF) == (rc & 0xFF))
                rc = extended;
            message = sqlite3_mprintf("%s", sqlite3_errmsg(db));
        }
        sqlite3_finalize(st);
    }
    Py_END_ALLOW_THREADS;
    PyMem_RawFree(rows);
    if (n < 0)
        Py_RETURN_NONE;
    if (rc != SQLITE_OK) {
        raise_sqlite(rc, message ? message : "out of memory");
        sqlite3_free(message);
        return NULL;
    }
    return PyLong_FromSsize_t(done);
}

PyDoc_STRVAR(verify_doc, "verify(conn, filename) -> bool\n\n"
                         "Whether the sqlite3 handle found in conn is conn's: SQLite's file name for its main\n"
                         "database is filename (PRAGMA database_list's), its transaction state is\n"
                         "conn.in_transaction, and this module runs the library version Python's sqlite3 reports.");

static PyObject *verify(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *conn;
    const char *filename;
    if (!PyArg_ParseTuple(args, "Os", &conn, &filename))
        return NULL;
    sqlite3 *db = handle_of(conn);
    if (db == NULL)
        return NULL;
    PyObject *version = PyObject_GetAttrString(py_sqlite3, "sqlite_version");
    if (version == NULL)
        return NULL;
    const char *python_version = PyUnicode_AsUTF8(version);
    int same_library = python_version != NULL && strcmp(python_version, sqlite3_libversion()) == 0;
    Py_DECREF(version);
    if (python_version == NULL)
        return NULL;
    PyObject *in_transaction = PyObject_GetAttrString(conn, "in_transaction");
    if (in_transaction == NULL)
        return NULL;
    int open = PyObject_IsTrue(in_transaction);
    Py_DECREF(in_transaction);
    if (open < 0)
        return NULL;
    const char *name = sqlite3_db_filename(db, "main");
    int ok = same_library && name != NULL && strcmp(name, filename) == 0 && sqlite3_get_autocommit(db) == !open;
    return PyBool_FromLong(ok);
}

static PyMethodDef methods[] = {
    {"insert", insert, METH_VARARGS, insert_doc},
    {"verify", verify, METH_VARARGS, verify_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_put_rows", "Checked put lines inserted by C (datahub/catalog/put_rows.py).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__put_rows(void) {
    py_sqlite3 = PyImport_ImportModule("sqlite3");
    if (py_sqlite3 == NULL)
        return NULL;
    connection_type = PyObject_GetAttrString(py_sqlite3, "Connection");
    if (connection_type == NULL || !PyType_Check(connection_type)) {
        Py_XDECREF(connection_type);
        PyErr_SetString(PyExc_ImportError, "sqlite3.Connection is not a type");
        return NULL;
    }
    return PyModule_Create(&module);
}
