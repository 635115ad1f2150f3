package faultproxy

import (
	"net"
	"time"
)

// ListenDialing is Listen with the dial to the target replaced, so that a
// test can hold a connection between its accept and its dial.
func ListenDialing(target string, dial func(network, addr string, timeout time.Duration) (net.Conn, error)) (*Proxy, error) {
	return listen(target, dial)
}
