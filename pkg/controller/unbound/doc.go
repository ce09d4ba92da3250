// Package unbound removes the Mounts of logical clusters that no longer bind the APIExport
// (or no longer exist). kcp runs no garbage collection for resources served by virtual
// storage, so without it a workspace that unbinds, or is deleted, would leave its Mounts,
// and with them probes with its credentials, behind on this server for ever.
package unbound
