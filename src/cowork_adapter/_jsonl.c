/* _jsonl: validate blocks of JSON Lines and read top-level fields, in one pass in C.
 *
 * The offline audit reads gigabytes of agent logs and must keep up with reading them
 * (benchmarks/bench_audit.py); Python's decoders cost several times more per byte. This module
 * does the per-byte work; audit_lines.py holds the Python side and the fallbacks.
 *
 * A block is whole lines joined by '\n' (no final newline). Each non-empty line (a line that is
 * exactly "\r" counts as empty) must be one JSON object, optionally padded with spaces, tabs or
 * carriage returns. For such a line, the raw value of a top-level key is the exact bytes of its
 * value (the last one when a key repeats, as json.loads keeps), or "null" when absent.
 *
 *   rows(block, keys, select, probes) -> (line_count, [(line_index, raw_1, ..., raw_k), ...])
 *       One tuple of raw values (bytes) per line. With a non-empty `select`, only lines whose
 *       keys[0] raw value contains one of the `select` strings or a backslash (an escape could
 *       spell one) give a row. With non-empty `probes`, the last raw value is None unless it
 *       contains one of the probes (the audit's argument sieve).
 *   tally(block, keys, probes) -> (line_count, {joined: count}, [(line_index, offset, joined, raw_last)])
 *       Counts lines by the raw values of keys[:-1], joined by '\n' (a raw value never holds a
 *       newline). The list holds the lines whose last raw value contains a probe, with the byte
 *       offset where the line starts.
 *   usage(block, keys, select, name_cap) -> (line_count, sums, names, rows)
 *       For events.jsonl; keys are type, then the fields of audit_scan.UsageRow in order. Of the
 *       lines `select` keeps (as in rows), regular llm_usage records (see add_regular) are summed:
 *       sums = (records, token_bearing, prompt, completion, cached, estimated, cost). names holds
 *       (line_index, field, raw) for the first sighting of each distinct model (0), provider (1)
 *       and response_provider (2) among them, at most name_cap per field. rows holds the other
 *       kept lines as rows() gives them, for TaskScan.add_usage to judge record by record.
 *
 * Each returns None instead when it is not sure: some non-empty line is not an object under this
 * strict grammar, or a top-level key holds an escape. The grammar is a subset of what json.loads
 * accepts (RFC 8259 with strict UTF-8; no NaN/Infinity, no byte-order mark, nesting at most
 * MAX_DEPTH, numbers of at most MAX_NUMBER characters), so a line accepted here is one json.loads accepts, with the same values. On None the
 * caller takes the block line by line with json.loads as the arbiter.
 * tests/unit/test_audit_lines.py holds the two to the same answers.
 */

/* Vector code: the parser skips string bytes with SSE2 (every x86-64); the block UTF-8 check
 * (AVX2, else SSSE3, else portable) and the probe sieve (AVX2, else portable) are chosen at import
 * by what the CPU has (PyInit__jsonl). Compiled with -DJSONL_NO_SIMD, only the portable code remains (what machines
 * without SSE2 run); tests/unit/test_audit_lines.py builds it that way and compares the two. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

#define MAX_DEPTH 200 /* far below json.loads' recursion limit, so nothing it refuses passes here */
#define MAX_NUMBER 512 /* characters: below int_max_str_digits' least setting (640), beyond which
                          json.loads refuses an integer */
#define MAX_KEYS 16
#define MAX_PROBES 32

static PyObject *null_bytes; /* the shared b"null" for absent keys */

/* ------------------------------------------------------------------ the grammar */

typedef struct {
    const unsigned char *p;
    const unsigned char *end;
} Cursor;

typedef struct {
    Py_ssize_t nkeys;
    const char *key[MAX_KEYS];
    Py_ssize_t key_len[MAX_KEYS];
    uint32_t by_first[256];               /* bit i set: keys[i] starts with this byte */
    uint32_t by_len[64];                  /* bit i set: keys[i] is this long (63: or longer) */
    const unsigned char *start[MAX_KEYS]; /* value spans on the current line, NULL if absent */
    const unsigned char *stop[MAX_KEYS];
    int escaped_key; /* a top-level key with a backslash: it might spell a wanted key */
} Fields;

/* The parser's functions take the position of what they read and the end of the block, and return
 * the position after it, or NULL when it is not valid there (positions stay in registers). */
typedef const unsigned char *Pos;

static Pos object(Pos p, Pos end, int depth, Fields *fields);
static Pos array(Pos p, Pos end, int depth);

/* JSON whitespace within one line: a newline ends the line instead. */
static inline Pos skip_ws(Pos p, Pos end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r')) p++;
    return p;
}

/* Skip ordinary string bytes, stopping at '"', '\\' or a control character (< 0x20). Non-ASCII
 * bytes are ordinary: the whole block's UTF-8 was checked before (utf8_valid). SSE2 (every
 * x86-64) looks at 16 bytes per step, elsewhere 8 bytes as an integer. */
#if defined(__SSE2__) && !defined(JSONL_NO_SIMD)
#include <emmintrin.h>
static inline Pos skip_plain(Pos p, Pos end) {
    const __m128i quote = _mm_set1_epi8('"'), slash = _mm_set1_epi8('\\'), below = _mm_set1_epi8(0x1F);
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i control = _mm_cmpeq_epi8(_mm_min_epu8(v, below), v); /* v <= 0x1F, unsigned */
        __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, slash)), control);
        int mask = _mm_movemask_epi8(stop);
        if (mask != 0) return p + __builtin_ctz(mask);
        p += 16;
    }
    while (p < end && *p >= 0x20 && *p != '"' && *p != '\\') p++;
    return p;
}
#else
static inline Pos skip_plain(Pos p, Pos end) {
    const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
    while (end - p >= 8) {
        uint64_t v, quote, slash, control;
        memcpy(&v, p, 8);
        quote = v ^ (ones * '"');
        slash = v ^ (ones * '\\');
        control = (v - ones * 0x20) & ~v; /* some byte < 0x20 (exact as a yes/no answer) */
        if (((control | ((quote - ones) & ~quote) | ((slash - ones) & ~slash)) & high) != 0) break;
        p += 8;
    }
    while (p < end && *p >= 0x20 && *p != '"' && *p != '\\') p++;
    return p;
}
#endif

