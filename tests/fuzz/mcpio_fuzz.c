/*
 * An MCP server's stdout as the client reads it (common/mcp/mcpstdio.h),
 * with no process: the input is what the server wrote, taken line by line
 * (and a batch element by element) with tp_mcpio_take until it runs out.
 * Every take hands over an object, an unreadable answer with its id and
 * why, or junk, and moves on; a line jansson reads as an object comes out
 * as jansson read it. (The lenient member scan, tp_scan_member, is
 * tp_json_member too, held to jansson by json_fuzz.)
 */
#include <jansson.h>
#include <string.h>

#include "fuzz.h"
#include "json.h"
#include "mcpstdio.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    tp_mcpio_t c = {0};
    c.in_fd = c.out_fd = c.err_fd = -1;
    tp_buf_append(&c.out, data, size);
    /* The first line, when jansson reads it as an object, is the first message as it is. */
    const char *nl = memchr(text, '\n', size);
    json_t *first = nl ? json_loadb(text, (size_t)(nl - text), 0, NULL) : NULL;
    bool checked = !json_is_object(first);
    for (size_t turns = 0;; turns++) {
        TP_FUZZ_CHECK(turns <= size + 1);
        size_t avail = tp_buf_avail(&c.out), at = c.batch_at;
        json_t *m = NULL;
        char junk[128] = "";
        int rc = tp_mcpio_take(&c, 1u << 12, &m, junk, sizeof junk);
        TP_FUZZ_CHECK(rc == 0 || rc == TP_EBADMSG || rc == TP_EPROTO || rc == TP_ECLOSED || rc == TP_E2BIG);
        if (rc == TP_ECLOSED || rc == TP_E2BIG) {
            TP_FUZZ_CHECK(m == NULL);
            break;
        }
        /* every take moves on: a line let go, or the batch's next element */
        TP_FUZZ_CHECK(tp_buf_avail(&c.out) < avail || c.batch_at > at);
        if (rc == 0) {
            TP_FUZZ_CHECK(json_is_object(m));
            if (!checked)
                TP_FUZZ_CHECK(json_equal(m, first));
        } else if (rc == TP_EBADMSG) {
            TP_FUZZ_CHECK(m != NULL && junk[0] != '\0');
        } else {
            TP_FUZZ_CHECK(m == NULL);
        }
        checked = true;
        json_decref(m);
    }
    json_decref(first);
    tp_mcpio_free(&c);
    return 0;
}
