package proxy

import (
	"crypto/sha256"
	"crypto/x509"
	"runtime"
	"sync"
	"weak"
)

// caPools shares parsed CA bundles between Targets: mounts of one cluster with credentials of
// their own each held a parsed copy of the same CA (4-5 KiB a mount). A pool is keyed by the
// bundle's SHA-256, so only byte-identical bundles share, and is never changed once made; an
// entry goes when the last Target holding its pool has been collected.
type caPools struct {
	mu    sync.Mutex
	pools map[[sha256.Size]byte]caPool
}

type caPool struct {
	pool weak.Pointer[x509.CertPool]
	// ok says whether the bundle held at least one certificate.
	ok bool
}

func newCAPools() *caPools {
	return &caPools{pools: map[[sha256.Size]byte]caPool{}}
}

// get returns the pool of the PEM bundle, and whether it holds a certificate (an empty pool
// verifies nothing).
func (c *caPools) get(bundle []byte) (*x509.CertPool, bool) {
	key := sha256.Sum256(bundle)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, found := c.pools[key]; found {
		if pool := e.pool.Value(); pool != nil {
			return pool, e.ok
		}
	}
	pool := x509.NewCertPool()
	ok := pool.AppendCertsFromPEM(bundle)
	entry := caPool{pool: weak.Make(pool), ok: ok}
	c.pools[key] = entry
	runtime.AddCleanup(pool, func(key [sha256.Size]byte) {
		c.mu.Lock()
		defer c.mu.Unlock()
		// A later get may have made a new pool for the key: keep that one's entry.
		if c.pools[key].pool == entry.pool {
			delete(c.pools, key)
		}
	}, key)
	return pool, ok
}

// len is the number of bundles held.
func (c *caPools) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pools)
}
