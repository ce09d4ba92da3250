// Package logging keeps credentials out of the server's log: contexts whose logger never
// reaches the verbosity at which client-go writes request and response bodies, for the calls
// that carry credentials, such as the reads of the Secrets that mounts lend.
package logging
