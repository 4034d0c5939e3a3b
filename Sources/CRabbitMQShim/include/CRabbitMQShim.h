#ifndef CRABBITMQ_SHIM_H
#define CRABBITMQ_SHIM_H
#include <amqp.h>
#include <amqp_framing.h>

// Swift cannot call C variadic functions; these wrap librabbitmq's login calls.
amqp_rpc_reply_t crabbitmq_login_with_properties(amqp_connection_state_t state,
                                                 const char *vhost, int channel_max,
                                                 int frame_max, int heartbeat,
                                                 const amqp_table_t *properties,
                                                 const char *user, const char *password);
#endif
