/*
 * The lock protocol of dlock (src/lua/acquire.lua, release.lua,
 * renew.lua, waiter_leave.lua; src/handle.c, src/watchdog.c, src/wait.c,
 * src/subscriber.c, src/conn.c), as a Promela model for Spin.
 * docs/design/model.md says what it covers, what it leaves out and why;
 * model/check.sh runs it and its mutants.
 *
 * Actors: NC clients (each with its main connection, its watchdog's
 * connection and its pub/sub link), one server, a clock and a source of
 * faults. Each script runs as one atomic step of the server, as Redis runs
 * a script alone. Messages sit on their connection until the server (or
 * the client) takes them, so they are delayed arbitrarily and reordered
 * across connections; a broken connection loses what was on it, and the
 * client sends its call once more with the same arguments (src/conn.c).
 * A client may stall for any number of ticks between any two of its
 * steps (a pause): nothing forces it to move.
 *
 * Time is discrete. Every tick advances each client's monotonic clock by
 * one and the server's clock by one, or by two (the server running fast)
 * at most once in any LEASE consecutive ticks: the drift allowance, DRIFT
 * ticks a lease. Clocks are kept as what is left: a lease's ticks on the
 * server, a hold's trusted ticks on its client, so the state stays finite
 * however long the run.
 *
 * Mutants (spin -DMUTANT_M1 ... ): each removes one rule of the protocol,
 * and model/check.sh expects each to fail the property named beside it.
 *   M1  trusted time counted from the reply, not the send       (P1)
 *   M2  the release (and its hand-off) without the owner check  (P1)
 *   M3  the resend without its operation id: the scripts count
 *       holds on the server instead of taking the caller's count (P4)
 *   M4  no give-back of an answer at or after the trusted time  (P1)
 *   M5  the release removes the waiter it picked but tells it
 *       nothing (no wake-up, no hand-off message)               (P3)
 *   M6  the trusted time without the drift allowance            (P1)
 */

#ifndef NC
#define NC 2            /* clients, 2 or 3 */
#endif
#ifndef ROUNDS
#define ROUNDS 1        /* acquisitions each client makes */
#endif
#ifndef LEASE
#define LEASE 5         /* the lease, in server ticks */
#endif
#ifndef MARGIN
#define MARGIN 0        /* the safety margin, client ticks (0: the tightest case) */
#endif
#ifndef BREAKS
#define BREAKS 1        /* broken connections in a run */
#endif
#ifndef RESTARTS
#define RESTARTS 1      /* server restarts in a run, either kind */
#endif
#ifndef GIVEUPS
#define GIVEUPS 1       /* waits a client gives up (its deadline) */
#endif
#ifndef REENTER
#define REENTER 1       /* re-entries a client makes in a run */
#endif
/* NOWATCHDOG: explicit leases only, no renewals (a smaller state space). */
#define DRIFT 1         /* extra server ticks in LEASE consecutive ticks */
#ifdef MUTANT_M6
#define TRUST (LEASE - MARGIN)
#else
#define TRUST (LEASE - MARGIN - DRIFT) /* dlock__lease_trust_ms */
#endif
#define FRESH (TRUST / 2) /* a hand-off is taken while younger (lock.c hand_begin) */
#define RESV 1          /* ticks a woken process has the free lock to itself */

/* Client states (cst[c]). */
#define IDLE      0
#define ACQ_OUT   1     /* a first-hold attempt in flight */
#define WAIT      2     /* asleep, registered, waiting to be woken or handed */
#define HELD      3
#define REENT_OUT 4     /* a re-entry in flight */
#define REL_OUT   5     /* a release in flight */
#define LEAVE_OUT 6     /* waiter_leave.lua in flight */
#define GB_OUT    7     /* a give-back (release of a hold not believed) */
#define DONE      8

/* Calls on the main connection (OP_ACQ, ...: mtype for the trail). */
mtype = { OP_ACQ, OP_REL, OP_LEAVE };

/* Connection states (mst, wst). */
#define C_NONE  0
#define C_REQ   1       /* the request is on its way (has not run) */
#define C_REP   2       /* it ran; the reply is on its way */
#define C_BROKE 3       /* the connection broke: the client resends or fails */

