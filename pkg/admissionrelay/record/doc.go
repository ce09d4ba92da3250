// Package record defines what the proxy writes into a target's webhook configurations for the
// admission relay (the relay record annotation, relay paths), so that the proxy and the relay
// agree without depending on each other.
package record
