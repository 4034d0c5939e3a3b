// librabbitmq 0.11 as Debian ships it: headers at the top of /usr/include.
#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>
#include <amqp_ssl_socket.h>
