// Package server is the mount-apiserver command: flags, the Options -> Config -> Server chain,
// and running until the context ends.
package server
