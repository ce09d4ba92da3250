// Package targetpolicy decides which targets a Mount may name, so that the proxy, which lends
// a mount's credentials and this server's network position to tenants, cannot be aimed at
// what the operator did not mean to expose.
//
// A target is refused when its URL is plain http (unless allowed), when its host or the
// address actually connected to is link-local or a well-known cloud metadata address, one of
// this server's own endpoints (its secure port, its embedded etcd), or on the operator's
// deny list, or when an allow list is set and it is on none of its entries; and when the
// target presents this server's own serving certificate, which catches any name, address or
// relay that routes back to this server. Deny wins over allow.
//
// Checks run where each fact is known: CheckURL when a transport is built and at admission
// (scheme, and the host when it is an address or a listed name); CheckConnection at dial
// time on the IP and port being connected to (DNS may answer differently each time);
// CheckPeerCertificate during the TLS handshake. Everything here is parsing and checking,
// without I/O, except the default IsLocal, which lists the host's interface addresses.
package targetpolicy
