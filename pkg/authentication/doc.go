// Package authentication saves the server from verifying a client certificate's chain on every
// request. Clients keep their TLS (HTTP/2) connections, and the certificate of a connection
// does not change, but the generic apiserver's x509 and requestheader authenticators verify it
// again for each request: about 0.22 ms of CPU per proxied GET in a profile on the development
// machine.
package authentication
