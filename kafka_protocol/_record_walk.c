/*
 * kafka_protocol._record_walk: one pass over the records section of a RecordBatch v2
 * (decompressed), checking its structure the way Kafka's DefaultRecord.readFrom and
 * DefaultRecordBatch's iterator do, and returning what the broker's LogValidator needs.
 *
 * Why C (CPython API, C99, no other dependency): the walk runs for every batch produced,
 * fetched by a follower and recovered from a segment tail, so it must cost about a memory
 * pass.  A Python loop per record costs ~1 us a record; numba (used only by spark_source)
 * would need a JIT warm-up at every broker start and LLVM in the broker image.  Built by
 * setuptools (setup.py), typed by _record_walk.pyi.
 *
 * Record layout (kafka_protocol/record_batch.py draws the batch around it):
 *
 *     length varint | attributes int8 | timestamp_delta varlong | offset_delta varint |
 *     key_length varint | key | value_length varint | value |
 *     header_count varint | (header_key_length varint, key, header_value_length varint, value)*
 *
 * varint: zigzag int32 in at most 5 bytes; varlong: zigzag int64 in at most 10 (an encoding
 * longer, or whose last byte carries bits beyond the type, is refused, as Kafka's ByteUtils
 * does).  Lengths -1 mean null (keys, values, header values); other negative lengths are
 * refused, as is a null header key.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { OK = 0, CUT_SHORT = 1, TOO_LONG = 2 };

static int
read_varint(const uint8_t **pos, const uint8_t *end, int32_t *out)
{
    const uint8_t *p = *pos;
    uint32_t raw = 0;
    for (int shift = 0; shift <= 28; shift += 7) {
        if (p >= end)
            return CUT_SHORT;
        uint8_t b = *p++;
        if (shift == 28 && (b & 0xF0))  /* 4 bits left, and no continuation */
            return TOO_LONG;
        raw |= (uint32_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *pos = p;
            *out = (int32_t)((raw >> 1) ^ (0u - (raw & 1u)));
            return OK;
        }
    }
    return TOO_LONG; /* not reached */
}

static int
read_varlong(const uint8_t **pos, const uint8_t *end, int64_t *out)
{
    const uint8_t *p = *pos;
    uint64_t raw = 0;
    for (int shift = 0; shift <= 63; shift += 7) {
        if (p >= end)
            return CUT_SHORT;
        uint8_t b = *p++;
        if (shift == 63 && (b & 0xFE))  /* 1 bit left, and no continuation */
            return TOO_LONG;
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *pos = p;
            *out = (int64_t)((raw >> 1) ^ (0u - (raw & 1u)));
            return OK;
        }
    }
    return TOO_LONG; /* not reached */
}

/* What went wrong, formatted only on failure. */
typedef struct {
    Py_ssize_t index;      /* the record, or -1 */
    const char *field;     /* what was being read */
    int kind;              /* CUT_SHORT, TOO_LONG, or one of the codes below */
    int64_t value;         /* the offending number */
    int64_t extra;         /* a second number (bytes left, highest expected value) */
    int64_t low;           /* lowest expected value */
} problem_t;

enum {
    NEGATIVE = 3,        /* a length below -1 (or below 0 where null is not allowed) */
    OVERRUNS = 4,        /* a length past the end of its record (or of the batch) */
    WRONG_DELTA = 5,     /* offset delta is not the record's index */
    LEFT_OVER = 6,       /* bytes left in a record after its last field */
    MISSING = 7,         /* fewer records than the header claims */
    TRAILING = 8,        /* bytes after the last record */
    TOO_MANY_HEADERS = 9 /* a header count larger than the bytes could hold */
};

typedef struct {
    int64_t min_delta, max_delta, last_delta;
    Py_ssize_t min_index, max_index, first_null_key;
} summary_t;

#define FAIL(k, f, v, x) \
    do { pr->kind = (k); pr->field = (f); pr->value = (v); pr->extra = (x); return -1; } while (0)

/* A length-prefixed blob inside [*pos, end): a null (-1) is allowed when nullable. */
static int
skip_blob(const uint8_t **pos, const uint8_t *end, int nullable, const char *field,
          int32_t *length, problem_t *pr)
{
    int rc = read_varint(pos, end, length);
    if (rc != OK)
        FAIL(rc, field, 0, 0);
    if (*length < 0) {
        if (*length == -1 && nullable)
            return 0;
        FAIL(NEGATIVE, field, *length, 0);
    }
    if (*length > end - *pos)
        FAIL(OVERRUNS, field, *length, end - *pos);
    *pos += *length;
    return 0;
}

