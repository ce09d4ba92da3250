// Package selfreviews serves the reviews a caller makes of itself: SelfSubjectReview
// (authentication.k8s.io/v1, kubectl auth whoami), SelfSubjectAccessReview and
// SelfSubjectRulesReview (authorization.k8s.io/v1, kubectl auth can-i and can-i --list), all
// answered by this server's own authentication and authorizer. Nothing is stored.
package selfreviews
