// Package options holds the command-line options of mount-apiserver and turns them, through
// Complete and Validate, into the server's Config.
package options
