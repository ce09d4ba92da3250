// Package validation checks Mounts (internal types) on create, update and status update and
// returns field-path errors that the API turns into 422 responses.
package validation
