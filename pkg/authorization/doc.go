// Package authorization is the standalone server's built-in authorization: it has no RBAC API,
// so it grants fixed roles by group. Admins may do everything (lending included), editors may
// manage mounts and Secrets and proxy, viewers may read mounts and proxy reads; every
// authenticated user may read discovery. docs/users.md lists them.
package authorization