/* Release results. */
#define R_NOTOWN 255    /* -1 */
#define R_OWN    254    /* -2: a waiter of the caller's own process */

/* Pub/sub messages. */
#define P_WAKE 1
#define P_HAND 2

/* ---- the server's keys ---------------------------------------------- */
byte owner;             /* dlock:{n} owner: 0 none, else client + 1 */
byte cnt;               /* its count */
byte tok;               /* its token */
byte ttl;               /* its lease left, server ticks */
byte fence;             /* dlock:{n}:fence; its clock floor outlives a restart (model.md) */
byte resv;              /* dlock:{n}:r: the woken process, client + 1 */
byte resvttl;
bit reg[NC];            /* dlock:{n}:w: registered waiting processes */
bit off[NC];            /* dlock:{n}:o: their offers ... */
byte offtr[NC];         /* ... <sent>: the offering attempt's trusted ticks left */
byte offwid[NC];        /* ... <wait id> */

/* ---- connections ---------------------------------------------------- */
byte mst[NC];           /* the main connection */
mtype mop[NC];
byte marg[NC];          /* ARGV[3]: holds the caller has before the call */
bit mwait[NC];          /* the attempt registers its process and offers */
bit mtry[NC];           /* sent once more already */
byte ptr[NC];           /* trusted ticks left, counted from the call's send */
byte rcode[NC];         /* the reply: acquire 0 busy, 1 granted, 2 re-entered; release left */
byte rtok[NC];
byte wst[NC];           /* the watchdog's connection (renew.lua) */
bit wres[NC];
byte wtr[NC];           /* trusted ticks left, counted from the renewal's send */
bit wstale[NC];         /* the hold it renews has ended: its answer is ignored */
byte pub[NC];           /* the message on its way on the pub/sub link */
byte ptok[NC];
byte phtr[NC];          /* a hand-off's <sent>, as trusted ticks left */
byte pwid[NC];
bit sub[NC];            /* subscribed to its channel (PUBSUB NUMSUB > 0) */

/* ---- the clients ------------------------------------------------------ */
byte cst[NC];
byte hcnt[NC];          /* holds the client believes it has */
byte htok[NC];
byte trust[NC];         /* trusted ticks left: believed while > 0 */
byte wid[NC];           /* the current wait's id */

/* ---- time and faults ------------------------------------------------ */
byte xgap = LEASE;      /* ticks since the server's clock last ran fast */
byte breaks, restarts;

/* ---- ghosts for the properties -------------------------------------- */
byte nloss;             /* server state losses so far */
byte aloss[NC];         /* nloss when the client's acquisition began */
byte endmax;            /* the highest token of a hold that has ended */
byte efloor[NC];        /* endmax when the client's acquisition began */

#define min(a, b) ((a) < (b) -> (a) : (b))
#define believes(d) (hcnt[d] > 0 && trust[d] > 0)

/* P1: when a hold begins, no other client believes it holds the lock,
 * unless the server lost its state after the earlier of the two
 * acquisitions began (tests/torture/check.c, explains()). A pause needs no
 * exception here: belief is by the holder's clock, which runs on while it
 * is stopped. P2: a hold's token is above that of every hold that had
 * ended when its acquisition began (check.c, check_tokens()). */
inline hold_begins(c, t, since, floor) {
    for (i : 0 .. NC - 1) {
        if
        :: i != c && believes(i) && nloss <= min(since, aloss[i]) ->
            printf("P1 VIOLATED: C%d begins a hold while C%d believes it holds the lock\n", c, i);
            assert(false)
        :: else
        fi
    }
    i = 0;
    if
    :: t <= floor && t != htok[c] -> /* not a re-entry of its own hold */
        printf("P2 VIOLATED: C%d's token %d is not above %d, of a hold that ended before it asked\n", c, t, floor);
        assert(false)
    :: else
    fi
}

inline hold_ends(c) {
    if
    :: htok[c] > endmax -> endmax = htok[c]
    :: else
    fi;
    trust[c] = 0;
    wstale[c] = 1
}

inline call(c, op, before, waits) {
    mop[c] = op;
    marg[c] = before;
    mwait[c] = waits;
    mtry[c] = 0;
    ptr[c] = TRUST;
    mst[c] = C_REQ;
    printf("C%d: sends %e (holds %d)\n", c, op, before)
}

