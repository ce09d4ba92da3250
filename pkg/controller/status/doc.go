// Package status is the controller that tells the truth about every Mount: it probes each
// target through the proxy's own transport and writes status.phase, the CredentialsResolved,
// TargetReachable and Ready conditions, status.URL and status.observedGeneration, only when
// something changed.
package status
