/*
 * routes.h -- the API's route table: every route's method, path, who may
 * call it, what it takes and every status it answers. api.c dispatches by
 * it, openapi.c describes the API from it, and the suites walk it, so a
 * route cannot be served without being described.
 */
#ifndef SECKILL_ROUTES_H
#define SECKILL_ROUTES_H

#include <stddef.h>

#include "metrics.h"

typedef enum sk_auth_kind {
    SK_AUTH_NONE = 0, /* anyone, no token */
    SK_AUTH_USER,     /* a valid token, any user */
    SK_AUTH_ADMIN     /* a valid token of user 0 */
} sk_auth_kind;

#define SK_ROUTE_STATUS_MAX 12

typedef struct sk_route_def {
    sk_route route;     /* what api.c dispatches on; the metrics label */
    const char *method; /* the one method (GET also answers HEAD) */
    const char *path;   /* OpenAPI template; "{id}" stands for one segment */
    sk_auth_kind auth;
    const char *operation; /* OpenAPI operationId */
    const char *summary;
    const char *request;   /* schema of the JSON body, or NULL: none */
    int paged;             /* takes ?after=ID&limit=N */
    int ok;                /* the success status */
    const char *ok_schema; /* its body's schema; NULL: ok_type, not JSON */
    const char *ok_type;   /* its content type */
    const char *location;  /* what its Location header names, or NULL */
    /* Every other status this route answers, 0-terminated, besides those
     * every route may answer (sk_route_common_statuses). */
    int errors[SK_ROUTE_STATUS_MAX];
} sk_route_def;

/* The table, in the order the description lists it. */
const sk_route_def *sk_routes(size_t *n);

/* Statuses any request may get whatever its route: a missing Host (400),
 * a body announced too large (413), a method the path does not take
 * (405), a failure of the service's own (500). 0-terminated. */
const int *sk_route_common_statuses(void);

/* Whether `status` is one `def` lists (its own, its success, or common). */
int sk_route_lists(const sk_route_def *def, int status);

/*
 * Match a request. The route whose template and method fit, with the {id}
 * segment (not NUL-terminated) in *id and *id_len; NULL when none does. Then
 * *allow says what methods the path takes ("GET, HEAD, POST"), empty
 * when no route has the path at all (404 rather than 405).
 */
const sk_route_def *sk_route_match(const char *method, const char *path, const char **id, size_t *id_len, char *allow,
                                   size_t allow_cap);

#endif