inline grant(c) {
    fence++;
    owner = c + 1;
    cnt = 1;
    tok = fence;
    ttl = LEASE
}

/* What no step will read again is set to 0, so that states differing
 * only in it are one state. */
inline tidy(k) {
    if
    :: mst[k] == C_NONE ->
        mop[k] = 0; marg[k] = 0; mwait[k] = 0; mtry[k] = 0; ptr[k] = 0; rcode[k] = 0; rtok[k] = 0
    :: mst[k] == C_REQ || mst[k] == C_BROKE -> rcode[k] = 0; rtok[k] = 0
    :: else
    fi;
    if :: mop[k] != OP_ACQ -> ptr[k] = 0 :: else fi;
    if
    :: wst[k] == C_NONE || wst[k] == C_BROKE -> wtr[k] = 0; wres[k] = 0; wstale[k] = 0
    :: wst[k] == C_REQ -> wres[k] = 0
    :: else
    fi;
    if :: pub[k] != P_HAND -> ptok[k] = 0; phtr[k] = 0; pwid[k] = 0 :: else fi;
    if :: !off[k] -> offtr[k] = 0; offwid[k] = 0 :: else fi;
    if :: hcnt[k] == 0 -> htok[k] = 0; trust[k] = 0 :: else fi;
    if
    :: cst[k] == IDLE || cst[k] == DONE || cst[k] == GB_OUT || cst[k] == LEAVE_OUT -> aloss[k] = 0; efloor[k] = 0
    :: else
    fi;
    if :: owner == 0 -> ttl = 0; cnt = 0; tok = 0 :: else fi;
    if :: resv == 0 -> resvttl = 0 :: else fi
}

inline tidy_all() {
    for (i : 0 .. NC - 1) { tidy(i) }
    i = 0
}

/* ---- the server ----------------------------------------------------- */

/* acquire.lua for client c; mine: ARGV[3] > 0. */
inline acquire(c) {
    busy = 0;
    if
#ifdef MUTANT_M3
    :: owner == c + 1 ->
        cnt++;
#else
    :: owner == c + 1 && marg[c] > 0 ->
        cnt = marg[c] + 1;
#endif
        ttl = LEASE;
        rcode[c] = 2;
        rtok[c] = tok;
        printf("S: acquire by C%d (holds %d): re-entered, count %d\n", c, marg[c], cnt);
        if
        :: cnt != marg[c] + 1 ->
            printf("P4 VIOLATED: C%d's acquire (holds %d) left the count at %d\n", c, marg[c], cnt);
            assert(false)
        :: else
        fi
    :: else ->
        if
        :: owner != 0 && owner != c + 1 -> busy = 1
        :: owner == 0 || owner == c + 1 ->
            if
            :: resv != 0 && resv != c + 1 -> busy = 1
            :: resv == c + 1 -> resv = 0
            :: else
            fi
        fi;
        if
        :: mwait[c] && busy ->
            reg[c] = 1;
            off[c] = 1;
            offtr[c] = ptr[c];
            offwid[c] = wid[c]
        :: mwait[c] && !busy ->
            reg[c] = 0;
            off[c] = 0
        :: else
        fi;
        if
        :: busy -> rcode[c] = 0; printf("S: acquire by C%d (holds %d): busy\n", c, marg[c])
        :: else ->
            grant(c);           /* afresh, count 1: also a resend, or a re-entry after expiry */
            rcode[c] = 1;
            rtok[c] = tok;
            printf("S: acquire by C%d (holds %d): granted, token %d\n", c, marg[c], tok)
        fi
    fi
}

/* release.lua for client c (one process, one thread: no waiter of the
 * caller's own process to hand to, ARGV[7] "0"). */
