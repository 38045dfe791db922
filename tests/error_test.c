/* The one error space (common/base/error.h): system codes, toolpool's own, a registered range. */
#include <CUnit/Basic.h>
#include <string.h>

#include "error.h"
#include "testutil.h"

static const char *lib_says(int rc)
{
    return rc == -30001 ? "the library's first" : "the library's other";
}

static void test_strerror(void)
{
    CU_ASSERT_STRING_EQUAL(tp_strerror(0), "success");
    CU_ASSERT_STRING_EQUAL(tp_strerror(TP_ENOMEM), strerror(ENOMEM));
    CU_ASSERT_STRING_EQUAL(tp_strerror(tp_errno(ENOSPC)), strerror(ENOSPC));
    CU_ASSERT_EQUAL(tp_errno(0), TP_EIO);
    CU_ASSERT_STRING_EQUAL(tp_strerror(TP_ECLOSED), "the other end closed");
    CU_ASSERT_STRING_EQUAL(tp_strerror(TP_EPROTO), "a corrupt frame or record");
    CU_ASSERT_STRING_EQUAL(tp_strerror(-30001), "error -30001"); /* nobody says it yet */
    tp_strerror_range(-30010, -30001, lib_says);
    CU_ASSERT_STRING_EQUAL(tp_strerror(-30001), "the library's first");
    CU_ASSERT_STRING_EQUAL(tp_strerror(-30010), "the library's other");
    CU_ASSERT_STRING_EQUAL(tp_strerror(-30011), "error -30011");
    CU_ASSERT_STRING_EQUAL(tp_strerror(-50000), "error -50000");
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("error", NULL, NULL);
    CU_add_test(s, "every code said", test_strerror);
    return tp_test_run();
}
