package framework

import (
	"fmt"
	"io"
	"net/http"
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

// Figures are what a server process holds, from one scrape of its /metrics.
type Figures struct {
	// RSS is process_resident_memory_bytes.
	RSS int64
	// Goroutines is go_goroutines; FDs is process_open_fds.
	Goroutines, FDs int
}

func (f Figures) String() string {
	return fmt.Sprintf("RSS %.1f MiB, %d goroutines, %d open fds", float64(f.RSS)/(1<<20), f.Goroutines, f.FDs)
}

var figureSeries = regexp.MustCompile(`(?m)^(process_resident_memory_bytes|go_goroutines|process_open_fds) (\S+)$`)

// Scraper reads Figures from one server over one client, so that scraping adds no
// connections of its own to the fds it counts.
type Scraper struct {
	client *http.Client
	url    string
}

// NewScraper scrapes the server cfg points at (a process of its own: in a test's process the
// figures would count the test too).
func NewScraper(cfg *rest.Config) (*Scraper, error) {
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return &Scraper{client: c, url: cfg.Host + "/metrics"}, nil
}

// Figures scrapes the RSS, goroutines and open fds of the server.
func (s *Scraper) Figures() (Figures, error) {
	resp, err := s.client.Get(s.url)
	if err != nil {
		return Figures{}, fmt.Errorf("scraping %s: %w", s.url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return Figures{}, err
	}
	var f Figures
	found := 0
	for _, m := range figureSeries.FindAllSubmatch(body, -1) {
		v, err := strconv.ParseFloat(string(m[2]), 64)
		if err != nil {
			return Figures{}, fmt.Errorf("%s: %w", m[1], err)
		}
		found++
		switch string(m[1]) {
		case "process_resident_memory_bytes":
			f.RSS = int64(v)
		case "go_goroutines":
			f.Goroutines = int(v)
		case "process_open_fds":
			f.FDs = int(v)
		}
	}
	if found != 3 {
		return Figures{}, fmt.Errorf("%s has %d of the 3 process series", s.url, found)
	}
	return f, nil
}
