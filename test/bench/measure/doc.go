// Package measure holds the timing loops the bench commands share (test/bench,
// test/bench/tunnel), so that every path of every bench is measured the same way.
package measure
