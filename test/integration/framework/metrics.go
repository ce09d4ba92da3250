package framework

import (
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/client-go/rest"
)

// Metric returns the value of one series, written exactly as /metrics shows it before the
// value (e.g. `mount_status_writes_total` or `mount_proxy_upstream_connections_total{mount="x"}`),
// scraped from the server cfg points at; 0 when the series does not exist yet.
func Metric(cfg *rest.Config, series string) (int, error) {
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return 0, err
	}
	resp, err := c.Get(cfg.Host + "/metrics")
	if err != nil {
		return 0, fmt.Errorf("scraping %s/metrics: %w", cfg.Host, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return 0, nil
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	return int(v), err
}

// Profile saves a profile from the /debug/pprof endpoint of the server cfg points at, e.g.
// "profile?seconds=3" (CPU) or "heap?gc=1", to path.
func Profile(cfg *rest.Config, endpoint, path string) error {
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	resp, err := c.Get(cfg.Host + "/debug/pprof/" + endpoint)
	if err != nil {
		return fmt.Errorf("fetching %s/debug/pprof/%s: %w", cfg.Host, endpoint, err)
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// MetricSeries returns the series (lines of /metrics without comments) that contain substr,
// e.g. `mount="x"`, scraped from the server cfg points at.
func MetricSeries(cfg *rest.Config, substr string) ([]string, error) {
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	resp, err := c.Get(cfg.Host + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("scraping %s/metrics: %w", cfg.Host, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var series []string
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "#") && strings.Contains(line, substr) {
			series = append(series, line)
		}
	}
	return series, nil
}