inline release(c) {
    if
#ifndef MUTANT_M2
    :: owner != c + 1 -> rcode[c] = R_NOTOWN; printf("S: release by C%d: not the owner\n", c)
    :: else ->
#else
    :: true ->
#endif
#ifdef MUTANT_M3
        left = (cnt > 0 -> cnt - 1 : 0);
#else
        left = marg[c] - 1;
#endif
        if
        :: left > 0 ->
            cnt = left;
            ttl = LEASE;
            rcode[c] = left;
            printf("S: release by C%d (holds %d): %d left\n", c, marg[c], left);
            if
            :: left != marg[c] - 1 ->
                printf("P4 VIOLATED: C%d's release (holds %d) left the count at %d\n", c, marg[c], left);
                assert(false)
            :: else
            fi
        :: else ->
            printf("S: release by C%d (holds %d): deleted\n", c, marg[c]);
            owner = 0;
            cnt = 0;
            rcode[c] = 0;
            tries = 0;
            do
            :: tries < NC ->
                tries++;
                /* any registered waiter: the set's order is by time,
                 * which the model leaves open */
                if
                :: reg[0] -> w = 0
                :: reg[1] -> w = 1
#if NC > 2
                :: reg[2] -> w = 2
#endif
                :: else -> break
                fi;
                reg[w] = 0;
                hadoff = off[w];
                off[w] = 0;
                if
                :: w == c ->
                    resv = c + 1;
                    resvttl = RESV;
                    rcode[c] = R_OWN;
                    break
                :: else
                fi;
                if
                :: hadoff && sub[w] ->
                    grant(w);   /* the hand-off (lib/handoff.lua) */
                    printf("S: ... handed to C%d, token %d\n", w, tok);
#ifndef MUTANT_M5
                    pub[w] = P_HAND;
                    ptok[w] = tok;
                    phtr[w] = offtr[w];
                    pwid[w] = offwid[w];
#endif
                    break
                :: else
                fi;
                resv = w + 1;
                resvttl = RESV;
                printf("S: ... C%d woken (listens: %d)\n", w, sub[w]);
                if
                :: sub[w] ->
#ifndef MUTANT_M5
                    pub[w] = P_WAKE;
#endif
                    break
                :: else -> resv = 0     /* nobody listens: the next one */
                fi
            :: else -> break
            od
        fi
    fi
}

/* waiter_leave.lua: the process's only waiter leaves and takes its offer. */
inline leave(c) {
    printf("S: waiter_leave by C%d\n", c);
    reg[c] = 0;
    off[c] = 0;
    rcode[c] = 0
}

inline serve_main(k) {
    if
    :: mop[k] == OP_ACQ -> acquire(k)
    :: mop[k] == OP_REL -> release(k)
    :: mop[k] == OP_LEAVE -> leave(k)
    fi;
    mst[k] = C_REP;
    w = 0; left = 0; tries = 0; busy = 0; hadoff = 0;
    tidy_all()
}

/* renew.lua: only the owner's lease is set again. */
inline serve_renew(k) {
    if
    :: owner == k + 1 -> ttl = LEASE; wres[k] = 1; printf("S: renew by C%d: 1\n", k)
    :: else -> wres[k] = 0; printf("S: renew by C%d: 0\n", k)
    fi;
    wst[k] = C_REP;
    tidy(k)
}

proctype Server() {
    byte w, left, tries, i;
    bit busy, hadoff;
end_server:
    do
    :: atomic { mst[0] == C_REQ -> serve_main(0) }
    :: atomic { mst[1] == C_REQ -> serve_main(1) }
#if NC > 2
    :: atomic { mst[2] == C_REQ -> serve_main(2) }
#endif
#ifndef LIVE
    :: atomic { wst[0] == C_REQ -> serve_renew(0) }
    :: atomic { wst[1] == C_REQ -> serve_renew(1) }
#if NC > 2
    :: atomic { wst[2] == C_REQ -> serve_renew(2) }
#endif
#endif
    od
}

/* ---- a client ------------------------------------------------------- */