/* One UTF-8 sequence starting at a byte >= 0x80, strictly (no overlongs, no surrogates). */
static int utf8_sequence(Cursor *c) {
    const unsigned char *p = c->p;
    unsigned char b0 = p[0], lo = 0x80, hi = 0xBF; /* the range allowed for the second byte */
    int n;
    if (b0 >= 0xC2 && b0 <= 0xDF) n = 2;
    else if (b0 >= 0xE0 && b0 <= 0xEF) {
        n = 3;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        n = 4;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else return 0;
    if (c->end - p < n || p[1] < lo || p[1] > hi) return 0;
    for (int i = 2; i < n; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    c->p += n;
    return 1;
}

/* Is [p, end) strict UTF-8, as Python's strict decoder reads it? One byte at a time, skipping
 * ASCII eight bytes at once. */
static int utf8_valid_scalar(const unsigned char *p, const unsigned char *end) {
    Cursor c = {p, end};
    while (c.p < c.end) {
        uint64_t v;
        if (c.end - c.p >= 8 && (memcpy(&v, c.p, 8), (v & 0x8080808080808080ULL) == 0)) {
            c.p += 8;
        } else if (*c.p < 0x80) {
            c.p++;
        } else if (!utf8_sequence(&c)) {
            return 0;
        }
    }
    return 1;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(JSONL_NO_SIMD)
#include <tmmintrin.h>
#define HAVE_X86_CHECKS 1
/* The same question 16 bytes at a time with SSSE3 table lookups, after Keiser and Lemire,
 * "Validating UTF-8 in less than one instruction per byte" (2021). Each byte is judged with the
 * byte before it: three 16-entry tables, indexed by the previous byte's high and low nibble and
 * this byte's high nibble, give the error classes that pair could be in; their AND is nonzero
 * exactly when the pair is an error, except the one case a pair cannot tell (a continuation
 * expected as the third or fourth byte of a sequence), which is checked from the bytes two and
 * three back. */
enum {
    TOO_SHORT = 1 << 0,  /* a lead byte followed by ASCII or another lead */
    TOO_LONG = 1 << 1,   /* ASCII followed by a continuation */
    OVERLONG_3 = 1 << 2, /* E0 followed by 80..9F */
    TOO_LARGE = 1 << 3,  /* F4 followed by 90..BF, or F5..FF followed by 90..BF */
    SURROGATE = 1 << 4,  /* ED followed by A0..BF */
    OVERLONG_2 = 1 << 5, /* C0 or C1 as a lead */
    TOO_LARGE_1000 = 1 << 6, /* F5..FF followed by 80..8F; shares its bit with: */
    OVERLONG_4 = 1 << 6,     /* F0 followed by 80..8F */
    TWO_CONTS = 1 << 7,      /* a continuation followed by a continuation (legal only when the
                                lead two or three bytes back asks for it: see must23) */
    CARRY = TOO_SHORT | TOO_LONG | TWO_CONTS, /* classes that do not depend on the low nibble */
};

/* The three tables, as 16 byte values; the AVX2 check repeats them in both 128-bit lanes. */
#define PREV_HIGH                                                                                  \
    TOO_LONG, TOO_LONG, TOO_LONG, TOO_LONG, TOO_LONG, TOO_LONG, TOO_LONG, TOO_LONG, /* 0..7: ASCII */ \
        TWO_CONTS, TWO_CONTS, TWO_CONTS, TWO_CONTS,             /* 8..B: continuation */           \
        TOO_SHORT | OVERLONG_2,                                 /* C: 2-byte lead */               \
        TOO_SHORT,                                              /* D: 2-byte lead */               \
        TOO_SHORT | OVERLONG_3 | SURROGATE,                     /* E: 3-byte lead */               \
        TOO_SHORT | TOO_LARGE | TOO_LARGE_1000 | OVERLONG_4     /* F: 4-byte lead */
#define PREV_LOW                                                                                   \
    CARRY | OVERLONG_3 | OVERLONG_2 | OVERLONG_4,               /* x0: C0, E0, F0 */               \
        CARRY | OVERLONG_2,                                     /* x1: C1 */                       \
        CARRY, CARRY,                                           /* x2, x3 */                       \
        CARRY | TOO_LARGE,                                      /* x4: F4 */                       \
        CARRY | TOO_LARGE | TOO_LARGE_1000,                     /* x5..xC: F5..FC */               \
        CARRY | TOO_LARGE | TOO_LARGE_1000, CARRY | TOO_LARGE | TOO_LARGE_1000,                    \
        CARRY | TOO_LARGE | TOO_LARGE_1000, CARRY | TOO_LARGE | TOO_LARGE_1000,                    \
        CARRY | TOO_LARGE | TOO_LARGE_1000, CARRY | TOO_LARGE | TOO_LARGE_1000,                    \
        CARRY | TOO_LARGE | TOO_LARGE_1000,                                                        \
        CARRY | TOO_LARGE | TOO_LARGE_1000 | SURROGATE,         /* xD: ED */                       \
        CARRY | TOO_LARGE | TOO_LARGE_1000, CARRY | TOO_LARGE | TOO_LARGE_1000 /* xE, xF */
#define THIS_HIGH                                                                                  \
    TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT, /* ASCII */ \
        TOO_LONG | OVERLONG_2 | TWO_CONTS | OVERLONG_3 | TOO_LARGE_1000 | OVERLONG_4, /* 80..8F */ \
        TOO_LONG | OVERLONG_2 | TWO_CONTS | OVERLONG_3 | TOO_LARGE,   /* 90..9F */                 \
        TOO_LONG | OVERLONG_2 | TWO_CONTS | SURROGATE | TOO_LARGE,    /* A0..AF */                 \
        TOO_LONG | OVERLONG_2 | TWO_CONTS | SURROGATE | TOO_LARGE,    /* B0..BF */                 \
        TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT                    /* leads */
/* A block may not end inside a sequence: its last three bytes may not lead one that long. */
#define LAST_LEAD_MAX                                                                         \
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, (char)(0xF0 - 1), (char)(0xE0 - 1), \
        (char)(0xC0 - 1)

__attribute__((target("ssse3"))) static int utf8_valid_ssse3(const unsigned char *p, const unsigned char *end) {
    const __m128i prev_high = _mm_setr_epi8(PREV_HIGH), prev_low = _mm_setr_epi8(PREV_LOW),
                  this_high = _mm_setr_epi8(THIS_HIGH);
    const __m128i nibble = _mm_set1_epi8(0x0F), high_bit = _mm_set1_epi8((char)0x80);
    const __m128i last_lead_max = _mm_setr_epi8(LAST_LEAD_MAX);
    __m128i prev = _mm_setzero_si128(), error = _mm_setzero_si128(), incomplete = _mm_setzero_si128();
    int last = 0;
    while (!last) {
        __m128i in;
        if (end - p >= 16) {
            in = _mm_loadu_si128((const __m128i *)p);
            p += 16;
        } else { /* the tail, padded with zeros (ASCII); a block of zeros when nothing is left */
            unsigned char tail[16] = {0};
            memcpy(tail, p, end - p);
            in = _mm_loadu_si128((const __m128i *)tail);
            last = 1;
        }
        if (_mm_movemask_epi8(in) == 0) { /* all ASCII: only a sequence cut before it is wrong */
            error = _mm_or_si128(error, incomplete);
            incomplete = _mm_setzero_si128();
        } else {
            __m128i prev1 = _mm_alignr_epi8(in, prev, 15); /* each byte's predecessor */
            __m128i classes = _mm_and_si128(
                _mm_and_si128(_mm_shuffle_epi8(prev_high, _mm_and_si128(_mm_srli_epi16(prev1, 4), nibble)),
                              _mm_shuffle_epi8(prev_low, _mm_and_si128(prev1, nibble))),
                _mm_shuffle_epi8(this_high, _mm_and_si128(_mm_srli_epi16(in, 4), nibble)));
            /* Bytes that must be continuations because a 3- or 4-byte lead is 2 or 3 back. */
            __m128i third = _mm_subs_epu8(_mm_alignr_epi8(in, prev, 14), _mm_set1_epi8((char)(0xE0 - 0x80)));
            __m128i fourth = _mm_subs_epu8(_mm_alignr_epi8(in, prev, 13), _mm_set1_epi8((char)(0xF0 - 0x80)));
            __m128i must23 = _mm_and_si128(_mm_or_si128(third, fourth), high_bit);
            error = _mm_or_si128(error, _mm_xor_si128(must23, classes));
            incomplete = _mm_subs_epu8(in, last_lead_max);
        }
        prev = in;
    }
    return _mm_movemask_epi8(_mm_cmpeq_epi8(error, _mm_setzero_si128())) == 0xFFFF;
}

#include <immintrin.h>
/* The same check 32 bytes per vector and 64 per step (ASCII runs cost one test per 64 bytes).
 * AVX2 shuffles and byte shifts work within each 128-bit lane, so the tables repeat in both
 * lanes and a byte's predecessors come from the previous vector joined lane-wise (`lanes`). */
typedef struct {
    __m256i prev, error, incomplete;
} Utf8State;

__attribute__((target("avx2"))) static inline void utf8_step_avx2(Utf8State *st, __m256i in) {
    const __m256i prev_high = _mm256_setr_epi8(PREV_HIGH, PREV_HIGH), prev_low = _mm256_setr_epi8(PREV_LOW, PREV_LOW),
                  this_high = _mm256_setr_epi8(THIS_HIGH, THIS_HIGH);
    const __m256i nibble = _mm256_set1_epi8(0x0F), high_bit = _mm256_set1_epi8((char)0x80);
    /* Only the vector's last three bytes can start a sequence cut by the end: the low lane's are
     * compared with 0xFF, which no byte exceeds. */
    const __m256i last_lead_max = _mm256_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                                   LAST_LEAD_MAX);
    __m256i lanes = _mm256_permute2x128_si256(st->prev, in, 0x21); /* prev's high lane, in's low lane */
    __m256i prev1 = _mm256_alignr_epi8(in, lanes, 15);
    __m256i classes = _mm256_and_si256(
        _mm256_and_si256(_mm256_shuffle_epi8(prev_high, _mm256_and_si256(_mm256_srli_epi16(prev1, 4), nibble)),
                         _mm256_shuffle_epi8(prev_low, _mm256_and_si256(prev1, nibble))),
        _mm256_shuffle_epi8(this_high, _mm256_and_si256(_mm256_srli_epi16(in, 4), nibble)));
    __m256i third = _mm256_subs_epu8(_mm256_alignr_epi8(in, lanes, 14), _mm256_set1_epi8((char)(0xE0 - 0x80)));
    __m256i fourth = _mm256_subs_epu8(_mm256_alignr_epi8(in, lanes, 13), _mm256_set1_epi8((char)(0xF0 - 0x80)));
    __m256i must23 = _mm256_and_si256(_mm256_or_si256(third, fourth), high_bit);
    st->error = _mm256_or_si256(st->error, _mm256_xor_si256(must23, classes));
    st->incomplete = _mm256_subs_epu8(in, last_lead_max);
    st->prev = in;
}

__attribute__((target("avx2"))) static int utf8_valid_avx2(const unsigned char *p, const unsigned char *end) {
    Utf8State st = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    int last = 0;
    while (!last) {
        __m256i in0, in1;
        if (end - p >= 64) {
            in0 = _mm256_loadu_si256((const __m256i *)p);
            in1 = _mm256_loadu_si256((const __m256i *)(p + 32));
            p += 64;
        } else { /* the tail, padded with zeros (ASCII); a step of zeros when nothing is left */
            unsigned char tail[64] = {0};
            memcpy(tail, p, end - p);
            in0 = _mm256_loadu_si256((const __m256i *)tail);
            in1 = _mm256_loadu_si256((const __m256i *)(tail + 32));
            last = 1;
        }
        if (_mm256_movemask_epi8(_mm256_or_si256(in0, in1)) == 0) { /* all ASCII */
            st.error = _mm256_or_si256(st.error, st.incomplete);
            st.incomplete = _mm256_setzero_si256();
            st.prev = in1;
        } else {
            utf8_step_avx2(&st, in0);
            utf8_step_avx2(&st, in1);
        }
    }
    return _mm256_testz_si256(st.error, st.error);
}
#endif
static int (*utf8_valid)(const unsigned char *, const unsigned char *) = utf8_valid_scalar;

/* The checks this CPU can run, by name (is_utf8 runs any of them; utf8_valid is the fastest). */
typedef struct {
    const char *name;
    int (*check)(const unsigned char *, const unsigned char *);
} Utf8Check;
static Utf8Check utf8_checks[3] = {{"scalar", utf8_valid_scalar}};
static int utf8_check_count = 1;

static inline int is_hex(unsigned char ch) {
    return (ch >= '0' && ch <= '9') || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f');
}

/* A string starting at '"'; *escaped is set when it holds an escape. */
static inline __attribute__((always_inline)) Pos string(Pos p, Pos end, int *escaped) {
    p++;
    for (;;) {
        p = skip_plain(p, end);
        if (p >= end) return NULL;
        if (*p == '"') return p + 1;
        if (*p != '\\' || end - p < 2) return NULL; /* a control character, newline included */
        unsigned char e = p[1];
        if (e == 'u') {
            if (end - p < 6 || !is_hex(p[2]) || !is_hex(p[3]) || !is_hex(p[4]) || !is_hex(p[5])) return NULL;
            p += 6; /* any \uXXXX, lone surrogates included: json.loads reads them all */
        } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
            p += 2;
        } else return NULL;
        *escaped = 1;
    }
}

/* One or more digits, else NULL. */
static inline Pos digits(Pos p, Pos end) {
    Pos start = p;
    while (p < end && *p >= '0' && *p <= '9') p++;
    return p > start ? p : NULL;
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)? : json's own number grammar. */
static inline __attribute__((always_inline)) Pos number(Pos p, Pos end) {
    Pos start = p;
    if (*p == '-') p++;
    if (p >= end) return NULL;
    if (*p == '0') p++;
    else if ((p = digits(p, end)) == NULL) return NULL;
    if (p < end && *p == '.' && (p = digits(p + 1, end)) == NULL) return NULL;
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if ((p = digits(p, end)) == NULL) return NULL;
    }
    return p - start <= MAX_NUMBER ? p : NULL;
}

