// Package nettest holds network stand-ins for tests: a TCP relay that goes silent as the
// connections to a node that vanished do (no reset, no answer), which loopback alone cannot
// show.
package nettest
