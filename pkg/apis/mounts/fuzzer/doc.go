// Package fuzzer fills Mounts with random, already-defaulted content for the API round-trip
// tests.
package fuzzer