/* Are the n bytes at p those at q? Eight at a time: keys and probes are a few words long. */
static inline int same(const unsigned char *p, const char *q, Py_ssize_t n) {
    for (; n >= 8; n -= 8, p += 8, q += 8) {
        uint64_t a, b;
        memcpy(&a, p, 8);
        memcpy(&b, q, 8);
        if (a != b) return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)q[i]) return 0;
    return 1;
}

static inline Pos literal(Pos p, Pos end, const char *word, Py_ssize_t n) {
    return end - p >= n && memcmp(p, word, n) == 0 ? p + n : NULL;
}

/* A member or element of a container at `depth`, at p (whitespace skipped). Inlined into both
 * containers: most values are strings and numbers, read without a call. */
static inline __attribute__((always_inline)) Pos element(Pos p, Pos end, int depth) {
    int escaped = 0;
    if (p >= end) return NULL;
    switch (*p) {
    case '"': return string(p, end, &escaped);
    case '{': return object(p, end, depth + 1, NULL);
    case '[': return array(p, end, depth + 1);
    case 't': return literal(p, end, "true", 4);
    case 'f': return literal(p, end, "false", 5);
    case 'n': return literal(p, end, "null", 4);
    default: return *p == '-' || (*p >= '0' && *p <= '9') ? number(p, end) : NULL;
    }
}

