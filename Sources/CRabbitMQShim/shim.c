#include "CRabbitMQShim.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

amqp_rpc_reply_t crabbitmq_login_with_properties(amqp_connection_state_t state,
                                                 const char *vhost, int channel_max,
                                                 int frame_max, int heartbeat,
                                                 const amqp_table_t *properties,
                                                 const char *user, const char *password) {
    return amqp_login_with_properties(state, vhost, channel_max, frame_max, heartbeat,
                                      properties, AMQP_SASL_METHOD_PLAIN, user, password);
}

int crabbitmq_wakeup_create(void) {
    return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

void crabbitmq_wakeup_signal(int wakefd) {
    uint64_t one = 1;
    // EAGAIN means the counter is already non-zero: the owner thread will wake anyway.
    ssize_t ignored = write(wakefd, &one, sizeof one);
    (void)ignored;
}

void crabbitmq_wakeup_drain(int wakefd) {
    uint64_t value;
    ssize_t ignored = read(wakefd, &value, sizeof value);
    (void)ignored;
}

void crabbitmq_wakeup_close(int wakefd) {
    close(wakefd);
}

int crabbitmq_wait_readable(int sockfd, int wakefd, int timeout_ms) {
    struct pollfd fds[2];
    nfds_t count = 0;
    int socket_index = -1;
    if (sockfd >= 0) {
        fds[count].fd = sockfd;
        fds[count].events = POLLIN;
        fds[count].revents = 0;
        socket_index = (int)count;
        count++;
    }
    fds[count].fd = wakefd;
    fds[count].events = POLLIN;
    fds[count].revents = 0;
    int wake_index = (int)count;
    count++;
    int rc = poll(fds, count, timeout_ms);
    if (rc < 0) return errno == EINTR ? 0 : -1;
    int result = 0;
    if (socket_index >= 0 && fds[socket_index].revents != 0) result |= 1;
    if (fds[wake_index].revents != 0) result |= 2;
    return result;
}
