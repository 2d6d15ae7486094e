/*
 * The waiting loop behind every blocking acquire.
 *
 * Order matters: join the channel, wait until the subscription is
 * confirmed, try once more, and only then sleep. A release published
 * between the caller's first attempt and the subscription is caught by the
 * retry; one published after it wakes the sleeper. Sleeps are bounded by
 * how long the current holder can keep the resource (its remaining lease),
 * so a message lost with a broken connection costs at most that. Where no
 * such bound exists (a plain semaphore) a safety net of a few seconds
 * applies instead.
 */
#include "wait.h"

#include "client.h"
#include "subscriber.h"
#include "util.h"

#define UNSUBSCRIBED_POLL_MS DLOCK__WAIT_UNSUBSCRIBED_POLL_MS
#define SAFETY_NET_MS DLOCK__WAIT_SAFETY_NET_MS

int dlock__wait_for(dlock_client *client, dlock_stats_kind kind, const char *channel, int64_t deadline_ms,
                   dlock__try_fn try, void *ctx, int first, long retry_ms)
{
    struct dlock__subscriber *sub = dlock__client_subscriber(client);
    if (!sub) return dlock__fail(DLOCK_ERR_SYS, "cannot start the subscriber thread");
    dlock__sub_entry *e = dlock__sub_join(sub, channel);
    if (!e) return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    int result = first;
    long backoff = 0;
    for (;;) {
        int64_t now = dlock__mono_ms();
        if (deadline_ms >= 0 && now >= deadline_ms) break;
        int64_t ready_by = now + 1000;
        if (deadline_ms >= 0 && ready_by > deadline_ms) ready_by = deadline_ms;
        int subscribed = dlock__sub_wait_ready(sub, e, ready_by);

        result = try(ctx, &retry_ms);
        now = dlock__mono_ms();
        int64_t until;
        if (result == DLOCK_OK) {
            break;
        } else if (result == DLOCK_ERR_CONNECT) {
            backoff = dlock__wait_backoff(backoff);
            until = now + backoff;
        } else if (result != DLOCK__BUSY) {
            break;
        } else {
            backoff = 0;
            until = now + (retry_ms >= 0 && retry_ms < SAFETY_NET_MS ? retry_ms : SAFETY_NET_MS);
            if (!subscribed && until > now + UNSUBSCRIBED_POLL_MS) until = now + UNSUBSCRIBED_POLL_MS;
        }
        if (deadline_ms >= 0 && until > deadline_ms) until = deadline_ms;
        if (until > now && dlock__sub_wait(sub, e, until)) dlock__stats_woken(&client->stats, kind);
    }
    dlock__sub_leave(sub, e);
    return result;
}