/* An object starting at '{'. With `fields`, its keys are the line's top-level keys. */
static Pos object(Pos p, Pos end, int depth, Fields *fields) {
    if (depth > MAX_DEPTH) return NULL;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}') return p + 1;
    for (;;) {
        if (p >= end || *p != '"') return NULL;
        Pos key = p + 1;
        int escaped = 0;
        if ((p = string(p, end, &escaped)) == NULL) return NULL;
        Py_ssize_t key_len = p - 1 - key;
        p = skip_ws(p, end);
        if (p >= end || *p != ':') return NULL;
        Pos start = p = skip_ws(p + 1, end);
        if ((p = element(p, end, depth)) == NULL) return NULL;
        if (fields != NULL && key_len > 0) {
            if (escaped) fields->escaped_key = 1;
            uint32_t bits = fields->by_first[key[0]] & fields->by_len[key_len < 63 ? key_len : 63];
            for (; bits; bits &= bits - 1) {
                int i = __builtin_ctz(bits);
                if (fields->key_len[i] == key_len && same(key, fields->key[i], key_len)) {
                    fields->start[i] = start;
                    fields->stop[i] = p;
                }
            }
        }
        p = skip_ws(p, end);
        if (p >= end) return NULL;
        if (*p == '}') return p + 1;
        if (*p != ',') return NULL;
        p = skip_ws(p + 1, end);
    }
}

static Pos array(Pos p, Pos end, int depth) {
    if (depth > MAX_DEPTH) return NULL;
    p = skip_ws(p + 1, end);
    if (p < end && *p == ']') return p + 1;
    for (;;) {
        if ((p = element(p, end, depth)) == NULL) return NULL;
        p = skip_ws(p, end);
        if (p >= end) return NULL;
        if (*p == ']') return p + 1;
        if (*p != ',') return NULL;
        p = skip_ws(p + 1, end);
    }
}

/* ------------------------------------------------------------------ byte-string searches */

/* Is `needle` inside [p, end)? */
static int contains(const unsigned char *p, const unsigned char *end, const char *needle, Py_ssize_t n) {
    for (; end - p >= n; p++) {
        p = memchr(p, needle[0], (end - p) - n + 1);
        if (p == NULL) return 0;
        if (memcmp(p, needle, n) == 0) return 1;
    }
    return 0;
}

/* Probes are found in two steps, after the "Teddy" matcher of Hyperscan: a fingerprint of each
 * probe, three consecutive bytes (its least common window in JSON text in English), is matched
 * at many positions at once with table lookups by nibble, the probes spread over 8 buckets (a
 * bit each); only a position where some bucket's fingerprint matched gets full comparisons. */
#define FP 3      /* fingerprint bytes; a shorter probe's missing ones match anything */
#define BUCKETS 8 /* the bits of a byte */
typedef struct {
    Py_ssize_t n;
    const char *text[MAX_PROBES];
    Py_ssize_t len[MAX_PROBES];
    Py_ssize_t offset[MAX_PROBES];     /* where the fingerprint starts inside the probe */
    uint32_t in_bucket[BUCKETS];       /* bit i set: probe i is in this bucket */
    uint8_t low[FP][16], high[FP][16]; /* buckets whose fingerprint byte j has this low/high nibble */
} Probes;

static int commonness(unsigned char ch) {
    static const char order[] = " \":,etaoinshrdl0123456789/.cumwfgypbvkjxqz"; /* most common first */
    const char *at = ch ? strchr(order, ch) : NULL;
    return at ? (int)(sizeof order - (at - order)) : 0; /* anything else counts as rare */
}

/* Does a probe in one of `buckets` have its fingerprint at q? */
static inline int probe_at(const Probes *pr, unsigned buckets, const unsigned char *q, const unsigned char *start,
                           const unsigned char *end) {
    for (; buckets; buckets &= buckets - 1) {
        for (uint32_t bits = pr->in_bucket[__builtin_ctz(buckets)]; bits; bits &= bits - 1) {
            int i = __builtin_ctz(bits);
            const unsigned char *at = q - pr->offset[i];
            if (at >= start && end - at >= pr->len[i] && same(at, pr->text[i], pr->len[i])) return 1;
        }
    }
    return 0;
}

/* Does [start, end) contain a probe? One position at a time. */
static int probed_scalar(const Probes *pr, const unsigned char *start, const unsigned char *end) {
    for (const unsigned char *q = start; q < end; q++) {
        unsigned buckets = 0xFF;
        for (int j = 0; j < FP; j++) {
            unsigned char ch = end - q > j ? q[j] : 0; /* past the end: no probe fits there anyway */
            buckets &= pr->low[j][ch & 15] & pr->high[j][ch >> 4];
        }
        if (buckets && probe_at(pr, buckets, q, start, end)) return 1;
    }
    return 0;
}

#ifdef HAVE_X86_CHECKS
/* The same, 32 positions per step with AVX2 shuffles. */
__attribute__((target("avx2"))) static int probed_avx2(const Probes *pr, const unsigned char *start,
                                                       const unsigned char *end) {
    __m256i low[FP], high[FP];
    for (int j = 0; j < FP; j++) {
        low[j] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)pr->low[j]));
        high[j] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)pr->high[j]));
    }
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    unsigned char pad[32 + FP - 1];
    for (const unsigned char *q = start; q < end; q += 32) {
        const unsigned char *from = q;
        uint32_t here = 0xFFFFFFFFu; /* positions inside [start, end) */
        if (end - q < (Py_ssize_t)sizeof pad) { /* the tail, padded with zeros */
            memset(pad, 0, sizeof pad);
            memcpy(pad, q, end - q);
            from = pad;
            if (end - q < 32) here = (1u << (end - q)) - 1;
        }
        __m256i buckets = _mm256_set1_epi8(-1);
        for (int j = 0; j < FP; j++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(from + j));
            __m256i lo = _mm256_shuffle_epi8(low[j], _mm256_and_si256(v, nibble));
            __m256i hi = _mm256_shuffle_epi8(high[j], _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble));
            buckets = _mm256_and_si256(buckets, _mm256_and_si256(lo, hi));
        }
        uint32_t hits = ~(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(buckets, _mm256_setzero_si256())) & here;
        if (hits == 0) continue;
        uint8_t found[32];
        _mm256_storeu_si256((__m256i *)found, buckets);
        for (; hits; hits &= hits - 1) {
            int k = __builtin_ctz(hits);
            if (probe_at(pr, found[k], q + k, start, end)) return 1;
        }
    }
    return 0;
}
#endif

