/*
 * One server's connections: the shared one (mux.c), and a pool of idle
 * ones for commands that must not share (WAIT blocks its connection on the
 * server). The pool grows to the number of threads that need one at the
 * same moment and never blocks a borrower: contention for connections
 * would add latency exactly where locks are contended.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "util.h"

dlock_status dlock__pool_init(dlock__pool *p, const char *host, int port, const char *path, const dlock__conn_cfg *cfg)
{
    memset(p, 0, sizeof *p);
    if (dlock__endpoint_init(&p->ep, host, port, path, cfg) != 0) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&p->mu, NULL);
    dlock__mux_init(&p->mux);
    p->mux.spin_us = cfg->busy_poll_us;
    return DLOCK_OK;
}

void dlock__pool_destroy(dlock__pool *p)
{
    for (size_t i = 0; i < p->n_idle; i++) dlock__link_free(p->idle[i]);
    free(p->idle);
    dlock__mux_destroy(&p->mux);
    dlock__endpoint_destroy(&p->ep);
    pthread_mutex_destroy(&p->mu);
}

void dlock__pool_name(const dlock__pool *p, char *out, size_t size)
{
    snprintf(out, size, "%s", p->ep.name);
}

dlock_status dlock__pool_connect(const dlock__pool *p, dlock__link **out)
{
    return dlock__link_open(&p->ep, out);
}

/* Borrow an idle connection or make a new one. *fresh tells whether it was
 * just made (a fresh connection failing is not a stale-connection case). */
static dlock_status pool_get(dlock__pool *p, dlock__link **out, int *fresh)
{
    pthread_mutex_lock(&p->mu);
    if (p->n_idle > 0) {
        *out = p->idle[--p->n_idle];
        pthread_mutex_unlock(&p->mu);
        *fresh = 0;
        return DLOCK_OK;
    }
    pthread_mutex_unlock(&p->mu);
    *fresh = 1;
    return dlock__link_open(&p->ep, out);
}

/* Return a connection that served its exchange. */
static void pool_put(dlock__pool *p, dlock__link *l)
{
    pthread_mutex_lock(&p->mu);
    if (p->n_idle == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 8;
        dlock__link **n = realloc(p->idle, cap * sizeof *n);
        if (!n) {
            pthread_mutex_unlock(&p->mu);
            dlock__link_free(l);
            return;
        }
        p->idle = n;
        p->cap = cap;
    }
    p->idle[p->n_idle++] = l;
    pthread_mutex_unlock(&p->mu);
}

void dlock__pool_drop_idle(dlock__pool *p)
{
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->n_idle; i++) dlock__link_free(p->idle[i]);
    p->n_idle = 0;
    pthread_mutex_unlock(&p->mu);
    dlock__mux_close_idle(&p->mux);
}

/* One exchange on a pooled connection of the caller's own; a connection
 * that failed is closed, not returned. */
static dlock_status exclusive_pipeline(dlock__pool *p, int n, const int *argcs, const char *const *const *argvs,
                                       const size_t *const *lens, redisReply **replies, int *fresh, dlock__io_fail *f)
{
    dlock__link *l;
    dlock_status st = pool_get(p, &l, fresh);
    if (st != DLOCK_OK) return st;
    st = dlock__link_pipeline(l, n, argcs, argvs, lens, replies, f);
    if (st == DLOCK_OK) pool_put(p, l);
    else dlock__link_free(l);
    return st;
}

dlock_status dlock__pool_pipeline(dlock__pool *p, int n, const int *argcs, const char *const *const *argvs,
                                  const size_t *const *lens, int flags, redisReply **replies, int *retried,
                                  dlock__io_fail *why)
{
    if (retried) *retried = 0;
    for (int attempt = 0;; attempt++) {
        int fresh = 0;
        dlock__io_fail f = {0, 0};
        dlock_status st = flags & DLOCK__IO_EXCLUSIVE
                              ? exclusive_pipeline(p, n, argcs, argvs, lens, replies, &fresh, &f)
                              : dlock__mux_pipeline(&p->mux, &p->ep, n, argcs, argvs, lens, replies, &fresh, &f);
        if (st == DLOCK_OK) return DLOCK_OK;
        /* A timeout is not retried: the server is slow or stopped, and a
         * second wait would only double the caller's delay. Nor is a
         * failure on a connection made for this very call, nor a second
         * one: the server is really gone. */
        if (st != DLOCK_ERR_CONNECT || fresh || f.timed_out || attempt > 0 || ((flags & DLOCK__IO_ONCE) && f.sent)) {
            if (why) *why = f;
            return st;
        }
        dlock__pool_drop_idle(p);
        if (retried && f.sent) *retried = 1;
    }
}
