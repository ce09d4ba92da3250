// Package authorization holds the server's own authorizers. The standalone server has no RBAC
// API, so it grants fixed roles by group: admins may do everything (lending included), editors
// may manage mounts and Secrets and proxy, viewers may read mounts and proxy reads; every
// authenticated user may read discovery. docs/users.md lists them. In every mode, every
// authenticated user may create self reviews, and a Mount that names its agent decides who
// attaches to it (NamedAgents).
package authorization
