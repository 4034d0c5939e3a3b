#include "CRabbitMQShim.h"

amqp_rpc_reply_t crabbitmq_login_with_properties(amqp_connection_state_t state,
                                                 const char *vhost, int channel_max,
                                                 int frame_max, int heartbeat,
                                                 const amqp_table_t *properties,
                                                 const char *user, const char *password) {
    return amqp_login_with_properties(state, vhost, channel_max, frame_max, heartbeat,
                                      properties, AMQP_SASL_METHOD_PLAIN, user, password);
}
