// Package secretaccess is the admission check that the requester who creates a URL Mount, or
// changes its reference, may get the referenced Secret on the cluster that holds it. A Mount
// lends its credentials to everyone allowed to proxy through it, so only who can read them
// may reference them.
package secretaccess
