/* One pub/sub connection per client, shared by all its waiting threads. */
#ifndef DLOCK__SUBSCRIBER_H
#define DLOCK__SUBSCRIBER_H

#include <stdint.h>

#include "dlock.h"

struct dlock__subscriber;
typedef struct dlock__sub_entry dlock__sub_entry;

struct dlock__subscriber *dlock__subscriber_start(dlock_client *client);
void dlock__subscriber_stop(struct dlock__subscriber *s);

/* Declare interest in `channel`; the subscriber thread subscribes to it if
 * no other waiter of the client has yet. NULL when out of memory. */
dlock__sub_entry *dlock__sub_join(struct dlock__subscriber *s, const char *channel);

/* Wait until the server has confirmed the subscription, or the deadline
 * (-1: none). 1 when subscribed. A waiter must not sleep on the channel
 * before this, or a release published in between would be missed. */
int dlock__sub_wait_ready(struct dlock__subscriber *s, dlock__sub_entry *e, int64_t deadline_ms);

/* Sleep until a message on the channel wakes this thread (1) or the
 * deadline passes (0). Each message wakes as many threads as it names. */
int dlock__sub_wait(struct dlock__subscriber *s, dlock__sub_entry *e, int64_t deadline_ms);

/* Drop interest; the channel is unsubscribed after a short idle time so a
 * busy lock does not pay SUBSCRIBE/UNSUBSCRIBE on every wait. */
void dlock__sub_leave(struct dlock__subscriber *s, dlock__sub_entry *e);

#endif
