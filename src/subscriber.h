/* One pub/sub connection per client, shared by all its waiting threads. */
#ifndef DLOCK_SUBSCRIBER_H
#define DLOCK_SUBSCRIBER_H

#include <stdint.h>

#include "dlock.h"

struct dlock_subscriber;
typedef struct dlock_sub_entry dlock_sub_entry;

struct dlock_subscriber *dlock_subscriber_start(dlock_client *client);
void dlock_subscriber_stop(struct dlock_subscriber *s);

/* Declare interest in `channel`; the subscriber thread subscribes to it if
 * no other waiter of the client has yet. NULL when out of memory. */
dlock_sub_entry *dlock_sub_join(struct dlock_subscriber *s, const char *channel);

/* Wait until the server has confirmed the subscription, or the deadline
 * (-1: none). 1 when subscribed. A waiter must not sleep on the channel
 * before this, or a release published in between would be missed. */
int dlock_sub_wait_ready(struct dlock_subscriber *s, dlock_sub_entry *e, int64_t deadline_ms);

/* Sleep until a message on the channel wakes this thread (1) or the
 * deadline passes (0). Each message wakes as many threads as it names. */
int dlock_sub_wait(struct dlock_subscriber *s, dlock_sub_entry *e, int64_t deadline_ms);

/* Drop interest; the channel is unsubscribed after a short idle time so a
 * busy lock does not pay SUBSCRIBE/UNSUBSCRIBE on every wait. */
void dlock_sub_leave(struct dlock_subscriber *s, dlock_sub_entry *e);

#endif
