// Package applyerrors answers a server-side apply whose patch does not fit the schema (a
// caller's typo) with 400 BadRequest, as the caller's fault: the apply handler returns the
// field manager's plain error, which the API machinery answers with 500 and logs as "Unhandled
// Error", an error an operator cannot act on.
package applyerrors
