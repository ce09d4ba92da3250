package aggregation

import "github.com/kcp-dev/mount-apiserver/pkg/pki"

func newRogueCA() (*pki.CA, error) { return pki.NewCA("rogue") }