proctype Client(byte c) {
    byte rounds, gu, re, i, ralos, rfloor;
end_client:
    do
    /* An acquisition that will wait: subscribed first, its attempts
     * register the process and offer. */
    :: atomic { cst[c] == IDLE && rounds < ROUNDS ->
        rounds++;
        aloss[c] = nloss;
        efloor[c] = endmax;
        wid[c] = (wid[c] + 1) % 4;
        sub[c] = 1;
        call(c, OP_ACQ, 0, 1);
        cst[c] = ACQ_OUT; tidy(c) }
    :: atomic { cst[c] == IDLE && rounds == ROUNDS -> cst[c] = DONE; tidy(c) }

    /* The main connection broke: send once more, or the call fails. */
    :: atomic { mst[c] == C_BROKE && !mtry[c] -> mtry[c] = 1; mst[c] = C_REQ; printf("C%d: sends it once more\n", c); tidy(c) }
    :: atomic { mst[c] == C_BROKE && mtry[c] ->
        mst[c] = C_NONE;
        printf("C%d: the call failed (connection)\n", c);
        if
        :: cst[c] == ACQ_OUT -> sub[c] = 0; cst[c] = IDLE  /* failed; a hold it may have runs out */
        :: cst[c] == REENT_OUT || cst[c] == REL_OUT -> cst[c] = HELD
        :: cst[c] == LEAVE_OUT || cst[c] == GB_OUT -> cst[c] = IDLE
        fi; tidy(c) }

    /* A first-hold attempt answered: dlock__held_begin. */
    :: atomic { cst[c] == ACQ_OUT && mst[c] == C_REP ->
        mst[c] = C_NONE;
        if
        :: rcode[c] == 0 -> cst[c] = WAIT; printf("C%d: busy, sleeps\n", c)
        :: rcode[c] != 0 ->
            sub[c] = 0;
            if
#ifndef MUTANT_M4
            :: ptr[c] == 0 ->
                /* answered at or after its trusted time: given back */
                printf("C%d: granted token %d past its trusted time: gives it back\n", c, rtok[c]);
                hcnt[c] = 0;
                call(c, OP_REL, 1, 0);
                cst[c] = GB_OUT
            :: else ->
#else
            :: true ->
#endif
#ifdef MUTANT_M1
                trust[c] = TRUST;
#else
                trust[c] = ptr[c];
#endif
                printf("C%d: HOLDS token %d, trusted %d more ticks\n", c, rtok[c], trust[c]);
                hold_begins(c, rtok[c], aloss[c], efloor[c]);
                hcnt[c] = 1;
                htok[c] = rtok[c];
                cst[c] = HELD
            fi
        fi; tidy(c) }

    /* Asleep: a wake-up, a hand-off, a timed retry, or the deadline. */
    :: atomic { cst[c] == WAIT && pub[c] == P_WAKE ->
        pub[c] = 0;
        call(c, OP_ACQ, 0, 1);
        cst[c] = ACQ_OUT; tidy(c) }
    :: atomic { cst[c] == WAIT && pub[c] == P_HAND ->
        pub[c] = 0;
        if
        :: pwid[c] != wid[c] -> skip    /* for a wait that is over: dropped */
        :: pwid[c] == wid[c] && TRUST - phtr[c] >= FRESH ->
            call(c, OP_ACQ, 0, 1);      /* stale: tried instead (wait.c hand_taken) */
            cst[c] = ACQ_OUT
        :: pwid[c] == wid[c] && TRUST - phtr[c] < FRESH ->
            sub[c] = 0;
            if
#ifndef MUTANT_M4
            :: phtr[c] == 0 ->
                printf("C%d: handed token %d past its trusted time: gives it back\n", c, ptok[c]);
                hcnt[c] = 0;
                call(c, OP_REL, 1, 0);
                cst[c] = GB_OUT
            :: else ->
#else
            :: true ->
#endif
#ifdef MUTANT_M1
                trust[c] = TRUST;
#else
                trust[c] = phtr[c];
#endif
                printf("C%d: HANDED token %d, trusted %d more ticks\n", c, ptok[c], trust[c]);
                hold_begins(c, ptok[c], aloss[c], efloor[c]);
                hcnt[c] = 1;
                htok[c] = ptok[c];
                cst[c] = HELD
            fi
        fi; tidy(c) }
#ifndef LIVE
    :: atomic { cst[c] == WAIT && pub[c] == 0 ->
        call(c, OP_ACQ, 0, 1);          /* the timed retry (pttl), at any time */
        cst[c] = ACQ_OUT; tidy(c) }
    :: atomic { cst[c] == WAIT && gu < GIVEUPS ->
        gu++;
        sub[c] = 0;
        call(c, OP_LEAVE, 0, 0);        /* the deadline: leave, then give back */
        cst[c] = LEAVE_OUT; tidy(c) }
#endif
    :: atomic { cst[c] == WAIT && !sub[c] ->
        sub[c] = 1;                     /* subscribed again, and tries once */
        call(c, OP_ACQ, 0, 1);
        cst[c] = ACQ_OUT; tidy(c) }
    /* A message when no wait is on (or an old one's): dropped. */
    :: atomic { pub[c] != 0 && cst[c] != WAIT && cst[c] != ACQ_OUT -> pub[c] = 0; tidy(c) }

    :: atomic { cst[c] == LEAVE_OUT && mst[c] == C_REP ->
        mst[c] = C_NONE;
        call(c, OP_REL, 1, 0);          /* give_back: a hand-off may be on its way */
        cst[c] = GB_OUT; tidy(c) }
    :: atomic { cst[c] == GB_OUT && mst[c] == C_REP -> mst[c] = C_NONE; cst[c] = IDLE; tidy(c) }

    /* Holding: re-enter, release, or see the hold lost. */
    :: atomic { cst[c] == HELD && re < REENTER && hcnt[c] == 1 && believes(c) ->
        re++;
        ralos = nloss;
        rfloor = endmax;
        call(c, OP_ACQ, hcnt[c], 0);
        cst[c] = REENT_OUT; tidy(c) }
    :: atomic { cst[c] == REENT_OUT && mst[c] == C_REP ->
        mst[c] = C_NONE;
        if
        :: rcode[c] == 0 -> skip        /* another owner: the hold is lost */
        :: rcode[c] != 0 ->
            /* a re-entry extends a hold its caller believes in; its
             * trusted time counts anew from its send */
            if
            :: ptr[c] > 0 -> printf("C%d: re-entered, token %d, trusted %d more ticks\n", c, rtok[c], ptr[c]); hold_begins(c, rtok[c], ralos, rfloor)
            :: else
            fi;
            hcnt[c] = (rcode[c] == 1 -> 1 : hcnt[c] + 1);
            htok[c] = rtok[c];
#ifdef MUTANT_M1
            trust[c] = TRUST
#else
            trust[c] = ptr[c]
#endif
        fi;
        cst[c] = HELD; tidy(c); ralos = 0; rfloor = 0; i = 0 }
    :: atomic { cst[c] == HELD && hcnt[c] > 0 ->
        if
        :: hcnt[c] == 1 -> hold_ends(c) /* the caller stops using it before it sends */
        :: else
        fi;
        call(c, OP_REL, hcnt[c], 0);
        cst[c] = REL_OUT; tidy(c) }
    :: atomic { cst[c] == HELD && hcnt[c] > 0 && !believes(c) ->
        printf("C%d: its hold is lost (trusted time over)\n", c);
        hcnt[c] = 0;                    /* lost: ended without a script */
        hold_ends(c);
        cst[c] = IDLE; tidy(c) }
    :: atomic { cst[c] == REL_OUT && mst[c] == C_REP ->
        mst[c] = C_NONE;
        if
        :: rcode[c] == R_NOTOWN && mtry[c] && marg[c] == 1 -> hcnt[c] = 0 /* a resent last release: done */
        :: rcode[c] == R_NOTOWN && !(mtry[c] && marg[c] == 1) -> hcnt[c] = 0; hold_ends(c)
        :: rcode[c] == R_OWN -> hcnt[c] = 0
        :: rcode[c] < R_OWN -> hcnt[c] = rcode[c]
        fi;
        cst[c] = (hcnt[c] == 0 -> IDLE : HELD); tidy(c) }

#if !defined(LIVE) && !defined(NOWATCHDOG)
    /* The watchdog: renews at any time while the hold is believed. */
    :: atomic { wst[c] == C_NONE && believes(c) ->
        wtr[c] = TRUST;
        wstale[c] = 0;
        wst[c] = C_REQ;
        printf("C%d: watchdog sends renew\n", c); tidy(c) }
    :: atomic { wst[c] == C_REP ->
        wst[c] = C_NONE;
        if
        :: wstale[c] || !believes(c) -> skip
        :: else ->
            if
            :: wres[c] ->
                printf("C%d: renewed, trusted %d more ticks\n", c, wtr[c]);
#ifdef MUTANT_M1
                trust[c] = TRUST
#else
                trust[c] = wtr[c]
#endif
            :: else -> hold_ends(c); printf("C%d: renewal answered 0: lost\n", c)
            fi
        fi; tidy(c) }
    :: atomic { wst[c] == C_BROKE -> wst[c] = C_NONE; tidy(c) } /* tried again later, a new send */
#endif
    od
}

