package measure

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"k8s.io/client-go/rest"
)

// Client is an HTTPS client for cfg with the transport settings client-go uses.
func Client(cfg *rest.Config) (*http.Client, error) {
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, err
	}
	// The same transport settings client-go uses: keep-alives, HTTP/2.
	return &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: tlsConfig, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 16}}, nil
}

// TimeGets sends 50 warm-up GETs of url, then times n more, and returns the samples sorted.
func TimeGets(c *http.Client, url string, n int) ([]time.Duration, error) {
	get := func() error {
		resp, err := c.Get(url)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %d", url, resp.StatusCode)
		}
		return nil
	}
	for range 50 {
		if err := get(); err != nil {
			return nil, err
		}
	}
	samples := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if err := get(); err != nil {
			return nil, err
		}
		samples = append(samples, time.Since(start))
	}
	slices.Sort(samples)
	return samples, nil
}

// ListThroughput times n LISTs of url after two warm-up ones and returns MB/s and the size of
// one answer.
func ListThroughput(c *http.Client, url string, n int) (float64, int64, error) {
	var total int64
	var elapsed time.Duration
	for i := range n + 2 {
		start := time.Now()
		resp, err := c.Get(url)
		if err != nil {
			return 0, 0, err
		}
		size, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, 0, err
		}
		if resp.StatusCode != http.StatusOK {
			return 0, 0, fmt.Errorf("LIST %s: %d", url, resp.StatusCode)
		}
		if i >= 2 { // two warm-up lists
			total += size
			elapsed += time.Since(start)
		}
	}
	return float64(total) / 1e6 / elapsed.Seconds(), total / int64(n), nil
}

// TimeReads GETs url n times asking for accept, reading each answer to its end, and returns
// the samples in order and the size of the last answer.
func TimeReads(ctx context.Context, c *http.Client, url, accept string, n int) ([]time.Duration, int64, error) {
	var samples []time.Duration
	var size int64
	for range n {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, 0, err
		}
		req.Header.Set("Accept", accept)
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			return nil, 0, err
		}
		size, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, 0, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, 0, fmt.Errorf("GET %s as %s: %d", url, accept, resp.StatusCode)
		}
		samples = append(samples, time.Since(start))
	}
	return samples, size, nil
}