static int (*probed)(const Probes *, const unsigned char *, const unsigned char *) = probed_scalar;

/* ------------------------------------------------------------------ argument checks */

static int bytes_tuple(PyObject *tuple, Py_ssize_t max, const char *what) {
    if (PyTuple_GET_SIZE(tuple) > max) {
        PyErr_Format(PyExc_ValueError, "at most %zd %s", max, what);
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple); i++) {
        PyObject *s = PyTuple_GET_ITEM(tuple, i);
        if (!PyBytes_Check(s) || PyBytes_GET_SIZE(s) == 0) {
            PyErr_Format(PyExc_TypeError, "%s must be non-empty bytes", what);
            return 0;
        }
    }
    return 1;
}

static int fields_init(Fields *f, PyObject *keys) {
    memset(f, 0, sizeof *f);
    if (!bytes_tuple(keys, MAX_KEYS, "keys")) return 0;
    f->nkeys = PyTuple_GET_SIZE(keys);
    for (Py_ssize_t i = 0; i < f->nkeys; i++) {
        PyObject *k = PyTuple_GET_ITEM(keys, i);
        f->key[i] = PyBytes_AS_STRING(k);
        f->key_len[i] = PyBytes_GET_SIZE(k);
        f->by_first[(unsigned char)f->key[i][0]] |= 1u << i;
        f->by_len[f->key_len[i] < 63 ? f->key_len[i] : 63] |= 1u << i;
    }
    return 1;
}

static int probes_init(Probes *pr, PyObject *probes) {
    memset(pr, 0, sizeof *pr);
    if (!bytes_tuple(probes, MAX_PROBES, "probes")) return 0;
    pr->n = PyTuple_GET_SIZE(probes);
    int distinct = 0, bucket_of[MAX_PROBES]; /* probes with the same fingerprint share a bucket */
    Py_ssize_t width[MAX_PROBES];            /* fingerprint bytes inside the probe */
    for (Py_ssize_t i = 0; i < pr->n; i++) {
        PyObject *s = PyTuple_GET_ITEM(probes, i);
        const unsigned char *text = (const unsigned char *)PyBytes_AS_STRING(s);
        pr->text[i] = (const char *)text;
        pr->len[i] = PyBytes_GET_SIZE(s);
        int best = INT_MAX;
        for (Py_ssize_t o = 0; o == 0 || o + FP <= pr->len[i]; o++) { /* the least common window */
            int sum = 0;
            for (Py_ssize_t j = o; j < o + FP && j < pr->len[i]; j++) sum += commonness(text[j]);
            if (sum < best) best = sum, pr->offset[i] = o;
        }
        width[i] = pr->len[i] - pr->offset[i] < FP ? pr->len[i] - pr->offset[i] : FP;
        int bucket = -1;
        for (Py_ssize_t k = 0; k < i && bucket < 0; k++)
            if (width[k] == width[i] && memcmp(pr->text[k] + pr->offset[k], text + pr->offset[i], width[i]) == 0)
                bucket = bucket_of[k];
        if (bucket < 0) bucket = distinct++ % BUCKETS;
        bucket_of[i] = bucket;
        pr->in_bucket[bucket] |= 1u << i;
        for (int j = 0; j < FP; j++) {
            for (int nib = 0; nib < 16; nib++) {
                int any = j >= width[i]; /* a byte past a short probe matches anything */
                unsigned char ch = any ? 0 : text[pr->offset[i] + j];
                if (any || (ch & 15) == nib) pr->low[j][nib] |= 1u << bucket;
                if (any || (ch >> 4) == nib) pr->high[j][nib] |= 1u << bucket;
            }
        }
    }
    return 1;
}

/* ------------------------------------------------------------------ walking a block */

typedef struct {
    Cursor c;                        /* the rest of the block */
    const unsigned char *line_start; /* of the current line; NULL before the first */
    Py_ssize_t line;                 /* the current line's index */
    Py_ssize_t lines;                /* after BLOCK_END: how many lines the block had */
    int not_utf8;                    /* the block failed utf8_valid */
    Fields f;
} Walk;

enum { LINE_OBJECT = 1, BLOCK_END = 0, UNSURE = -1 };

/* Start a walk. A block that is not UTF-8 is unsure as a whole: json.loads reads it line by line. */
static void walk_init(Walk *w, Py_buffer *block) {
    w->c.p = block->buf;
    w->c.end = w->c.p + block->len;
    w->line_start = NULL;
    w->line = w->lines = 0;
    w->not_utf8 = !utf8_valid(w->c.p, w->c.end);
}

/* The next JSON-object line, its fields in w->f; empty lines are passed over. The parser never
 * crosses a newline (whitespace inside a line excludes it, strings refuse it), so a line that is
 * not one object is caught where it ends. */
static int next_line(Walk *w) {
    Cursor *c = &w->c;
    if (w->not_utf8) return UNSURE;
    for (;;) {
        if (w->line_start != NULL) { /* the previous line ended at c->p: a newline or the end */
            if (c->p >= c->end) {
                w->lines = w->line + 1;
                return BLOCK_END;
            }
            c->p++;
            w->line++;
        }
        w->line_start = c->p;
        const unsigned char *p = c->p;
        if (p >= c->end || *p == '\n') continue; /* an empty line */
        if (*p == '\r' && (p + 1 >= c->end || p[1] == '\n')) { /* a line that is just "\r" */
            c->p = p + 1;
            continue;
        }
        for (Py_ssize_t i = 0; i < w->f.nkeys; i++) w->f.start[i] = NULL;
        w->f.escaped_key = 0;
        p = skip_ws(p, c->end);
        if (p >= c->end || *p != '{' || (p = object(p, c->end, 1, &w->f)) == NULL) return UNSURE;
        c->p = p = skip_ws(p, c->end);
        if ((p < c->end && *p != '\n') || (w->f.nkeys > 0 && w->f.escaped_key)) return UNSURE;
        return LINE_OBJECT;
    }
}

static int selected(const Fields *f, PyObject *select) {
    Py_ssize_t n = PyTuple_GET_SIZE(select);
    if (n == 0) return 1;
    if (f->start[0] == NULL) return 0;
    if (memchr(f->start[0], '\\', f->stop[0] - f->start[0]) != NULL) return 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PyTuple_GET_ITEM(select, i);
        if (contains(f->start[0], f->stop[0], PyBytes_AS_STRING(s), PyBytes_GET_SIZE(s))) return 1;
    }
    return 0;
}

/* Append a new reference to a list and let it go, whether or not the append worked; 0 on an
 * error (item NULL: its constructor failed). */
