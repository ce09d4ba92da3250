// Package lockfile keeps a directory for one process: an exclusive flock on a file in it,
// which the kernel releases when the process ends, however it ends.
package lockfile
