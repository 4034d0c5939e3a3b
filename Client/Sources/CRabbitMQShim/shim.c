#include "CRabbitMQShim.h"

#include <amqp_ssl_socket.h>
#include <errno.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
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

int crabbitmq_ssl_socket_set_cacert_pem(amqp_socket_t *socket, const void *pem, size_t length) {
    SSL_CTX *context = amqp_ssl_socket_get_context(socket);
    if (context == NULL || length > INT_MAX) {
        return AMQP_STATUS_SSL_ERROR;
    }
    X509_STORE *store = SSL_CTX_get_cert_store(context);
    BIO *bio = BIO_new_mem_buf(pem, (int)length);
    if (store == NULL || bio == NULL) {
        BIO_free(bio);
        return AMQP_STATUS_SSL_ERROR;
    }
    int added = 0;
    X509 *certificate;
    while ((certificate = PEM_read_bio_X509(bio, NULL, NULL, NULL)) != NULL) {
        if (X509_STORE_add_cert(store, certificate) == 1) {
            added += 1;
        }
        X509_free(certificate);
    }
    // The loop ends on "no start line" at the end of the bytes: not an error to leave for the
    // next TLS call on this thread to report.
    ERR_clear_error();
    BIO_free(bio);
    return added > 0 ? AMQP_STATUS_OK : AMQP_STATUS_SSL_ERROR;
}
