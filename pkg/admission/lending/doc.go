// Package lending is the admission check of what a Mount lends. A Mount lends its target's
// credentials to everyone allowed to proxy through it, so creating one, or changing any field
// that decides what it lends, needs the requester to be allowed to lend exactly that: to get
// the referenced Secret, and for identity mode MountCredentials the verb "lend" on the Mount.
package lending
