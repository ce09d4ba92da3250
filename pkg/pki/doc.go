// Package pki creates and keeps the credentials of standalone mode: a CA, a serving
// certificate for the server, an admin client certificate in group system:masters, and the
// admin kubeconfig that uses them. Files are reused across restarts so the kubeconfig stays
// valid, and renewed when they expire soon or no longer fit the server's addresses.
package pki