/* ---- time ----------------------------------------------------------- */

inline tick_clients() {
    for (i : 0 .. NC - 1) {
        if :: ptr[i] > 0 -> ptr[i]-- :: else fi;
        if :: wtr[i] > 0 -> wtr[i]-- :: else fi;
        if :: offtr[i] > 0 -> offtr[i]-- :: else fi;
        if :: phtr[i] > 0 -> phtr[i]-- :: else fi;
        if
        :: trust[i] > 0 ->
            trust[i]--;
            if
            :: trust[i] == 0 && hcnt[i] > 0 && htok[i] > endmax -> endmax = htok[i]
            :: else
            fi
        :: else
        fi
    }
    i = 0
}

inline tick_server(step) {
    if
    :: owner != 0 && ttl > step -> ttl = ttl - step
    :: owner != 0 && ttl <= step -> ttl = 0; owner = 0; cnt = 0
    :: else
    fi;
    if
    :: resv != 0 && resvttl > step -> resvttl = resvttl - step
    :: resv != 0 && resvttl <= step -> resvttl = 0; resv = 0
    :: else
    fi
}

proctype Clock() {
    byte i;
end_clock:
    do
    :: atomic {
        if :: xgap < LEASE -> xgap++ :: else fi;
        tick_clients();
        if
        :: tick_server(1); printf("tick\n")
        :: xgap >= LEASE -> xgap = 0; tick_server(2); printf("tick (the server's clock runs fast)\n")
        fi;
        tidy_all() }
    od
}

