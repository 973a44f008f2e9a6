/*
 * shmatari/shmatari.h -- attach to a running shmatari env pool from C or C++.
 *
 * Header-only, C11 or C++11, POSIX (Linux, macOS). No Python is needed on
 * the client side: `shmatari serve GAME --name NAME` runs the emulators, and
 * this header maps the pool's shared-memory segment and drives it through
 * its words, with the same protocol (and the same functions) as shmatari's
 * own Python client. The layout is in shmatari/layout.h, the waits in
 * shmatari/sync.h; docs/layout.md describes both field by field.
 *
 * Build: C:   cc -std=gnu11 -I csrc/include my_trainer.c
 *             (with -std=c11, include this header before any other, so
 *             that it can ask for the POSIX declarations it uses)
 *        C++: g++ -std=c++17 -I csrc/include my_trainer.cpp
 * On glibc older than 2.34 and on other systems, shm_open may need -lrt.
 *
 * Use:
 *   shmatari_client c;
 *   if (shmatari_attach(&c, "demo", 10 * SHMATARI_SECOND) != SHMATARI_OK) {
 *     fprintf(stderr, "%s\n", c.error);  // the code's meaning, and what to do
 *     return 1;
 *   }
 *   shmatari_reset(&c);                   // every env; results come as a batch
 *   shmatari_batch b;
 *   int r;
 *   do r = shmatari_wait(&c, &b, 10 * SHMATARI_SECOND);  // first observations
 *   while (r == SHMATARI_ERR_TIMEOUT || r == SHMATARI_ERR_INTERRUPTED);
 *   while (r == SHMATARI_OK) {
 *     // b.obs, b.reward, ... stay valid until the next wait or reset
 *     shmatari_send(&c, actions, b.env_id, b.size);  // the batch's envs again
 *     r = shmatari_wait(&c, &b, 10 * SHMATARI_SECOND);
 *   }
 *   // a failed wait leaves b cleared (size 0, NULL arrays); c.error says why
 *   shmatari_detach(&c);
 *
 * Rules (MUST / SHOULD / MAY as in RFC 2119):
 *   - One client at a time. shmatari_attach claims the pool by writing its
 *     pid into client_pid with a compare-and-swap; it fails with
 *     SHMATARI_ERR_BUSY, naming the holder's pid, while another live
 *     process holds it. A claim left by a dead process is taken over.
 *   - On attach, the client makes the pool consistent (shmatari_recover):
 *     it waits until every command a previous client posted has been
 *     answered, then drops every result nobody took. A new client MUST
 *     reset every env before stepping them (shmatari_send refuses until
 *     then).
 *   - The client is a state machine (enum shmatari_client_state; Python's
 *     client wraps these same functions): a call out of order changes
 *     nothing and returns SHMATARI_ERR_STATE, and c->error names the state
 *     and the call that leaves it. A client MUST NOT post to an env whose
 *     result it has not received (shmatari_send refuses); shmatari_reset
 *     is the way back from every state but a broken pool (it drops what is
 *     in flight first).
 *   - Every wait has a timeout and checks, at least every 100 ms, that the
 *     server and its workers are alive: a dead server gives
 *     SHMATARI_ERR_SERVER_DEAD within the wait's timeout, never a hang. In
 *     a first-ready pool a worker alive but silent (stopped, stuck) for the
 *     timeout ends the wait with SHMATARI_ERR_TIMEOUT and c.stalled set,
 *     while the others' results still fill batches (a trainer that waits
 *     in slices passes its whole limit to shmatari_wait_within).
 *     Liveness is judged by process id (the server's with its start time,
 *     shmatari_owner_alive), so client and server MUST share a PID
 *     namespace (and /dev/shm).
 *   - A shmatari_client is used by one thread at a time.
 *   - Read once: any process of the user may write the segment at any time.
 *     Every value the client takes from it, or from a caller's pointer that
 *     may point into it (b.env_id above), is copied to private memory once,
 *     then checked, then used from the copy (docs/layout.md, "Trust").
 */
#ifndef SHMATARI_H
#define SHMATARI_H

/* The client in parts, one concern each (each part includes the ones it
 * builds on): */
#include "shmatari/status.h"       /* status codes, limits, messages */
#include "shmatari/liveness.h"     /* processes by pid + start time */
#include "shmatari/geometry.h"     /* the checked geometry of a segment */
#include "shmatari/pool.h"         /* pool checks, bounded waits, claim */
#include "shmatari/protocol.h"     /* recover, drain, post, wait, consume */
#include "shmatari/client_state.h" /* the client state machine */
#include "shmatari/attach.h"       /* attach by name, trust, detach */
#include "shmatari/client.h"       /* send, reset, wait */

#endif /* SHMATARI_H */
