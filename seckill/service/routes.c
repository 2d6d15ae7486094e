/* The API's route table and the matching of a request to it; routes.h. */
#include "routes.h"

#include <stdio.h>
#include <string.h>

/* Each route's own statuses come from what its handler can answer: the
 * checks api.c makes (401 token, 403 admin, 400 id or body) and the
 * strategy results it maps (SK_RESULTS in seckill.h). */
static const sk_route_def table[] = {
    {SK_ROUTE_VOUCHER_CREATE,
     "POST",
     "/api/vouchers",
     SK_AUTH_ADMIN,
     "createVoucher",
     "Create a voucher (admin only)",
     "VoucherNew",
     0,
     201,
     "VoucherCreated",
     "application/json",
     "/api/vouchers/{id}",
     {401, 403, 503, 0}},
    {SK_ROUTE_VOUCHER_LIST,
     "GET",
     "/api/vouchers",
     SK_AUTH_NONE,
     "listVouchers",
     "List vouchers in id order, a page at a time",
     NULL,
     1,
     200,
     "VoucherPage",
     "application/json",
     NULL,
     {503, 0}},
    {SK_ROUTE_VOUCHER_GET,
     "GET",
     "/api/vouchers/{id}",
     SK_AUTH_NONE,
     "getVoucher",
     "A voucher, with its remaining stock",
     NULL,
     0,
     200,
     "Voucher",
     "application/json",
     NULL,
     {404, 503, 0}},
    {SK_ROUTE_ORDER_CREATE,
     "POST",
     "/api/vouchers/{id}/orders",
     SK_AUTH_USER,
     "createOrder",
     "Order one unit of a voucher (one per user)",
     NULL,
     0,
     201,
     "OrderCreated",
     "application/json",
     "/api/orders/{order_id}",
     {401, 403, 404, 409, 410, 429, 503, 0}},
    {SK_ROUTE_MY_ORDER,
     "GET",
     "/api/vouchers/{id}/order",
     SK_AUTH_USER,
     "getMyOrder",
     "The caller's own order of a voucher (how a client whose 201 was lost finds it)",
     NULL,
     0,
     200,
     "Order",
     "application/json",
     NULL,
     {401, 404, 503, 0}},
    {SK_ROUTE_ORDER_GET,
     "GET",
     "/api/orders/{id}",
     SK_AUTH_USER,
     "getOrder",
     "An order, to its buyer or the admin",
     NULL,
     0,
     200,
     "Order",
     "application/json",
     NULL,
     {401, 404, 503, 0}},
    {SK_ROUTE_HEALTHZ,
     "GET",
     "/healthz",
     SK_AUTH_NONE,
     "liveness",
     "Liveness: the process answers (nothing else is checked)",
     NULL,
     0,
     200,
     "Health",
     "application/json",
     NULL,
     {0}},
    {SK_ROUTE_READYZ,
     "GET",
     "/readyz",
     SK_AUTH_NONE,
     "readiness",
     "Readiness: Redis and the database both answer; 503 names which does not",
     NULL,
     0,
     200,
     "Health",
     "application/json",
     NULL,
     {503, 0}},
    {SK_ROUTE_METRICS,
     "GET",
     "/metrics",
     SK_AUTH_NONE,
     "metrics",
     "Prometheus metrics",
     NULL,
     0,
     200,
     NULL,
     "text/plain; version=0.0.4",
     NULL,
     {0}},
    {SK_ROUTE_OPENAPI,
     "GET",
     "/openapi.json",
     SK_AUTH_NONE,
     "openapi",
     "This description (OpenAPI 3)",
     NULL,
     0,
     200,
     NULL,
     "application/json",
     NULL,
     {0}},
};

const sk_route_def *sk_routes(size_t *n)
{
    *n = sizeof table / sizeof *table;
    return table;
}

static const int common[] = {400, 405, 413, 500, 0};

const int *sk_route_common_statuses(void)
{
    return common;
}

int sk_route_lists(const sk_route_def *def, int status)
{
    if (status == def->ok) return 1;
    for (const int *s = def->errors; *s; s++)
        if (*s == status) return 1;
    for (const int *s = common; *s; s++)
        if (*s == status) return 1;
    return 0;
}

/* Whether `path` fits `tmpl` segment by segment, "{id}" fitting any one
 * non-empty segment. Segments are compared by length, so "orders" does
 * not fit "ordersX", and an empty one ("//", a trailing "/") fits nothing. */
static int fits(const char *tmpl, const char *path, const char **id, size_t *id_len)
{
    while (*tmpl && *path) {
        if (*tmpl != '/' || *path != '/') return 0;
        tmpl++;
        path++;
        const char *t = tmpl, *p = path;
        while (*tmpl && *tmpl != '/') tmpl++;
        while (*path && *path != '/') path++;
        size_t tl = (size_t)(tmpl - t), pl = (size_t)(path - p);
        if (pl == 0) return 0;
        if (tl == 4 && memcmp(t, "{id}", 4) == 0) {
            *id = p;
            *id_len = pl;
        } else if (tl != pl || memcmp(t, p, pl) != 0) {
            return 0;
        }
    }
    return *tmpl == '\0' && *path == '\0';
}

const sk_route_def *sk_route_match(const char *method, const char *path, const char **id, size_t *id_len, char *allow,
                                   size_t allow_cap)
{
    const sk_route_def *hit = NULL;
    size_t used = 0;
    allow[0] = '\0';
    *id = NULL;
    *id_len = 0;
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        const char *pid = NULL;
        size_t plen = 0;
        if (!fits(table[i].path, path, &pid, &plen)) continue;
        int get = strcmp(table[i].method, "GET") == 0;
        if (!hit && (strcmp(method, table[i].method) == 0 || (get && strcmp(method, "HEAD") == 0))) {
            hit = &table[i];
            *id = pid;
            *id_len = plen;
        }
        int k =
            snprintf(allow + used, allow_cap - used, "%s%s%s", used ? ", " : "", table[i].method, get ? ", HEAD" : "");
        if (k > 0 && (size_t)k < allow_cap - used) used += (size_t)k;
    }
    return hit;
}