/* ---- faults --------------------------------------------------------- */

inline break_all() {
    for (i : 0 .. NC - 1) {
        if :: mst[i] == C_REQ || mst[i] == C_REP -> mst[i] = C_BROKE :: else fi;
        if :: wst[i] == C_REQ || wst[i] == C_REP -> wst[i] = C_BROKE :: else fi;
        sub[i] = 0;
        pub[i] = 0
    }
    i = 0
}

proctype Faults() {
    byte i;
end_faults:
    do
    :: atomic { breaks < BREAKS ->
        select(i : 0 .. NC - 1);
        if
        :: mst[i] == C_REQ || mst[i] == C_REP -> printf("F: C%d's connection breaks (%d)\n", i, mst[i]); mst[i] = C_BROKE; breaks++
        :: wst[i] == C_REQ || wst[i] == C_REP -> printf("F: C%d's watchdog connection breaks\n", i); wst[i] = C_BROKE; breaks++
        :: sub[i] -> printf("F: C%d's pub/sub link breaks\n", i); sub[i] = 0; pub[i] = 0; breaks++
        :: else
        fi;
        tidy_all() }
    :: atomic { restarts < RESTARTS ->     /* with persistence (AOF): the keys stay */
        restarts++;
        printf("F: the server restarts with its data\n");
        break_all();
        tidy_all() }
    :: atomic { restarts < RESTARTS ->     /* without: the keys are gone */
        restarts++;
        printf("F: the server restarts empty\n");
        break_all();
        owner = 0; cnt = 0; ttl = 0; resv = 0; resvttl = 0;
        for (i : 0 .. NC - 1) { reg[i] = 0; off[i] = 0 }
        nloss++;
        tidy_all() }
    od
}

init {
    byte c;
    atomic {
        for (c : 0 .. NC - 1) { run Client(c) }
        run Server();
#ifndef LIVE
        run Clock();
        run Faults();
#endif
        c = 0
    }
}

#ifdef LIVE
/* P3: a waiting client is eventually handed the lock or takes it; run
 * with weak fairness (pan -a -f). */
#if NC == 2
ltl p3 { [] ((cst[0] == WAIT -> <> (cst[0] == HELD)) && (cst[1] == WAIT -> <> (cst[1] == HELD))) }
#else
ltl p3 { [] ((cst[0] == WAIT -> <> (cst[0] == HELD)) && (cst[1] == WAIT -> <> (cst[1] == HELD)) &&
             (cst[2] == WAIT -> <> (cst[2] == HELD))) }
#endif
#endif
