/* Growing arrays by doubling (common/base/array.h): contents kept, the first size, overflow refused. */
#include <CUnit/Basic.h>
#include <stdint.h>
#include <stdlib.h>

#include "array.h"
#include "testutil.h"

static void test_grows_and_keeps(void)
{
    int *v = NULL;
    size_t cap = 0;
    for (int i = 0; i < 1000; i++) {
        CU_ASSERT_EQUAL_FATAL(tp_array_fit(&v, &cap, (size_t)i + 1, sizeof *v, 16), 0);
        v[i] = i * 7;
    }
    CU_ASSERT_EQUAL(cap, 1024); /* 16 doubled six times */
    for (int i = 0; i < 1000; i++)
        CU_ASSERT_EQUAL(v[i], i * 7);
    int *same = v;
    CU_ASSERT_EQUAL(tp_array_fit(&v, &cap, 1024, sizeof *v, 16), 0); /* fits: nothing moves */
    CU_ASSERT_PTR_EQUAL(v, same);
    CU_ASSERT_EQUAL(tp_array_fit(&v, &cap, 5000, sizeof *v, 16), 0); /* many at once */
    CU_ASSERT_EQUAL(cap, 8192);
    free(v);
}

static void test_overflow_refused(void)
{
    char *v = NULL;
    size_t cap = 0;
    CU_ASSERT_EQUAL(tp_array_fit(&v, &cap, 10, 1, 0), 0);
    CU_ASSERT_EQUAL(cap, 16); /* from 1, doubled to 16 */
    char *was = v;
    CU_ASSERT_EQUAL(tp_array_fit(&v, &cap, SIZE_MAX, 1, 0), TP_ENOMEM);
    CU_ASSERT_EQUAL(tp_array_fit(&v, &cap, SIZE_MAX / 4, 64, 0), TP_ENOMEM);
    CU_ASSERT_PTR_EQUAL(v, was); /* left as it was */
    CU_ASSERT_EQUAL(cap, 16);
    free(v);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite("array", NULL, NULL);
    CU_add_test(s, "grows by doubling, keeps what it holds", test_grows_and_keeps);
    CU_add_test(s, "a size past the address space is refused", test_overflow_refused);
    return tp_test_run();
}
