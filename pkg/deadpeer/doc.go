// Package deadpeer gives up TCP connections to a machine that vanished (a node lost, a
// partition: no reset, no answer) within about 20 s instead of the kernel's minutes. HTTP/2
// connections have pings for that (pkg/proxy); upgraded streams (exec, attach, port-forward)
// and the hops between replicas carry bytes the server cannot ping inside, so only TCP can
// tell.
package deadpeer
