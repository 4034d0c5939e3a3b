// amqp-c-loop: the baseline for `apns-worker-bench amqp`: the same work as the Swift client
// (confirmed publishing, consume-and-ack) as a minimal single-threaded loop over librabbitmq.
//
//   amqp-c-loop publish URL QUEUE COUNT SIZE WINDOW    confirmed publishes, WINDOW in flight
//   amqp-c-loop consume URL QUEUE COUNT PREFETCH       consume COUNT messages, ack each
//
// Prints one line: `<mode> <count> messages in <seconds> s = <rate> msg/s`.
#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die_reply(amqp_rpc_reply_t reply, const char *context) {
    if (reply.reply_type == AMQP_RESPONSE_NORMAL) return;
    if (reply.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION) {
        fprintf(stderr, "%s: %s\n", context, amqp_error_string2(reply.library_error));
    } else {
        fprintf(stderr, "%s: server exception (method 0x%08x)\n", context, reply.reply.id);
    }
    exit(1);
}

static amqp_connection_state_t open_connection(const char *url_text) {
    char *copy = strdup(url_text);
    struct amqp_connection_info info;
    amqp_default_connection_info(&info);
    if (amqp_parse_url(copy, &info) != AMQP_STATUS_OK) {
        fprintf(stderr, "bad URL %s\n", url_text);
        exit(2);
    }
    amqp_connection_state_t conn = amqp_new_connection();
    amqp_socket_t *socket = amqp_tcp_socket_new(conn);
    if (!socket || amqp_socket_open(socket, info.host, info.port) != AMQP_STATUS_OK) {
        fprintf(stderr, "cannot connect to %s:%d\n", info.host, info.port);
        exit(1);
    }
    die_reply(amqp_login(conn, info.vhost, 0, 131072, 30, AMQP_SASL_METHOD_PLAIN, info.user, info.password), "login");
    amqp_channel_open(conn, 1);
    die_reply(amqp_get_rpc_reply(conn), "channel.open");
    free(copy);
    return conn;
}

static int publish(amqp_connection_state_t conn, const char *queue, long count, long size, long window) {
    amqp_confirm_select(conn, 1);
    die_reply(amqp_get_rpc_reply(conn), "confirm.select");
    char *body = malloc((size_t)size);
    memset(body, 'x', (size_t)size);
    amqp_basic_properties_t props;
    props._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG;
    props.content_type = amqp_cstring_bytes("application/json");
    props.delivery_mode = 2;
    amqp_bytes_t body_bytes = {(size_t)size, body};
    long sent = 0;
    uint64_t confirmed = 0;
    double start = now_seconds();
    while ((long)confirmed < count) {
        while (sent < count && (long)((uint64_t)sent - confirmed) < window) {
            int status = amqp_basic_publish(conn, 1, amqp_empty_bytes, amqp_cstring_bytes(queue), 1, 0, &props, body_bytes);
            if (status != AMQP_STATUS_OK) {
                fprintf(stderr, "publish: %s\n", amqp_error_string2(status));
                return 1;
            }
            sent++;
        }
        amqp_frame_t frame;
        int status = amqp_simple_wait_frame(conn, &frame);
        if (status != AMQP_STATUS_OK) {
            fprintf(stderr, "wait: %s\n", amqp_error_string2(status));
            return 1;
        }
        if (frame.frame_type == AMQP_FRAME_METHOD && frame.payload.method.id == AMQP_BASIC_ACK_METHOD) {
            amqp_basic_ack_t *ack = frame.payload.method.decoded;
            // One queue: the broker confirms in order, so the highest tag acked (single or
            // `multiple`) is the number of confirmed messages.
            if (ack->delivery_tag > confirmed) confirmed = ack->delivery_tag;
        } else if (frame.frame_type == AMQP_FRAME_METHOD) {
            fprintf(stderr, "unexpected method 0x%08x\n", frame.payload.method.id);
            return 1;
        }
        amqp_maybe_release_buffers(conn);
    }
    double elapsed = now_seconds() - start;
    printf("publish %ld messages in %.3f s = %.0f msg/s\n", count, elapsed, (double)count / elapsed);
    free(body);
    return 0;
}

static int consume(amqp_connection_state_t conn, const char *queue, long count, long prefetch) {
    amqp_basic_qos(conn, 1, 0, (uint16_t)prefetch, 0);
    die_reply(amqp_get_rpc_reply(conn), "basic.qos");
    amqp_basic_consume(conn, 1, amqp_cstring_bytes(queue), amqp_empty_bytes, 0, 0, 0, amqp_empty_table);
    die_reply(amqp_get_rpc_reply(conn), "basic.consume");
    long received = 0;
    double start = now_seconds();
    while (received < count) {
        amqp_envelope_t envelope;
        amqp_maybe_release_buffers(conn);
        amqp_rpc_reply_t reply = amqp_consume_message(conn, &envelope, NULL, 0);
        die_reply(reply, "consume");
        if (amqp_basic_ack(conn, envelope.channel, envelope.delivery_tag, 0) != AMQP_STATUS_OK) {
            fprintf(stderr, "ack failed\n");
            return 1;
        }
        amqp_destroy_envelope(&envelope);
        received++;
    }
    double elapsed = now_seconds() - start;
    printf("consume %ld messages in %.3f s = %.0f msg/s\n", count, elapsed, (double)count / elapsed);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s publish URL QUEUE COUNT SIZE WINDOW | consume URL QUEUE COUNT PREFETCH 0\n", argv[0]);
        return 2;
    }
    amqp_connection_state_t conn = open_connection(argv[2]);
    long count = atol(argv[4]);
    int rc;
    if (strcmp(argv[1], "publish") == 0) {
        rc = publish(conn, argv[3], count, atol(argv[5]), atol(argv[6]));
    } else if (strcmp(argv[1], "consume") == 0) {
        rc = consume(conn, argv[3], count, atol(argv[5]));
    } else {
        fprintf(stderr, "unknown mode %s\n", argv[1]);
        return 2;
    }
    amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(conn);
    return rc;
}
