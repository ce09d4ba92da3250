// Package events is the REST storage of the Events the standalone server keeps about its own
// objects (a mount's phase changes), served as core v1 Events and as events.k8s.io/v1 Events
// from one store, as Kubernetes does: kubectl describe mount and kubectl get events work
// against the server as against a cluster. Events are bounded in age (an etcd lease, as
// kube-apiserver's --event-ttl) and in count (the oldest go first).
package events
