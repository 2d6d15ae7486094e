/* What seckill.h declares besides its types: the outcomes' names. */
#include "seckill.h"

/* One name per outcome, shared by JSON errors and metrics labels, so a
 * client's error code and the counter it lands in always agree. */
const char *sk_result_code(sk_result r)
{
    switch (r) {
#define SK_RESULT_CODE(name, status, code)                                                                             \
    case SK_##name: return code;
        SK_RESULTS(SK_RESULT_CODE)
#undef SK_RESULT_CODE
    case SK_RESULT_COUNT: break;
    }
    return "internal";
}