/* Offset deltas must rise strictly and leave room for the records after this one below
 * last_offset_delta: 0..n-1 exactly when count = last_offset_delta + 1 (a producer's batch),
 * with gaps in a batch the log cleaner compacted. */
static int
walk_one(const uint8_t **pos, const uint8_t *end, Py_ssize_t i, int64_t low, int64_t high,
         summary_t *s, problem_t *pr)
{
    int32_t n;
    int64_t ts_delta;
    int rc = read_varint(pos, end, &n);
    if (rc != OK)
        FAIL(rc, "length", 0, 0);
    if (n < 0)
        FAIL(NEGATIVE, "length", n, 0);
    if (n > end - *pos)
        FAIL(OVERRUNS, "length", n, end - *pos);
    const uint8_t *p = *pos, *rend = *pos + n;
    if (p >= rend)
        FAIL(CUT_SHORT, "attributes", 0, 0);
    p++;
    if ((rc = read_varlong(&p, rend, &ts_delta)) != OK)
        FAIL(rc, "timestamp delta", 0, 0);
    if ((rc = read_varint(&p, rend, &n)) != OK)
        FAIL(rc, "offset delta", 0, 0);
    if (n < low || n > high) {
        pr->low = low;
        FAIL(WRONG_DELTA, "offset delta", n, high);
    }
    s->last_delta = n;
    if (skip_blob(&p, rend, 1, "key", &n, pr) < 0)
        return -1;
    if (n == -1 && s->first_null_key < 0)
        s->first_null_key = i;
    if (skip_blob(&p, rend, 1, "value", &n, pr) < 0)
        return -1;
    int32_t headers;
    if ((rc = read_varint(&p, rend, &headers)) != OK)
        FAIL(rc, "header count", 0, 0);
    if (headers < 0)
        FAIL(NEGATIVE, "header count", headers, 0);
    if (headers > (rend - p) / 2)  /* each header takes at least two bytes */
        FAIL(TOO_MANY_HEADERS, "header count", headers, rend - p);
    for (int32_t h = 0; h < headers; h++) {
        if (skip_blob(&p, rend, 0, "header key", &n, pr) < 0)
            return -1;
        if (skip_blob(&p, rend, 1, "header value", &n, pr) < 0)
            return -1;
    }
    if (p != rend)
        FAIL(LEFT_OVER, "fields", rend - p, 0);
    if (i == 0 || ts_delta < s->min_delta) {
        s->min_delta = ts_delta;
        s->min_index = i;
    }
    if (i == 0 || ts_delta > s->max_delta) {
        s->max_delta = ts_delta;
        s->max_index = i;
    }
    *pos = rend;
    return 0;
}

static PyObject *
describe(const problem_t *pr, Py_ssize_t count)
{
    const char *f = pr->field;
    long long v = (long long)pr->value, x = (long long)pr->extra;
    Py_ssize_t i = pr->index;
    switch (pr->kind) {
    case CUT_SHORT:
        return PyUnicode_FromFormat("record %zd: %s is cut short", i, f);
    case TOO_LONG:
        return PyUnicode_FromFormat("record %zd: %s varint is too long", i, f);
    case NEGATIVE:
        return PyUnicode_FromFormat("record %zd: %s of %lld", i, f, v);
    case OVERRUNS:
        if (strcmp(f, "length") == 0)
            return PyUnicode_FromFormat(
                "record %zd: length %lld overruns the batch (%lld bytes left)", i, v, x);
        return PyUnicode_FromFormat(
            "record %zd: %s of %lld bytes overruns its record (%lld bytes left)", i, f, v, x);
    case WRONG_DELTA:
        if (pr->low == pr->extra)
            return PyUnicode_FromFormat("record %zd: offset delta %lld, expected %lld", i, v, x);
        return PyUnicode_FromFormat("record %zd: offset delta %lld is outside [%lld, %lld]", i,
                                    v, (long long)pr->low, x);
    case LEFT_OVER:
        return PyUnicode_FromFormat("record %zd: %lld bytes after its last field", i, v);
    case MISSING:
        return PyUnicode_FromFormat(
            "the batch claims %zd records but holds %lld", count, v);
    case TRAILING:
        return PyUnicode_FromFormat("%lld bytes after the last record", v);
    case TOO_MANY_HEADERS:
        return PyUnicode_FromFormat(
            "record %zd: %lld headers cannot fit in its last %lld bytes", i, v, x);
    }
    return PyUnicode_FromString("invalid record");
}