static int append_new(PyObject *list, PyObject *item) {
    if (item == NULL) return 0;
    int ok = PyList_Append(list, item) == 0;
    Py_DECREF(item);
    return ok;
}

static PyObject *raw_value(const Fields *f, Py_ssize_t i) {
    if (f->start[i] == NULL) return Py_NewRef(null_bytes);
    return PyBytes_FromStringAndSize((const char *)f->start[i], f->stop[i] - f->start[i]);
}

static inline Py_ssize_t raw_len(const Fields *f, Py_ssize_t i) {
    return f->start[i] == NULL ? 4 : f->stop[i] - f->start[i];
}

static inline const void *raw_text(const Fields *f, Py_ssize_t i) {
    return f->start[i] == NULL ? (const void *)"null" : (const void *)f->start[i];
}

/* ------------------------------------------------------------------ rows() */

static PyObject *row_tuple(const Fields *f, Py_ssize_t line, const Probes *pr) {
    PyObject *row = PyTuple_New(f->nkeys + 1);
    if (row == NULL) return NULL;
    PyObject *index = PyLong_FromSsize_t(line);
    if (index == NULL) goto fail;
    PyTuple_SET_ITEM(row, 0, index);
    for (Py_ssize_t i = 0; i < f->nkeys; i++) {
        int sieved = i == f->nkeys - 1 && pr->n > 0;
        PyObject *raw;
        if (sieved && (f->start[i] == NULL || !probed(pr, f->start[i], f->stop[i])))
            raw = Py_NewRef(Py_None);
        else if ((raw = raw_value(f, i)) == NULL)
            goto fail;
        PyTuple_SET_ITEM(row, i + 1, raw);
    }
    return row;
fail:
    Py_DECREF(row);
    return NULL;
}

static PyObject *rows(PyObject *module, PyObject *args) {
    (void)module;
    Py_buffer block;
    PyObject *keys, *select, *probes, *out = NULL, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*O!O!O!:rows", &block, &PyTuple_Type, &keys, &PyTuple_Type, &select,
                          &PyTuple_Type, &probes))
        return NULL;
    Walk w;
    Probes pr;
    if (!fields_init(&w.f, keys) || !bytes_tuple(select, MAX_PROBES, "select") || !probes_init(&pr, probes))
        goto done;
    if ((out = PyList_New(0)) == NULL) goto done;
    walk_init(&w, &block);
    int got;
    while ((got = next_line(&w)) == LINE_OBJECT) {
        if (w.f.nkeys == 0 || !selected(&w.f, select)) continue;
        if (!append_new(out, row_tuple(&w.f, w.line, &pr))) goto done;
    }
    result = got == UNSURE ? Py_NewRef(Py_None) : Py_BuildValue("(nO)", w.lines, out);
done:
    Py_XDECREF(out);
    PyBuffer_Release(&block);
    return result;
}

/* ------------------------------------------------------------------ tally() */

/* Counting lines by their joined raw values: an open-addressing table that owns one bytes
 * object per distinct value, so a repeated value costs a hash and a compare, no allocation. */
typedef struct {
    uint64_t hash;
    PyObject *joined; /* NULL: a free slot */
    Py_ssize_t count;
} Slot;

typedef struct {
    Slot *slots;
    size_t mask; /* slots - 1, a power of two minus one */
    size_t used;
} Table;

/* A multiply-mix hash of the joined value, eight bytes at a time (each value's length mixed in,
 * so no two joins of the same bytes collide by construction). */
static uint64_t joined_hash(const Fields *f, Py_ssize_t n) {
    uint64_t h = 0x243F6A8885A308D3ULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *p = raw_text(f, i);
        Py_ssize_t len = raw_len(f, i);
        uint64_t v = (uint64_t)len;
        for (; len >= 8; len -= 8, p += 8) {
            h = (h ^ v) * 0x9E3779B97F4A7C15ULL;
            h ^= h >> 29;
            memcpy(&v, p, 8);
        }
        uint64_t tail = 0;
        memcpy(&tail, p, len);
        h = (h ^ v) * 0x9E3779B97F4A7C15ULL;
        h = (h ^ (h >> 29) ^ tail) * 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
    }
    return h;
}

static int joined_equal(PyObject *joined, const Fields *f, Py_ssize_t n) {
    const char *p = PyBytes_AS_STRING(joined), *end = p + PyBytes_GET_SIZE(joined);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len = raw_len(f, i);
        if (end - p < len || memcmp(p, raw_text(f, i), len) != 0) return 0;
        p += len;
        if (i + 1 < n) {
            if (p >= end || *p != '\n') return 0;
            p++;
        }
    }
    return p == end;
}

static PyObject *joined_new(const Fields *f, Py_ssize_t n) {
    Py_ssize_t size = n > 0 ? n - 1 : 0;
    for (Py_ssize_t i = 0; i < n; i++) size += raw_len(f, i);
    PyObject *joined = PyBytes_FromStringAndSize(NULL, size);
    if (joined == NULL) return NULL;
    char *p = PyBytes_AS_STRING(joined);
    for (Py_ssize_t i = 0; i < n; i++) {
        memcpy(p, raw_text(f, i), raw_len(f, i));
        p += raw_len(f, i);
        if (i + 1 < n) *p++ = '\n';
    }
    return joined;
}

static void table_free(Table *t) {
    if (t->slots == NULL) return;
    for (size_t i = 0; i <= t->mask; i++) Py_XDECREF(t->slots[i].joined);
    PyMem_Free(t->slots);
    t->slots = NULL;
}

static int table_grow(Table *t) {
    size_t size = t->slots == NULL ? 64 : (t->mask + 1) * 2;
    Slot *slots = PyMem_Calloc(size, sizeof(Slot));
    if (slots == NULL) {
        PyErr_NoMemory();
        return 0;
    }
    if (t->slots != NULL) {
        for (size_t i = 0; i <= t->mask; i++) {
            if (t->slots[i].joined == NULL) continue;
            size_t j = t->slots[i].hash & (size - 1);
            while (slots[j].joined != NULL) j = (j + 1) & (size - 1);
            slots[j] = t->slots[i];
        }
        PyMem_Free(t->slots);
    }
    t->slots = slots;
    t->mask = size - 1;
    return 1;
}

/* The joined value of the current line's first n keys, counted; borrowed, NULL on error. */
static PyObject *table_count(Table *t, const Fields *f, Py_ssize_t n) {
    if ((t->used + 1) * 2 > t->mask + 1 && !table_grow(t)) return NULL;
    uint64_t h = joined_hash(f, n);
    size_t j = h & t->mask;
    for (; t->slots[j].joined != NULL; j = (j + 1) & t->mask) {
        if (t->slots[j].hash == h && joined_equal(t->slots[j].joined, f, n)) {
            t->slots[j].count++;
            return t->slots[j].joined;
        }
    }
    PyObject *joined = joined_new(f, n);
    if (joined == NULL) return NULL;
    t->slots[j] = (Slot){h, joined, 1};
    t->used++;
    return joined;
}

