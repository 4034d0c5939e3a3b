#ifndef CRABBITMQ_SHIM_H
#define CRABBITMQ_SHIM_H
#include <amqp.h>
#include <amqp_framing.h>
#include <stddef.h>

// Swift cannot call C variadic functions; these wrap librabbitmq's login calls.
amqp_rpc_reply_t crabbitmq_login_with_properties(amqp_connection_state_t state,
                                                 const char *vhost, int channel_max,
                                                 int frame_max, int heartbeat,
                                                 const amqp_table_t *properties,
                                                 const char *user, const char *password);

// The owner thread of a connection sleeps in poll(2) on the broker socket and on an eventfd
// that the async side signals when it queues a command, so a command never waits for a
// polling tick and an idle connection costs no CPU.

/// A non-blocking, close-on-exec eventfd; -1 with errno on failure.
int crabbitmq_wakeup_create(void);
/// Makes the next (or current) crabbitmq_wait_readable return at once.
void crabbitmq_wakeup_signal(int wakefd);
/// Consumes pending wake-ups so the next wait sleeps again.
void crabbitmq_wakeup_drain(int wakefd);
void crabbitmq_wakeup_close(int wakefd);

/// poll(2) on the broker socket (may be -1: only the wake-up fd) and the wake-up fd.
/// Returns a bit set: 1 = socket readable (or in error: librabbitmq reports the error),
/// 2 = woken; 0 on timeout; -1 on a poll error other than EINTR.
int crabbitmq_wait_readable(int sockfd, int wakefd, int timeout_ms);
/// Trusts the PEM certificates in `pem` (`length` bytes) on a TLS socket, in place of
/// amqp_ssl_socket_set_cacert, which opens and reads a file at every connect: a CA file changed
/// on disk would take effect at the next reconnect. AMQP_STATUS_OK when at least one
/// certificate was added, AMQP_STATUS_SSL_ERROR otherwise.
int crabbitmq_ssl_socket_set_cacert_pem(amqp_socket_t *socket, const void *pem, size_t length);
#endif
