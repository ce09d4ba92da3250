// Command soak holds proxied watches and GETs through the host aggregator against a real
// remote for a while and checks that mount-apiserver gives back what it took (package soak):
// no errors; after the load, goroutines and open fds within 5 % of the baseline and RSS within
// 20 %. It exits 1 when the goal is not met.
//
//	go run ./test/soak [-duration 60s] [-watches 500] [-rps 200]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
	"github.com/kcp-dev/mount-apiserver/test/soak/soak"
)

func main() {
	cfg := soak.Config{Out: os.Stdout}
	flag.DurationVar(&cfg.Duration, "duration", time.Minute, "how long the load lasts")
	flag.IntVar(&cfg.Watches, "watches", 500, "proxied watches held open")
	flag.IntVar(&cfg.RPS, "rps", 200, "proxied GETs per second")
	flag.StringVar(&cfg.Binary, "binary", "", "the mount-apiserver binary (default: built from ./cmd/mount-apiserver)")
	flag.DurationVar(&cfg.Settle, "settle", 0, "how long to wait after the load for the figures to return (default 2m)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	r, err := soak.Run(ctx, cfg)
	framework.RemoveBuilds()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := r.Goal(); err != nil {
		fmt.Printf("goal not met:\n%v\n", err)
		os.Exit(1)
	}
	fmt.Println("goal met: no errors; goroutines and fds within 5 % of the baseline, RSS within 20 %")
}
