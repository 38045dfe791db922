/*
 * The line splitter of run and of MCP over stdio (supervisor/front/lines.h),
 * held to its slow twin: random texts fed in random pieces must give the
 * lines a plain split on '\n' gives, each line past the limit reported once
 * and none of its bytes handed out, and every byte accounted for.
 */
#include <CUnit/Basic.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "lines.h"
#include "testutil.h"

/* What a reader of text sees: "L<line>\n" for a line, "T\n" for an overlong one's tail, "X\n" for it reported. */
static void split_slow(const char *text, size_t n, size_t max, tp_buf_t *out, size_t *dropped)
{
    size_t i = 0;
    *dropped = 0;
    while (i < n) {
        const char *nl = memchr(text + i, '\n', n - i);
        if (nl == NULL) {
            if (n - i > max) /* a rest with no newline yet, already too long */
                tp_buf_puts(out, "X\n");
            break; /* the rest waits for more */
        }
        size_t len = (size_t)(nl - (text + i));
        /*
         * Whether the splitter saw it past max before its newline came
         * depends on the pieces; this twin feeds the whole text at once,
         * and the fast one must agree on what is reported only where that
         * cannot differ: lines of at most max bytes are always whole.
         */
        if (len <= max) {
            tp_buf_puts(out, "L");
            tp_buf_append(out, text + i, len);
            tp_buf_puts(out, "\n");
        } else {
            tp_buf_puts(out, "X\n");
            *dropped += len;
        }
        i += len + 1;
    }
}

/* The same text through tp_lines_next, fed in pieces of random sizes. */
static void split_fast(const char *text, size_t n, size_t max, tp_buf_t *out, size_t *dropped, size_t *used)
{
    tp_lines_t l = {0};
    tp_buf_t b = {0};
    size_t i = 0;
    *dropped = *used = 0;
    bool reported = false; /* the current overlong line was reported */
    for (;;) {
        size_t len;
        tp_lines_rc_t rc = tp_lines_next(&l, &b, max, &len);
        if (rc == TP_LINES_LINE || rc == TP_LINES_TAIL) {
            if (rc == TP_LINES_LINE && len <= max) {
                tp_buf_puts(out, "L");
                tp_buf_append(out, tp_buf_head(&b), len);
                tp_buf_puts(out, "\n");
            } else if (rc == TP_LINES_LINE) {
                tp_buf_puts(out, "X\n"); /* whole, but long: the caller's to refuse */
                *dropped += len;
            } else {
                CU_ASSERT_TRUE(reported);
                *dropped += len;
            }
            *used += len + 1;
            reported = false;
            tp_lines_done(&l, &b, len);
            continue;
        }
        if (rc == TP_LINES_LONG) {
            CU_ASSERT_FALSE(reported);
            reported = true;
            tp_buf_puts(out, "X\n");
        }
        *dropped += len;
        *used += len;
        if (i == n)
            break;
        size_t piece = 1 + (size_t)rand() % 40;
        if (piece > n - i)
            piece = n - i;
        tp_buf_append(&b, text + i, piece);
        i += piece;
    }
    *used += tp_buf_avail(&b); /* the unterminated rest */
    tp_buf_free(&b);
}

static void test_random_pieces(void)
{
    srand(7);
    for (int round = 0; round < 3000; round++) {
        size_t n = (size_t)rand() % 300, max = 1 + (size_t)rand() % 30;
        char *text = malloc(n + 1);
        for (size_t i = 0; i < n; i++)
            text[i] = rand() % 6 == 0 ? '\n' : (char)('a' + rand() % 26);
        tp_buf_t slow = {0}, fast = {0};
        size_t d_slow, d_fast, used;
        split_slow(text, n, max, &slow, &d_slow);
        split_fast(text, n, max, &fast, &d_fast, &used);
        tp_buf_append(&slow, "", 1);
        tp_buf_append(&fast, "", 1);
        CU_ASSERT_STRING_EQUAL(fast.data, slow.data);
        CU_ASSERT_EQUAL(used, n);
        tp_buf_free(&slow);
        tp_buf_free(&fast);
        free(text);
    }
}

static void test_rest_and_reset(void)
{
    tp_lines_t l = {0};
    tp_buf_t b = {0};
    size_t len;
    tp_buf_puts(&b, "abc");
    CU_ASSERT_EQUAL(tp_lines_next(&l, &b, 10, &len), TP_LINES_MORE);
    CU_ASSERT_EQUAL(len, 0);
    CU_ASSERT_TRUE(tp_lines_rest(&l, &b)); /* a last line without its newline */
    tp_buf_puts(&b, "defghijklmno");
    CU_ASSERT_EQUAL(tp_lines_next(&l, &b, 10, &len), TP_LINES_LONG);
    CU_ASSERT_EQUAL(len, 15);
    CU_ASSERT_EQUAL(tp_buf_avail(&b), 0);
    tp_buf_puts(&b, "pq");
    CU_ASSERT_EQUAL(tp_lines_next(&l, &b, 10, &len), TP_LINES_MORE);
    CU_ASSERT_EQUAL(len, 2);
    CU_ASSERT_FALSE(tp_lines_rest(&l, &b)); /* the end of an overlong line is no last line */
    tp_buf_puts(&b, "r\nok\n");
    CU_ASSERT_EQUAL(tp_lines_next(&l, &b, 10, &len), TP_LINES_TAIL);
    CU_ASSERT_EQUAL(len, 1);
    tp_lines_done(&l, &b, len);
    CU_ASSERT_EQUAL(tp_lines_next(&l, &b, 10, &len), TP_LINES_LINE);
    CU_ASSERT_EQUAL(len, 2);
    CU_ASSERT_EQUAL(memcmp(tp_buf_head(&b), "ok", 2), 0);
    tp_lines_done(&l, &b, len);
    tp_lines_reset(&l);
    CU_ASSERT_EQUAL(tp_lines_next(&l, &b, 10, &len), TP_LINES_MORE);
    tp_buf_free(&b);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("lines", NULL, NULL);
    CU_add_test(s, "random texts in random pieces, against a plain split", test_random_pieces);
    CU_add_test(s, "a last line, an overlong one and its tail", test_rest_and_reset);
    return tp_test_run();
}