static PyTypeObject RecordWalkType;

static PyStructSequence_Field walk_fields[] = {
    {"bad_index", "index of the first bad record; -1 if none (or the batch as a whole)"},
    {"problem", "what is wrong, or None"},
    {"min_timestamp_delta", "smallest timestamp delta (0 for no records)"},
    {"max_timestamp_delta", "largest timestamp delta (0 for no records)"},
    {"min_timestamp_index", "index of a record with the smallest delta (-1 for none)"},
    {"max_timestamp_index", "index of a record with the largest delta (-1 for none)"},
    {"first_null_key", "index of the first record without a key, or -1"},
    {NULL, NULL},
};

static PyStructSequence_Desc walk_desc = {
    "kafka_protocol._record_walk.RecordWalk",
    "The outcome of walk_records: a problem, or what the validator checks next.",
    walk_fields,
    7,
};

static PyObject *
walk_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError,
                        "walk_records(records, count, last_offset_delta) takes 3 arguments");
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    long long last_offset_delta = PyLong_AsLongLong(args[2]);
    if (last_offset_delta == -1 && PyErr_Occurred())
        return NULL;
    if (count < 0) {
        PyErr_SetString(PyExc_ValueError, "count must not be negative");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *pos = (const uint8_t *)view.buf, *end = pos + view.len;
    summary_t s = {0, 0, -1, -1, -1, -1};
    problem_t pr = {-1, "", OK, 0, 0, 0};
    Py_ssize_t i;
    for (i = 0; i < count; i++) {
        if (pos == end) {
            pr.kind = MISSING;
            pr.value = i;
            break;
        }
        int64_t high = (int64_t)last_offset_delta - (int64_t)(count - 1 - i);
        if (walk_one(&pos, end, i, s.last_delta + 1, high, &s, &pr) < 0)
            break;
    }
    if (pr.kind == OK && pos != end) {
        pr.kind = TRAILING;
        pr.value = end - pos;
    }
    PyBuffer_Release(&view);
    if (pr.kind != OK)
        pr.index = i < count ? i : count - 1;
    PyObject *result = PyStructSequence_New(&RecordWalkType);
    if (result == NULL)
        return NULL;
    PyObject *problem = Py_None;
    if (pr.kind != OK) {
        problem = describe(&pr, count);
        if (problem == NULL) {
            Py_DECREF(result);
            return NULL;
        }
    } else {
        Py_INCREF(problem);
    }
    PyObject *items[7] = {
        PyLong_FromSsize_t(pr.index), problem, PyLong_FromLongLong(s.min_delta),
        PyLong_FromLongLong(s.max_delta), PyLong_FromSsize_t(s.min_index),
        PyLong_FromSsize_t(s.max_index), PyLong_FromSsize_t(s.first_null_key),
    };
    int failed = 0;
    for (int k = 0; k < 7; k++) {
        if (items[k] == NULL)
            failed = 1;
        PyStructSequence_SetItem(result, k, items[k]);  /* steals; NULL is allowed here */
    }
    if (failed) {
        Py_DECREF(result);
        return NULL;
    }
    return result;
}

static PyMethodDef methods[] = {
    {"walk_records", (PyCFunction)(void (*)(void))walk_records, METH_FASTCALL,
     "walk_records(records, count, last_offset_delta) -> RecordWalk\n\n"
     "Walk the decompressed records section of a RecordBatch v2 holding `count` records."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_record_walk",
    "One compiled pass over a RecordBatch v2's records (see _record_walk.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__record_walk(void)
{
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    if (RecordWalkType.tp_name == NULL && PyStructSequence_InitType2(&RecordWalkType, &walk_desc) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&RecordWalkType);
    if (PyModule_AddObject(m, "RecordWalk", (PyObject *)&RecordWalkType) < 0) {
        Py_DECREF(&RecordWalkType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
