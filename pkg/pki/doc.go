// Package pki creates and keeps the credentials of standalone mode: a CA, a serving
// certificate for the server, an admin client certificate in group mount-apiserver:admins, the
// admin kubeconfig that uses them, kubeconfigs of further users, and the key that encrypts
// Secrets at rest. Files are reused across restarts so kubeconfigs and stored Secrets stay
// valid; certificates are renewed when they expire soon or no longer fit the server's addresses.
package pki
