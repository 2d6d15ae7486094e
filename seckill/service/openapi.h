/*
 * openapi.h -- GET /openapi.json: an OpenAPI 3 description of the API,
 * generated from the route table (routes.h), so it lists every route,
 * every status each answers and the error body, and cannot drift from
 * what the service serves.
 */
#ifndef SECKILL_OPENAPI_H
#define SECKILL_OPENAPI_H

/* The description as compact JSON, built on first use and kept for the
 * process's life; NULL when memory ran out. */
const char *sk_openapi_json(void);

#endif