static PyObject *table_dict(const Table *t) {
    PyObject *d = PyDict_New();
    if (d == NULL || t->slots == NULL) return d;
    for (size_t i = 0; i <= t->mask; i++) {
        if (t->slots[i].joined == NULL) continue;
        PyObject *count = PyLong_FromSsize_t(t->slots[i].count);
        if (count == NULL || PyDict_SetItem(d, t->slots[i].joined, count) < 0) {
            Py_XDECREF(count);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(count);
    }
    return d;
}

static PyObject *tally(PyObject *module, PyObject *args) {
    (void)module;
    Py_buffer block;
    PyObject *keys, *probes, *hits = NULL, *counts = NULL, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*O!O!:tally", &block, &PyTuple_Type, &keys, &PyTuple_Type, &probes))
        return NULL;
    Walk w;
    Probes pr;
    Table t = {NULL, 0, 0};
    if (!fields_init(&w.f, keys) || !probes_init(&pr, probes)) goto done;
    if (w.f.nkeys == 0) {
        PyErr_SetString(PyExc_ValueError, "tally needs at least one key");
        goto done;
    }
    if ((hits = PyList_New(0)) == NULL) goto done;
    walk_init(&w, &block);
    Py_ssize_t last = w.f.nkeys - 1;
    int got;
    while ((got = next_line(&w)) == LINE_OBJECT) {
        PyObject *joined = table_count(&t, &w.f, last);
        if (joined == NULL) goto done;
        if (pr.n == 0 || w.f.start[last] == NULL || !probed(&pr, w.f.start[last], w.f.stop[last])) continue;
        PyObject *raw = raw_value(&w.f, last);
        Py_ssize_t offset = w.line_start - (const unsigned char *)block.buf;
        if (raw == NULL || !append_new(hits, Py_BuildValue("(nnON)", w.line, offset, joined, raw))) goto done;
    }
    if (got == UNSURE) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if ((counts = table_dict(&t)) == NULL) goto done;
    result = Py_BuildValue("(nOO)", w.lines, counts, hits);
done:
    table_free(&t);
    Py_XDECREF(counts);
    Py_XDECREF(hits);
    PyBuffer_Release(&block);
    return result;
}

/* ------------------------------------------------------------------ usage() */

/* The keys usage() reads, by position: what audit_scan.USAGE_KEYS passes. */
enum { U_TYPE, U_PROMPT, U_COMPLETION, U_CACHED, U_COST, U_KNOWN, U_ESTIMATED, U_MODEL, U_PROVIDER,
       U_RESPONSE_PROVIDER, U_USAGE, U_KEYS };
#define U_NAMES 3 /* model, provider, response_provider */

typedef struct {
    uint64_t records, bearing, prompt, completion, cached, estimated;
    double cost;
} Sums;

/* Is the raw value exactly the string literal `text` (an absent key reads "null")? */
#define raw_is(f, i, text) (raw_len(f, i) == sizeof text - 1 && memcmp(raw_text(f, i), text, sizeof text - 1) == 0)

/* A token count that json.loads reads as an int from 0 to 10**18 - 1: plain digits. */
static int plain_count(const Fields *f, int i, uint64_t *out) {
    if (f->start[i] == NULL || f->stop[i] - f->start[i] > 18) return 0;
    uint64_t v = 0;
    for (const unsigned char *p = f->start[i]; p < f->stop[i]; p++) {
        if (*p < '0' || *p > '9') return 0;
        v = v * 10 + (*p - '0');
    }
    *out = v;
    return 1;
}

/* A JSON number (grammar checked) with at most 15 significant digits and a power of ten within
 * 1e-22..1e22, in one exact operation (Clinger's fast path): the significand and the power are
 * exact doubles, so the one rounding is float()'s correct rounding. Else 0, for strtod. */
static int fast_decimal(Pos p, Pos end, double *out) {
    static const double power[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                     1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    uint64_t w = 0;
    int significant = 0, scale = 0, fraction = 0;
    for (; p < end && (*p == '.' || (*p >= '0' && *p <= '9')); p++) {
        if (*p == '.') {
            fraction = 1;
            continue;
        }
        if (w == 0 && *p == '0') { /* a leading zero adds no digit */
            scale -= fraction;
            continue;
        }
        if (++significant > 15) return 0;
        w = w * 10 + (*p - '0');
        scale -= fraction;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        int sign = 1, exponent = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) sign = *p++ == '-' ? -1 : 1;
        for (; p < end && *p >= '0' && *p <= '9'; p++)
            if ((exponent = exponent * 10 + (*p - '0')) > 400) return 0;
        scale += sign * exponent;
    }
    if (scale < -22 || scale > 22) return w == 0 ? (*out = 0.0, 1) : 0;
    *out = scale >= 0 ? (double)w * power[scale] : (double)w / power[-scale];
    return 1;
}

/* A cost that json.loads reads as a finite number >= 0, converted as float() converts it. */
static int plain_cost(const Fields *f, double *out) {
    char text[65];
    Py_ssize_t n = f->start[U_COST] == NULL ? 0 : f->stop[U_COST] - f->start[U_COST];
    if (n == 0 || n >= (Py_ssize_t)sizeof text || *f->start[U_COST] == '-') return 0;
    unsigned char first = *f->start[U_COST];
    if (first < '0' || first > '9') return 0; /* a string, a bool, null, ...: not a number */
    if (fast_decimal(f->start[U_COST], f->stop[U_COST], out)) return 1;
    memcpy(text, f->start[U_COST], n);
    text[n] = '\0';
    double v = PyOS_string_to_double(text, NULL, NULL); /* the grammar was checked: no error */
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (!isfinite(v)) return 0;
    *out = v;
    return 1;
}

/* A name that is absent, null or a string without escapes (its bytes are its text). */
static int plain_name(const Fields *f, int i) {
    if (f->start[i] == NULL || raw_is(f, i, "null")) return 1;
    return *f->start[i] == '"' && memchr(f->start[i], '\\', f->stop[i] - f->start[i]) == NULL;
}

/* Add the current line to `sums` when it is a regular llm_usage record: flat (usage absent or
 * null), int token counts, a finite nonnegative cost, cost_known true or null, cost_estimated a
 * bool or null, names strings without escapes or null. Exactly TaskScan.add_usage's counts for
 * such a record, and it notes no gap for one. Anything else is left to add_usage. */
static int add_regular(Sums *sums, const Fields *f) {
    uint64_t prompt, completion, cached, total[3];
    double cost;
    if (!raw_is(f, U_TYPE, "\"llm_usage\"") || !raw_is(f, U_USAGE, "null")) return 0;
    if (!plain_count(f, U_PROMPT, &prompt) || !plain_count(f, U_COMPLETION, &completion) ||
        !plain_count(f, U_CACHED, &cached) || !plain_cost(f, &cost))
        return 0;
    if (!(raw_is(f, U_KNOWN, "true") || raw_is(f, U_KNOWN, "null"))) return 0;
    int estimated = raw_is(f, U_ESTIMATED, "true");
    if (!(estimated || raw_is(f, U_ESTIMATED, "false") || raw_is(f, U_ESTIMATED, "null"))) return 0;
    for (int i = U_MODEL; i < U_MODEL + U_NAMES; i++)
        if (!plain_name(f, i)) return 0;
    if (__builtin_add_overflow(sums->prompt, prompt, &total[0]) ||
        __builtin_add_overflow(sums->completion, completion, &total[1]) ||
        __builtin_add_overflow(sums->cached, cached, &total[2]))
        return 0; /* beyond 64 bits: Python's ints take it */
    sums->prompt = total[0];
    sums->completion = total[1];
    sums->cached = total[2];
    sums->records++;
    sums->bearing += prompt + completion > 0;
    sums->estimated += estimated;
    sums->cost += cost;
    return 1;
}

/* The first sightings of distinct non-empty names, per name field, at most `cap` each. */
#define MAX_NAME_CAP 64
typedef struct {
    Py_ssize_t cap;
    Py_ssize_t seen[U_NAMES];
    const unsigned char *text[U_NAMES][MAX_NAME_CAP]; /* raw names in the block, quotes included */
    Py_ssize_t len[U_NAMES][MAX_NAME_CAP];
    PyObject *first; /* [(line_index, field, raw), ...] */
} Names;

static int names_add(Names *nm, const Fields *f, Py_ssize_t line) {
    for (int k = 0; k < U_NAMES; k++) {
        const unsigned char *text = f->start[U_MODEL + k];
        Py_ssize_t n = raw_len(f, U_MODEL + k), seen = nm->seen[k];
        if (text == NULL || n <= 2 || *text != '"' || seen >= nm->cap) continue; /* null or "" */
        int known = 0; /* a linear look: a log names a handful of models and providers */
        for (Py_ssize_t j = 0; j < seen && !known; j++)
            known = nm->len[k][j] == n && memcmp(nm->text[k][j], text, n) == 0;
        if (known) continue;
        if (!append_new(nm->first, Py_BuildValue("(niy#)", line, k, (const char *)text, n))) return 0;
        nm->text[k][seen] = text;
        nm->len[k][seen] = n;
        nm->seen[k]++;
    }
    return 1;
}

static PyObject *usage(PyObject *module, PyObject *args) {
    (void)module;
    Py_buffer block;
    PyObject *keys, *select, *out = NULL, *result = NULL;
    Names nm;
    nm.first = NULL;
    memset(nm.seen, 0, sizeof nm.seen);
    if (!PyArg_ParseTuple(args, "y*O!O!n:usage", &block, &PyTuple_Type, &keys, &PyTuple_Type, &select, &nm.cap))
        return NULL;
    Walk w;
    Probes none = {0};
    Sums sums = {0};
    if (!fields_init(&w.f, keys) || !bytes_tuple(select, MAX_PROBES, "select")) goto done;
    if (w.f.nkeys != U_KEYS || nm.cap < 0 || nm.cap > MAX_NAME_CAP) {
        PyErr_Format(PyExc_ValueError, "usage needs exactly %d keys and a name cap from 0 to %d", U_KEYS,
                     MAX_NAME_CAP);
        goto done;
    }
    if ((out = PyList_New(0)) == NULL || (nm.first = PyList_New(0)) == NULL) goto done;
    walk_init(&w, &block);
    int got;
    while ((got = next_line(&w)) == LINE_OBJECT) {
        if (!selected(&w.f, select)) continue;
        if (add_regular(&sums, &w.f)) {
            if (!names_add(&nm, &w.f, w.line)) goto done;
            continue;
        }
        if (!append_new(out, row_tuple(&w.f, w.line, &none))) goto done;
    }
    if (got == UNSURE) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    result = Py_BuildValue("(n(KKKKKKd)OO)", w.lines, (unsigned long long)sums.records,
                           (unsigned long long)sums.bearing, (unsigned long long)sums.prompt,
                           (unsigned long long)sums.completion, (unsigned long long)sums.cached,
                           (unsigned long long)sums.estimated, sums.cost, nm.first, out);
done:
    Py_XDECREF(nm.first);
    Py_XDECREF(out);
    PyBuffer_Release(&block);
    return result;
}

/* ------------------------------------------------------------------ is_utf8() */

/* is_utf8(data, check) -> bool: the block check alone, by the name of one of UTF8_CHECKS (tests
 * compare each with Python's strict decoder). */
static PyObject *is_utf8(PyObject *module, PyObject *args) {
    (void)module;
    Py_buffer data;
    const char *name;
    if (!PyArg_ParseTuple(args, "y*s:is_utf8", &data, &name)) return NULL;
    PyObject *result = NULL;
    for (int i = 0; i < utf8_check_count && result == NULL; i++) {
        if (strcmp(utf8_checks[i].name, name) != 0) continue;
        const unsigned char *p = data.buf;
        result = PyBool_FromLong(utf8_checks[i].check(p, p + data.len));
    }
    if (result == NULL) PyErr_Format(PyExc_ValueError, "no UTF-8 check %s on this CPU", name);
    PyBuffer_Release(&data);
    return result;
}

/* ------------------------------------------------------------------ the module */

static PyMethodDef methods[] = {
    {"rows", rows, METH_VARARGS,
     "rows(block, keys, select, probes) -> (line_count, [(line_index, raw...), ...]) or None"},
    {"tally", tally, METH_VARARGS,
     "tally(block, keys, probes) -> (line_count, {joined: count}, [(line_index, offset, joined, raw_last)]) or None"},
    {"usage", usage, METH_VARARGS,
     "usage(block, keys, select, name_cap) -> (line_count, sums, [(line_index, field, raw)], [(line_index, raw...)]) or None"},
    {"is_utf8", is_utf8, METH_VARARGS, "is_utf8(data, check) -> bool, check one of UTF8_CHECKS"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_jsonl",
    .m_doc = "Validate blocks of JSON Lines and read top-level fields in C (see _jsonl.c).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__jsonl(void) {
#ifdef HAVE_X86_CHECKS
    __builtin_cpu_init();
    if (__builtin_cpu_supports("ssse3")) utf8_checks[utf8_check_count++] = (Utf8Check){"ssse3", utf8_valid_ssse3};
    if (__builtin_cpu_supports("avx2")) utf8_checks[utf8_check_count++] = (Utf8Check){"avx2", utf8_valid_avx2};
#endif
    utf8_valid = utf8_checks[utf8_check_count - 1].check;
#ifdef HAVE_X86_CHECKS
    if (__builtin_cpu_supports("avx2")) probed = probed_avx2;
#endif
    null_bytes = PyBytes_FromString("null");
    if (null_bytes == NULL) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    PyObject *names = PyTuple_New(utf8_check_count);
    if (names == NULL) goto fail;
    for (int i = 0; i < utf8_check_count; i++) {
        PyObject *name = PyUnicode_FromString(utf8_checks[i].name);
        if (name == NULL) {
            Py_DECREF(names);
            goto fail;
        }
        PyTuple_SET_ITEM(names, i, name);
    }
    if (PyModule_AddObject(m, "UTF8_CHECKS", names) < 0) {
        Py_DECREF(names);
        goto fail;
    }
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
